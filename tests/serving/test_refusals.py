"""What `vaswani-serve` refuses, the real server in a subprocess: a sentence longer than the model translates whole
(413, on every route: never cut silently), an output limit beyond the model's positions, the attention route
without a key or beyond its size, text that is not valid Unicode (a lone surrogate, a percent-encoded Latin-1
byte), JSON nested too deeply or not an object, a body that never arrives whole, and start-up flags that cannot
listen. Each is JSON with its status and one line, never a 500."""

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import httpx
import pytest

from tests.conftest import save_random_model
from tests.serving.server_process import CPU_FLOAT32, ENV, free_port, serve_command, serving

pytestmark = pytest.mark.slow  # server processes (fresh interpreters loading a model)

PAIR = ("--source_lang", "en", "--target_lang", "de")
POSITIONS = 24  # the model's position table: a 30-word sentence does not fit
LONG_SENTENCE = " ".join(["house"] * 30) + "."


@pytest.fixture(scope="module")
def short_folder(trained_run, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_random_model(
        trained_run.model_dir, tmp_path_factory.mktemp("short") / "model", max_position_embeddings=POSITIONS
    )


@pytest.fixture(scope="module")
def server(short_folder: Path, tmp_path_factory: pytest.TempPathFactory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text("the-key\n", encoding="utf-8")
    flags = (*PAIR, "--num_beams", "1", "--api_keys", str(keys), "--request_timeout", "3")
    with serving(short_folder, *flags) as served:
        yield served


KEY = {"api_key": "the-key"}


def refused(answer: httpx.Response, status: int, *said: str) -> None:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    message = answer.json()["error"]
    assert "\n" not in message and all(part in message for part in said), message


def test_a_sentence_longer_than_the_model_translates_is_refused_on_every_route_never_cut(server) -> None:
    libretranslate = httpx.post(f"{server.url}/translate", json={"q": LONG_SENTENCE, **KEY}, timeout=60)
    refused(libretranslate, 413, "Sentence 1", f"at most {POSITIONS} tokens a sentence", "cuts none")
    native = httpx.post(f"{server.url}/v1/translate", json={"q": ["Hi.", LONG_SENTENCE], **KEY}, timeout=60)
    refused(native, 413, "Sentence 2")
    split = httpx.post(
        f"{server.url}/v1/translate",
        json={"q": "A dog runs. " * 8, "split_sentences": True, **KEY},
        timeout=60,
    )
    assert split.status_code == 200, split.text  # the same length in sentences that fit
    assert "Traceback" not in server.stderr()


def test_an_output_limit_beyond_the_positions_is_refused(server) -> None:
    for tokens in (POSITIONS + 1, 10**9):
        answer = httpx.post(
            f"{server.url}/v1/translate", json={"q": "Hi.", "max_new_tokens": tokens, **KEY}, timeout=60
        )
        refused(answer, 422, "max_new_tokens", f"at most {POSITIONS}")


def test_the_attention_route_needs_a_key_and_bounds_its_answer(server) -> None:
    body = {"q": "A dog.", "translation": "Ein Hund."}
    refused(httpx.post(f"{server.url}/v1/attention", json=body, timeout=60), 403, "API key")
    answered = httpx.post(f"{server.url}/v1/attention", json={**body, **KEY}, timeout=60)
    assert answered.status_code == 200, answered.text
    assert len(answered.json()["cross"][0][0][0]) == len(answered.json()["source_tokens"])
    long = {"q": " ".join(["house"] * 300), "translation": "Haus.", **KEY}
    refused(httpx.post(f"{server.url}/v1/attention", json=long, timeout=60), 413, "q holds", "tokens")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b'{"q": "Hi \\ud800", "api_key": "the-key"}', "q holds a lone surrogate (\\ud800)"),
        (b'{"q": "Hi.", "api_key": "\\udfff"}', "api_key holds a lone surrogate"),
        (b"[" * 50_000 + b"]" * 50_000, "nested too deeply"),
        (b"[1, 2]", "got an array"),
        (b"null", "got null"),
    ],
)
def test_json_that_is_no_text_or_no_object_is_refused(server, content: bytes, said: str) -> None:
    for route in ("/translate", "/v1/translate"):
        answer = httpx.post(
            f"{server.url}{route}", content=content, headers={"Content-Type": "application/json"}, timeout=60
        )
        refused(answer, 400, said)


def test_percent_encoded_bytes_that_are_not_utf8_are_refused_not_replaced(server) -> None:
    form = httpx.post(
        f"{server.url}/translate",
        content=b"q=caf%E9&api_key=the-key",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=60,
    )
    refused(form, 400, "not UTF-8", "%E9")
    query = httpx.post(f"{server.url}/translate?q=caf%E9&api_key=the-key", timeout=60)
    refused(query, 400, "query string holds percent-encoded bytes that are not UTF-8")
    accepted = httpx.post(f"{server.url}/translate?q=caf%C3%A9&api_key=the-key", timeout=60)
    assert accepted.status_code == 200, accepted.text


