r"""Serve a trained model over HTTP: LibreTranslate's API (POST /translate, POST /detect, GET /languages,
GET /frontend/settings), so that its clients work unchanged, a native API with decoding options and per-sentence
scores (POST /v1/translate), GET /health, GET /ready, GET /metrics (Prometheus), the API's pages at /docs and a
web page at /.

The model decodes in a process of its own beside the HTTP one, so that decoding never holds up the server's
answers. Under --engine torch the sentences of all requests decode in flight: they join the running beam search
at its next step boundaries and leave it as soon as they are done, so none waits for another to end; the search
holds at most --batch_size sentences and --max_batch_tokens padded source tokens. Under --engine ctranslate2 and
onnxruntime a free worker decodes what waits in one batch (after at most --max_wait_ms for company);
--decoding_workers decode at once (default: one in flight; two batches on a multi-core CPU, one on a GPU). Each
sentence's output limit is its own (§6.1), so what decodes beside it does not change its translation.
LibreTranslate's API translates a text sentence by sentence and joins the translations with the text's own spacing
(the native API with "split_sentences": true); source "auto" detects the language, "format": "html" translates
an HTML text's text nodes and keeps its markup, "alternatives" returns the beam's other hypotheses.
Decoding is the model's (the paper's §6.1) unless --num_beams or --length_penalty say otherwise; a native request
may set its own.

It listens on 127.0.0.1 only, unless --host says otherwise (0.0.0.0: every interface). With --api_keys, each
request must send one of the file's keys (api_key, or the header Authorization: Bearer KEY); --requests_per_minute
limits each key (or, without keys, each client address). Browsers of other sites may call it only from
--cors_origins. Requests larger than the limits below are refused with a JSON error naming the flag; a full queue
answers 503 with Retry-After.

SIGTERM or Ctrl-C: new requests get 503, accepted ones are answered, and the server exits 0 (at most
--shutdown_timeout seconds later: the requests still open then get 503 with Retry-After); a second signal exits at
once (status 128 + the signal's number).

    vaswani-serve runs/tatoeba-en-de/final
    curl -s localhost:8000/translate -H 'Content-Type: application/json' \
        -d '{"q": "I love you. Where is the station?", "source": "en", "target": "de"}'
    vaswani-serve you/tatoeba-en-de --engine ctranslate2 --quantize int8 --host 0.0.0.0 --api_keys keys.txt

Exit status: 0 after a signal, 2 for bad options or a model that does not load (before it listens).
"""

import argparse
import errno
import ipaddress
import logging
import re
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from ..decoding.sentences import recorded_languages
from ..extras import MissingExtra, check_extra
from ..serving.limits import ServerLimits, read_api_keys
from ..serving.settings import ServeSettings
from ..values import finite_float
from .command import log_to_stderr
from .decoding import add_decoding_arguments, engine_options, generate_overrides

DEFAULTS = ServerLimits()
POSITIVE = (
    "port",
    "max_body_bytes",
    "max_characters",
    "max_sentences",
    "max_queue",
    "max_batch_tokens",
    "request_timeout",
    "shutdown_timeout",
    "max_beams",
)


