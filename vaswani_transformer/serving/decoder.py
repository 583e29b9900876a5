"""The HTTP process's handle on the decoding process (`decoding_process`): it starts it, sends each request's
sentences and awaits their translations, passes on a client that went away, keeps the metrics the decoding reports,
and ends it. No torch here: the HTTP process only parses, splits, routes and answers."""

import asyncio
import contextlib
import itertools
import logging
import multiprocessing
import threading
import time
from concurrent.futures import Future
from typing import Any

from ..engines.options import EngineOptions
from .decoding_process import serve_decoding
from .limits import ApiError
from .messages import (
    Abandon,
    Attention,
    DecodingFailed,
    Failed,
    Hurry,
    Maps,
    NotLoaded,
    Options,
    QueueFull,
    Ready,
    SentenceTooLong,
    Stats,
    Stop,
    Translate,
    Translated,
)
from .metrics import ServerMetrics
from .settings import ServeSettings

logger = logging.getLogger(__name__)
START_SECONDS = 3600  # the longest a model may take to load (a Hub download, a first CTranslate2 conversion)


class Decoder:
    """The decoding process for `model` (`start`, `translate`, `attention`, `hurry`, `stop`)."""

    def __init__(
        self,
        model: str,
        engine_options: EngineOptions,
        settings: ServeSettings,
        metrics: ServerMetrics,
        log_level: str = "info",
    ) -> None:
        self.model, self.engine_options, self.settings = model, engine_options, settings
        self.metrics, self.log_level = metrics, log_level
        self.ready: Ready | None = None
        self.ended: str | None = None  # why the decoding process is gone, once it is
        self._numbers = itertools.count()
        self._pending: dict[int, Future] = {}
        self._send_lock = threading.Lock()
        self._connection: Any = None
        self._process: Any = None

    def start(self) -> Ready:
        """Start the decoding process and wait until its engine is loaded and warm: a ValueError with its message
        where the engine does not load, RuntimeError where the process ends without a word."""
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads forked half-way
        ours, theirs = context.Pipe()
        self._process = context.Process(
            target=serve_decoding,
            args=(theirs, self.model, self.engine_options, self.settings, self.log_level),
            name="vaswani-decoding",
            daemon=True,
        )
        self._process.start()
        theirs.close()
        self._connection = ours
        deadline = time.monotonic() + START_SECONDS
        while not ours.poll(0.1):
            if not self._process.is_alive() or time.monotonic() > deadline:
                self._process.kill()
                raise RuntimeError(f"the decoding process ended (exit status {self._process.exitcode})")
        while isinstance(first := ours.recv(), Stats):  # the warm-up's
            self._record(first)
        if isinstance(first, NotLoaded):
            self._process.join()
            raise ValueError(first.message)
        self.ready = first
        threading.Thread(target=self._read, name="decoding-replies", daemon=True).start()
        return first

    @property
    def process_id(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _send(self, message: Any) -> None:
        with self._send_lock:
            self._connection.send(message)

    def _read(self) -> None:
        """The decoding process's replies, each handed to the request awaiting it; its metrics kept."""
        while True:
            try:
                message = self._connection.recv()
            except (EOFError, OSError):
                break
            if isinstance(message, Stats):
                self._record(message)
                continue
            future = self._pending.pop(message.job, None)
            if future is None or future.done():  # a request that has gone meanwhile
                continue
            if isinstance(message, Failed):
                future.set_exception(_error(message))
            else:
                future.set_result(message)
        self._process.join(5)
        self.ended = f"the decoding process ended (exit status {self._process.exitcode})"
        if self._pending:
            logger.error("%s: answering the open requests 503", self.ended)
        for future in list(self._pending.values()):
            if not future.done():
                future.set_exception(DecodingFailed(self.ended))
        self._pending.clear()

    def _record(self, stats: Stats) -> None:
        metrics = self.metrics
        metrics.queued(stats.waiting)
        for sentences in stats.batches:
            metrics.batch(sentences)
        if stats.sentences or stats.seconds:
            metrics.decoded(stats.sentences, stats.tokens, stats.seconds)
        if stats.dropped:
            metrics.dropped(stats.dropped)

    async def _ask(self, job: int, message: Any) -> Any:
        """Send `message` and await its reply; a cancelled caller (a client gone, a timeout) abandons its job."""
        if self.ended is not None:
            raise DecodingFailed(self.ended)
        future: Future = Future()
        self._pending[job] = future
        self._send(message)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if self._pending.pop(job, None) is not None and self.ended is None:
                self._send(Abandon(job))
            raise

    async def translate(
        self,
        sentences: list[str],
        options: Options,
        want_scores: bool = False,
        n_best: int = 1,
        want_settings: bool = False,
    ) -> Translated:
        """Each sentence's hypotheses (best first), decoded with the other requests' sentences."""
        job = next(self._numbers)
        message = Translate(job, sentences, options, want_scores, n_best, want_settings)
        return await self._ask(job, message)

    async def attention(self, source: str, translation: str) -> dict[str, Any]:
        """The page's attention maps of `translation` given `source`."""
        job = next(self._numbers)
        reply: Maps = await self._ask(job, Attention(job, source, translation))
        return reply.maps

    def hurry(self) -> None:
        """The server is shutting down: what waits decodes now, without waiting for company."""
        if self.ended is None:
            self._send(Hurry())

    def stop(self, wait: float | None = None) -> None:
        """Let the decoding process decode what it holds and end; after `wait` seconds (None: no limit) it is
        killed (past --shutdown_timeout, a batch still decoding must not hold the exit)."""
        if self._process is None:
            return
        if self.ended is None and self._process.is_alive():
            with contextlib.suppress(OSError):  # it ended meanwhile
                self._send(Stop())
        self._process.join(wait)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


def _error(failed: Failed) -> Exception:
    if failed.kind == "refused":
        return ApiError(failed.status, failed.message)
    if failed.kind == "too long":
        return SentenceTooLong(failed.index, failed.tokens, failed.limit)
    if failed.kind == "queue full":
        return QueueFull()
    return DecodingFailed(failed.message)