def test_a_body_that_never_arrives_whole_is_answered_within_the_request_timeout(server) -> None:
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(
            b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 500\r\n\r\n" + b'{"q": "Hi."'
        )
        started = time.monotonic()
        answer = b""
        while b"}" not in answer and (chunk := client.recv(65536)):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer
    answer = answer.decode()
    assert "--request_timeout" in answer and time.monotonic() - started < 20


def exchange(server, request: bytes, seconds: float = 30) -> bytes:
    """What the server sends back on one connection for `request`, until it closes the connection."""
    host, port = server.url.removeprefix("http://").split(":")
    answer = b""
    with socket.create_connection((host, int(port)), timeout=seconds) as client:
        client.sendall(request)
        while chunk := client.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"Content-Length: -5\r\n\r\n{}",
        b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"Transfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
        b"No colon here\r\n\r\n",
    ],
    ids=["negative length", "two lengths", "bad chunk size", "bad header"],
)
def test_a_request_that_is_not_http_is_refused_in_json(server, request_bytes: bytes) -> None:
    answer = exchange(server, b"POST /translate HTTP/1.1\r\nHost: x\r\n" + request_bytes)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer
    assert b"content-type: application/json" in head.lower()
    assert "not valid HTTP/1.1" in json.loads(body)["error"]


def test_a_connection_that_sends_nothing_is_closed(server) -> None:
    started = time.monotonic()
    assert exchange(server, b"") == b""  # closed by the server, not by the client's 30 s timeout
    assert time.monotonic() - started < 20


def test_a_client_that_sends_a_large_body_whole_before_reading_gets_the_413(server) -> None:
    """Python's urllib sends the whole body before it reads: the server reads and drops it after refusing it, so
    the client gets the refusal, not a connection reset."""
    body = json.dumps({"q": "a " * 6_000_000, **KEY}).encode()  # 12 MB against the default 1 MiB
    request = urllib.request.Request(
        f"{server.url}/translate", data=body, headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as refusal:
        urllib.request.urlopen(request, timeout=60)
    assert refusal.value.code == 413
    assert "--max_body_bytes" in json.loads(refusal.value.read())["error"]


def test_head_of_health_is_answered(server) -> None:
    assert httpx.head(f"{server.url}/health", timeout=30).status_code == 200


def test_the_api_pages_do_not_name_the_models_path(server, short_folder: Path) -> None:
    schema = httpx.get(f"{server.url}/openapi.json", timeout=30).text
    assert str(short_folder.parent) not in schema and short_folder.name in schema


def started(folder: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*serve_command(folder, free_port(), *CPU_FLOAT32, *PAIR), *flags],
        capture_output=True, text=True, env=ENV, timeout=300,
    )  # fmt: skip


def test_flags_that_cannot_listen_exit_2_before_the_model_loads(short_folder: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        in_use = started(short_folder, "--port", str(port))  # the last --port wins
    for completed, said in (
        (in_use, f"port {port} on 127.0.0.1 is in use by another process"),
        (started(short_folder, "--port", "70000"), "--port must be at most 65535, got 70000"),
        (started(short_folder, "--host", "999.1.1.1"), "--host 999.1.1.1 is not an IPv4 address"),
    ):
        assert completed.returncode == 2, completed.stderr[-3000:]
        assert said in completed.stderr and "Traceback" not in completed.stderr


def test_a_batch_whose_requests_all_timed_out_stops_and_frees_its_worker(trained_run, tmp_path: Path) -> None:
    """A request answered 504 (--request_timeout) left its batch decoding to the end, the worker answering nobody
    meanwhile: now the batch stops at its next step, and the next request is decoded at once."""
    # random weights decode every sentence to its limit
    folder = save_random_model(trained_run.model_dir, tmp_path / "model")
    long_request = {"q": [" ".join(["house"] * 300)] * 8, "num_beams": 16, "max_new_tokens": 1000}
    flags = (*PAIR, "--decoding_workers", "1", "--request_timeout", "3", "--max_wait_ms", "0")
    with serving(folder, *flags) as served:
        timed_out = httpx.post(f"{served.url}/v1/translate", json=long_request, timeout=120)
        refused(timed_out, 504, "--request_timeout")
        started = time.monotonic()
        answer = httpx.post(f"{served.url}/v1/translate", json={"q": "Hi.", "num_beams": 1}, timeout=120)
        waited = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    assert waited < 10, waited  # not the rest of the long batch (about 40 s on 2 cores)


def test_idle_connections_past_the_open_file_limit_leave_the_server_answering(short_folder: Path) -> None:
    """Under `ulimit -n 120`, 150 idle connections take every file descriptor. The server closes those it could
    not accept at once and the rest after the keep-alive timeout, while their clients stay, so a new request is
    answered within seconds; no log line is written for each accept that failed meanwhile."""
    with serving(short_folder, *PAIR, open_files=120) as served:
        host, port = served.url.removeprefix("http://").split(":")
        started = time.monotonic()
        idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(150)]
        try:
            closed_by_the_server = [connection.recv(1) == b"" for connection in idle]
            answer = httpx.get(f"{served.url}/health", timeout=60)
        finally:
            for connection in idle:
                connection.close()
        waited = time.monotonic() - started
        log = served.stderr()
    assert all(closed_by_the_server)
    assert answer.status_code == 200 and waited < 30, waited
    assert len(log.splitlines()) < 20, log[-3000:]