def _flag(parser: argparse._ActionsContainer, name: str, kind: type, default: object, text: str) -> None:
    parser.add_argument(f"--{name}", f"--{name.replace('_', '-')}", type=kind, default=default, help=text)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vaswani-serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="trained model folder (e.g. runs/tatoeba-en-de/final) or Hub id")
    add_decoding_arguments(parser)
    server = parser.add_argument_group("server")
    limits = parser.add_argument_group("batches and limits")
    access = parser.add_argument_group("access")
    _flag(server, "host", str, "127.0.0.1", "address to listen on (default 127.0.0.1: this machine only)")
    _flag(server, "port", int, 8000, "port to listen on (default 8000)")
    _flag(
        server, "source_lang", str, None, "the model's source language code (default: as its folder records)"
    )
    _flag(
        server, "target_lang", str, None, "the model's target language code (default: as its folder records)"
    )
    _flag(limits, "max_batch_tokens", int, 4096, "padded source tokens per decoded batch (default 4096)")
    _flag(
        limits,
        "max_wait_ms",
        finite_float,
        0.0,
        "how long a sentence waits for others to batch with (ms; --engine ctranslate2 and onnxruntime)",
    )
    _flag(
        limits,
        "decoding_workers",
        int,
        None,
        "searches or batches that decode at once (default: one search in flight; two batches on a multi-core "
        "CPU, one on a GPU)",
    )
    _flag(limits, "max_body_bytes", int, DEFAULTS.max_body_bytes, "largest request body in bytes")
    _flag(limits, "max_characters", int, DEFAULTS.max_characters, "most characters of text per request")
    _flag(limits, "max_sentences", int, DEFAULTS.max_sentences, "most sentences per request")
    _flag(limits, "max_queue", int, DEFAULTS.max_queue, "most sentences waiting to decode; beyond, 503")
    _flag(limits, "max_beams", int, DEFAULTS.max_beams, "largest num_beams a native request may ask for")
    _flag(
        limits,
        "request_timeout",
        finite_float,
        DEFAULTS.request_timeout,
        "seconds a request may take; then 504",
    )
    _flag(
        server,
        "shutdown_timeout",
        finite_float,
        30.0,
        "seconds the accepted requests get after a signal; then 503",
    )
    _flag(
        access, "api_keys", Path, None, "file of API keys, one a line, each optionally followed by its rate"
    )
    _flag(access, "requests_per_minute", finite_float, None, "requests a minute per key (or client address)")
    access.add_argument(
        "--cors_origins",
        "--cors-origins",
        nargs="+",
        default=[],
        help="web origins whose pages may call the server (default: none)",
    )
    _flag(server, "log_level", str, "info", "uvicorn's log level (default info)")
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, ServeSettings]:
    """The arguments and the settings they give, checked before the model loads."""
    parser = build_parser()
    args = parser.parse_args(argv)
    options = engine_options(parser, args)
    for name in POSITIVE:
        if getattr(args, name) <= 0:
            parser.error(f"--{name} must be positive, got {getattr(args, name)}")
    if args.port > 65535:
        parser.error(f"--port must be at most 65535, got {args.port}")
    if args.decoding_workers is not None and args.decoding_workers < 1:
        parser.error(f"--decoding_workers must be at least 1, got {args.decoding_workers}")
    if args.max_wait_ms < 0 or (args.requests_per_minute is not None and args.requests_per_minute <= 0):
        parser.error("--max_wait_ms must not be negative, and --requests_per_minute must be positive")
    keys = None
    if args.api_keys is not None:
        try:
            keys = read_api_keys(args.api_keys)
        except (OSError, UnicodeDecodeError, ValueError) as error:
            parser.error(f"--api_keys: {error}")
    args.engine_options = options
    settings = ServeSettings(
        source=args.source_lang or "",
        target=args.target_lang or "",
        limits=ServerLimits(
            max_body_bytes=args.max_body_bytes,
            max_characters=args.max_characters,
            max_sentences=args.max_sentences,
            max_queue=args.max_queue,
            request_timeout=args.request_timeout,
            max_beams=args.max_beams,
        ),
        defaults=generate_overrides(args),
        max_batch_tokens=args.max_batch_tokens,
        max_batch_sentences=args.batch_size or 128,
        max_wait=args.max_wait_ms / 1000,
        decoding_workers=args.decoding_workers,
        api_keys=keys,
        requests_per_minute=args.requests_per_minute,
        cors_origins=tuple(args.cors_origins),
    )
    return args, settings


def language_pair(args: argparse.Namespace) -> tuple[str, str]:
    """The pair the flags name, else the one the model records; a ValueError naming the flags when neither."""
    if args.source_lang and args.target_lang:
        return args.source_lang, args.target_lang
    recorded = recorded_languages(args.model) or (None, None)
    source, target = args.source_lang or recorded[0], args.target_lang or recorded[1]
    if not source or not target:
        raise ValueError(
            f"{args.model} does not record its language pair (train_options.json, or config.json's langs): give "
            "--source_lang and --target_lang."
        )
    return source, target


def check_address(host: str, port: int) -> None:
    """The server can listen on host:port: an OSError naming the flag when the host is no address of this machine
    or the port is taken, found before the model loads (the socket is closed again at once)."""
    if re.fullmatch(r"[\d.]+", host):  # looks like IPv4: never a name to look up
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise OSError(
                f"--host {host} is not an IPv4 address: give one such as 127.0.0.1 or 0.0.0.0."
            ) from None
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise OSError(f"--host {host} is not an address of this machine ({error.strerror}).") from None
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise OSError(
                    f"port {port} on {host} is in use by another process: stop it, or give another --port."
                ) from None
            raise OSError(
                f"cannot listen on {host}:{port} ({error.strerror}): give another --host or --port."
            ) from None


def shown_name(model: str) -> str:
    """The model as the API's pages name it: a Hub id, or a local folder's name (never its path on this machine)."""
    path = Path(model).expanduser()
    return path.resolve().name if path.exists() else model


def main(argv: Sequence[str] | None = None) -> int:
    """Start the decoding process (exit 2 if the model does not load), then serve until a signal; 0 after a
    graceful end."""
    args, settings = parse_args(argv)
    try:
        check_extra("serve", "vaswani-serve")
    except MissingExtra as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from ..serving.app import create_app
    from ..serving.decoder import Decoder
    from ..serving.metrics import ServerMetrics
    from ..serving.server import run_server

    try:
        check_address(args.host, args.port)
        source, target = language_pair(args)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    log_to_stderr(args.log_level, "%(levelname)s:%(name)s:%(message)s")
    settings = ServeSettings(**{**settings.__dict__, "source": source, "target": target})
    metrics = ServerMetrics()
    decoder = Decoder(str(args.model), args.engine_options, settings, metrics, args.log_level)
    try:
        ready = decoder.start()
    except (RuntimeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    logging.getLogger(__name__).info(
        "%s engine, decoding %s on %d worker(s) in process %d",
        ready.engine,
        ready.policy,
        ready.workers,
        decoder.process_id,
    )
    app = create_app(decoder, settings, metrics, model_name=shown_name(str(args.model)))
    run_server(app, args.host, args.port, args.shutdown_timeout, args.log_level)
    return 0
