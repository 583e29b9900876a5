"""The decoding process beside `vaswani-serve`'s HTTP process: it loads the engine, decodes the requests' sentences
together (`batcher`), scores them and draws the page's attention, and answers over a pipe (`messages`).

Decoding here, not in the HTTP process, keeps it off the event loop's interpreter: the PyTorch engine's decoding
threads take the interpreter lock back after every operator, and the HTTP work and the decoding slowed each other
(docs/decisions/in-flight-batching.md). The HTTP process decides the process's end: it ignores SIGINT and SIGTERM
(the server drains first, then says `Stop`), and it ends at once when its pipe closes (the server is gone).
"""

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from ..engines.options import EngineOptions
from ..quiet import no_transformers_progress_bars, quiet_libraries
from .messages import (
    Abandon,
    Attention,
    Failed,
    Hurry,
    Maps,
    NotLoaded,
    QueueFull,
    Ready,
    SentenceTooLong,
    Stats,
    Stop,
    Translate,
    Translated,
    options_of,
)
from .settings import ServeSettings

if TYPE_CHECKING:  # torch's: imported by the decoding process only (`serve_decoding`)
    from .batcher import Batcher, Job

logger = logging.getLogger(__name__)
WARM_UP = "Hello."
# The longest source and translation, in tokens, whose attention is sent: the answer holds layers × heads × target ×
# source weights (a base model's 6 × 8 × 200 × 200 is 1.9 million), for a page that draws one sentence.
ATTENTION_TOKENS = 200
STATS_EVERY = 0.02  # seconds between reports of what decoded: the metrics lag at most this


class Replies:
    """The pipe's sending end, shared by the workers (one message at a time), and the decoding's statistics,
    gathered and sent at most every STATS_EVERY seconds (a `batcher.BatchObserver`)."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._lock = threading.Lock()
        self._stats = Stats()
        self._pending = threading.Event()
        threading.Thread(target=self._report, name="stats", daemon=True).start()

    def send(self, message: Any) -> None:
        with self._lock:
            try:
                self.connection.send(message)
            except OSError:  # the server is gone: its end of the pipe closed
                os._exit(0)

    def _report(self) -> None:
        while self._pending.wait():
            time.sleep(STATS_EVERY)
            with self._lock:
                stats, self._stats = self._stats, Stats(waiting=self._stats.waiting)
                self._pending.clear()
            self.send(stats)

    def _record(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                current = getattr(self._stats, name)
                setattr(self._stats, name, value if name == "waiting" else current + value)
        self._pending.set()

    def queued(self, sentences: int) -> None:
        self._record(waiting=sentences)

    def batch(self, sentences: int) -> None:
        self._record(batches=[sentences])

    def decoded(self, sentences: int, tokens: int, seconds: float) -> None:
        self._record(sentences=sentences, tokens=tokens, seconds=seconds)

    def dropped(self, sentences: int) -> None:
        self._record(dropped=sentences)


@dataclass
class Decoding:
    """The loaded engine, its batcher and the jobs under way, by the server's numbers."""

    engine: Any
    batcher: "Batcher"
    replies: Replies
    jobs: "dict[int, Job]"

    def translate(self, message: Translate) -> None:
        from .batcher import Job

        def finish(job: Job) -> None:
            self.jobs.pop(message.job, None)
            settings = None
            if message.want_settings:
                settings = self.engine.decoding_settings(**dict(job.options))
            self.replies.send(Translated(message.job, job.hypotheses, job.scores, settings))

        def fail(job: Job, error: Exception) -> None:
            self.jobs.pop(message.job, None)
            logger.error("decoding failed: %s", error, exc_info=error)
            self.replies.send(Failed(message.job, "error", f"{type(error).__name__}: {error}"))

        job = Job(list(message.sentences), message.options, finish, fail, message.want_scores, message.n_best)
        self.jobs[message.job] = job
        try:
            self.batcher.submit(job)
        except SentenceTooLong as error:
            self.jobs.pop(message.job, None)
            self.replies.send(Failed(message.job, "too long", "", error.index, error.tokens, error.limit))
        except QueueFull:
            self.jobs.pop(message.job, None)
            self.replies.send(Failed(message.job, "queue full"))

    def answer(self, connection: Connection, policy: str, defaults: Any) -> None:
        """Warm up, say `Ready`, then the server's messages until `Stop`; the process ends at once when the server is
        gone (its end of the pipe closed)."""
        try:
            warm_up(self.batcher, defaults)
        except Exception as error:  # a model that loads but cannot translate: the server does not start
            self.replies.send(NotLoaded(f"the model could not translate a first sentence: {error}"))
            self.batcher.stop()
            return
        engine = self.engine
        attention = engine.name == "torch" and getattr(engine, "model", None) is not None
        self.replies.send(
            Ready(engine.name, engine.max_source_tokens, attention, policy, self.batcher.workers)
        )
        while True:
            try:
                message = connection.recv()
            except (EOFError, OSError):
                os._exit(0)
            if isinstance(message, Translate):
                self.translate(message)
            elif isinstance(message, Abandon):
                self.abandon(message)
            elif isinstance(message, Attention):
                self.attention(message)
            elif isinstance(message, Hurry):
                self.batcher.hurry()
            elif isinstance(message, Stop):
                self.batcher.stop()
                return

    def abandon(self, message: Abandon) -> None:
        if (job := self.jobs.pop(message.job, None)) is not None:
            self.batcher.abandon(job)

    def attention(self, message: Attention) -> None:
        """Drawn between steps, in a thread of its own (the pipe keeps being read meanwhile)."""
        from ..plotting import attention_maps  # matplotlib: only for the page

        for name, text in (("q", message.source), ("translation", message.translation)):
            if (tokens := len(self.engine.tokenizer(text, verbose=False)["input_ids"])) > ATTENTION_TOKENS:
                problem = (
                    f"{name} holds {tokens:,} tokens; the attention of at most {ATTENTION_TOKENS} tokens a side is "
                    "sent (the page draws one sentence): send a shorter sentence."
                )
                self.replies.send(Failed(message.job, "refused", problem, status=413))
                return

        def draw() -> None:
            try:
                with self.batcher.model_idle():  # attention_maps switches the model to eager attention
                    (found,) = attention_maps(
                        self.engine.model, self.engine.tokenizer, [message.source], [message.translation]
                    )
            except Exception as error:
                self.replies.send(Failed(message.job, "error", f"{type(error).__name__}: {error}"))
                return
            maps = {
                "source_tokens": found.source_tokens,
                "target_tokens": found.target_tokens,
                "cross": [layer.tolist() for layer in found.cross],
            }
            self.replies.send(Maps(message.job, maps))

        threading.Thread(target=draw, name="attention", daemon=True).start()


