"""Running the app under uvicorn with a graceful end: the first SIGTERM or SIGINT makes the server drain (new
requests get 503, `/ready` says so), and it exits once every accepted request is answered (then it stops listening
and answers what had reached it before that) or `shutdown_timeout` seconds have passed, whichever is first: the
requests still open then are answered 503 with Retry-After (their sentences dropped), and the decoding process is
ended at once. A second signal ends the process at once, with the signal's exit status (128 + its number); the
decoding process ends with it (its pipe closes).

Each connection is uvicorn's httptools protocol with two changes (`Connection`): a request it cannot parse is
refused in JSON like every other refusal, and a connection that sends nothing is closed after uvicorn's keep-alive
timeout, as an idle one is between requests, so idle connections cannot hold every file descriptor."""

import asyncio
import json
import logging
import os
import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .app import ServerState
from .decoder import Decoder

logger = logging.getLogger(__name__)
GRACE_AFTER_DRAIN = 1.0  # seconds uvicorn then gives open connections to send what they have
ANSWER_WHAT_IS_OPEN = 5.0  # seconds the requests still open at the shutdown timeout get to send their 503


NOT_HTTP = (
    "The request is not valid HTTP/1.1 (its request line, a header, Content-Length or a chunk size): send a "
    "well-formed request."
)


class Connection(HttpToolsProtocol):
    """One client connection: uvicorn's, refusing malformed requests in JSON and closing a connection that sends
    nothing within the keep-alive timeout."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # cancelled by the first byte, as between requests
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": NOT_HTTP}).encode("ascii")
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


class DrainingServer(uvicorn.Server):
    """uvicorn's server, ending as this module says rather than at once on the first signal."""

    def __init__(
        self, config: uvicorn.Config, state: ServerState, decoder: Decoder, shutdown_timeout: float
    ) -> None:
        super().__init__(config)
        self.state, self.decoder, self.shutdown_timeout = state, decoder, shutdown_timeout
        self.drain_deadline: float | None = None
        self.hurried = False
        self.listening_stopped: float | None = None  # when it stopped listening, once drained

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_deadline is not None:
            logger.warning("%s again: exiting at once", signal.Signals(sig).name)
            os._exit(128 + sig)
        logger.warning(
            "%s: answering the accepted requests (at most %g s), refusing new ones; send it again to exit at once",
            signal.Signals(sig).name,
            self.shutdown_timeout,
        )
        self.state.draining = True
        self.drain_deadline = time.monotonic() + self.shutdown_timeout

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is None:
            return await super().on_tick(counter)
        if (
            not self.hurried
        ):  # here, not in the signal handler: it may have interrupted a message to the decoder
            self.decoder.hurry()  # the accepted sentences decode now, without waiting for company
            self.hurried = True
        if time.monotonic() >= self.drain_deadline + ANSWER_WHAT_IS_OPEN:
            return True
        if self.state.open_requests == 0 and self.stopped_listening():
            return True
        if time.monotonic() >= self.drain_deadline and not self.state.out_of_time.is_set():
            logger.warning(
                "%d request(s) still open after --shutdown_timeout %g s: answering them 503",
                self.state.open_requests,
                self.shutdown_timeout,
            )
            self.state.out_of_time.set()
        return await super().on_tick(counter)

    def stopped_listening(self) -> bool:
        """Whether the server may end now that no request is open: it first stops listening, then answers (503)
        what reached it before that, until no connection is left or GRACE_AFTER_DRAIN has passed. Ending while
        connections still held unread requests reset them: requests sent before the signal went unanswered."""
        if self.listening_stopped is None:
            for server in self.servers:
                server.close()
            self.listening_stopped = time.monotonic()
        return (
            not self.server_state.connections
            or time.monotonic() >= self.listening_stopped + GRACE_AFTER_DRAIN
        )

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGINT and SIGTERM call `handle_exit` while the server runs (uvicorn's own would raise the signal again
        at the end, and the exit status would be the signal's, not 0)."""
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def open_files_to_the_hard_limit() -> None:
    """Raise the soft limit on open files (`ulimit -n`, often 1,024) to the hard one, as servers do: each client
    connection holds a file descriptor. A hard limit the kernel does not take as a soft one is left as it is."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def run_server(app: FastAPI, host: str, port: int, shutdown_timeout: float, log_level: str = "info") -> None:
    """Serve `app` on host:port until a signal ends it as this module says."""
    open_files_to_the_hard_limit()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        loop="uvloop",
        http=Connection,
        timeout_graceful_shutdown=GRACE_AFTER_DRAIN,
    )
    DrainingServer(config, app.state.server, app.state.decoder, shutdown_timeout).run()