def make_batcher(engine: Any, settings: ServeSettings, replies: Replies) -> tuple["Batcher", str]:
    """The engine's batcher and its policy's name: in flight where the engine allows it (`in_flight_blocker`),
    else a batch at a time."""
    from .batcher import Batcher, InFlightBatcher, in_flight_blocker
    from .scores import sentence_scores

    def encode(text: str) -> list[int]:
        return engine.tokenizer(text, verbose=False)["input_ids"]

    blocker = in_flight_blocker(engine)
    options = dict(
        max_batch_tokens=settings.max_batch_tokens,
        max_batch_sentences=settings.max_batch_sentences,
        max_wait=settings.max_wait,
        max_queue=settings.limits.max_queue,
        observer=replies,
        scorer=lambda sources, translations: sentence_scores(engine, sources, translations),
        max_source_tokens=engine.max_source_tokens,
    )
    # in flight, one worker decodes fastest, on all of torch's threads (docs/decisions/in-flight-batching.md)
    if blocker is None:
        return InFlightBatcher(engine, encode, workers=settings.decoding_workers or 1, **options), "in flight"
    workers = settings.decoding_workers or default_workers(engine)
    return Batcher(engine, encode, workers=workers, **options), f"a batch at a time ({blocker})"


def default_workers(engine: Any) -> int:
    """Workers unless told: as many batches as `translate()` decodes at once on the engine's device (two on a
    multi-core CPU, one on a GPU)."""
    import torch

    from ..decoding.translate import decoding_workers

    if engine.name == "ctranslate2":
        on_cpu = engine.translator.translator.device == "cpu"
    else:
        on_cpu = engine.model.device.type == "cpu"
    return decoding_workers(torch.device("cpu" if on_cpu else "cuda"), batches=2)


def warm_up(batcher: "Batcher", options: Any) -> None:
    """One sentence through the engine before the server says it is ready (first calls are slow)."""
    from .batcher import Job

    done = threading.Event()
    failure: list[Exception] = []
    batcher.submit(Job([WARM_UP], options, lambda job: done.set(), lambda job, error: failure.append(error)))
    while not done.wait(0.05):
        if failure:
            raise failure[0]


def serve_decoding(
    connection: Connection, model: str, engine_options: EngineOptions, settings: ServeSettings, log_level: str
) -> None:
    """The decoding process's life: load the engine (or say why not), warm it up, say `Ready`, then answer the
    server's messages until `Stop` or the server is gone."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    package = logging.getLogger(__package__.partition(".")[0])
    package.setLevel(log_level.upper())
    package.addHandler(logging.StreamHandler())
    package.handlers[-1].setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    with quiet_libraries(), no_transformers_progress_bars():
        decode_until_stopped(connection, model, engine_options, settings)


def decode_until_stopped(
    connection: Connection, model: str, engine_options: EngineOptions, settings: ServeSettings
) -> None:
    from ..engines.load import load_engine

    try:
        engine = load_engine(model, engine_options)
    except (OSError, ValueError) as error:
        connection.send(NotLoaded(str(error)))
        return
    replies = Replies(connection)
    batcher, policy = make_batcher(engine, settings, replies)
    decoding = Decoding(engine, batcher, replies, {})
    defaults = options_of(settings.defaults)
    threading.Thread(target=decoding.answer, args=(connection, policy, defaults), name="requests").start()
    batcher.serve()  # until the server says Stop
