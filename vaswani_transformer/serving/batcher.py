"""Dynamic batching: the sentences of requests that arrive together decode together, on worker threads.

Each request's sentences join one queue. A free worker takes the oldest sentence, waits at most `max_wait` seconds
for more to arrive (not when a full batch left sentences behind: they decode next, at once), and decodes, in one
call of the engine's `translate` (which sorts them by length), the waiting sentences that share its decoding
options, up to `max_batch_tokens` padded source tokens and `max_batch_sentences` sentences. A request is answered
as soon as its last sentence is done; the sentences of a request whose client went away are dropped before they
decode. The event loop only enqueues and awaits: decoding never blocks it.

`workers` batches decode at once, each worker on its share of torch's intra-op threads, as `translate()` decodes
its batches on a multi-core CPU (`decoding_workers`; docs/decisions/decoding-batches.md): one batch of a small
model leaves a core idle while it is in Python, and a worker thread that is not the main one computes a small
model's step slower on two intra-op threads than on one.
"""

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import StoppingCriteriaList

from ..decoding.engine import Engine
from ..decoding.translate import StopWhen, intra_op_threads

# Engines whose translate() takes generate()'s stopping criteria (CTranslate2 decodes a batch to its end).
STOPPABLE_ENGINES = ("torch", "onnxruntime")

Options = tuple[tuple[str, Any], ...]  # decoding overrides, hashable: requests with equal ones share a batch


class QueueFull(Exception):
    """More sentences are waiting than the queue holds (`--max_queue`)."""


class SentenceTooLong(Exception):
    """A sentence longer than the engine translates whole (`Engine.max_source_tokens`): never cut silently."""

    def __init__(self, index: int, tokens: int, limit: int) -> None:
        super().__init__(f"sentence {index + 1} holds {tokens:,} tokens, more than {limit:,}")
        self.index, self.tokens, self.limit = index, tokens, limit


class BatchObserver(Protocol):
    """What the batcher reports (`metrics.ServerMetrics`)."""

    def queued(self, sentences: int) -> None: ...
    def decoded(self, sentences: int, tokens: int, seconds: float) -> None: ...
    def dropped(self, sentences: int) -> None: ...


@dataclass
class Job:
    """One request's sentences, their translations and (if asked) scores as they are done, and its future."""

    sentences: list[str]
    options: Options
    want_scores: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    translations: list[str | None] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    remaining: int = 0
    abandoned: bool = False

    def __post_init__(self) -> None:
        self.translations = [None] * len(self.sentences)
        self.scores = [None] * len(self.sentences)
        self.remaining = len(self.sentences)


@dataclass
class Item:
    """One sentence waiting: its job, its place there, its source length in tokens and when it arrived."""

    job: Job
    index: int
    tokens: int
    arrived: float


Scorer = Callable[[Sequence[str], Sequence[str]], list[float | None]]


class Batcher:
    """The decoding worker and its queue (`start`, `translate`, `stop`)."""

    def __init__(
        self,
        engine: Engine,
        count_tokens: Callable[[str], int],
        *,
        max_batch_tokens: int,
        max_batch_sentences: int,
        max_wait: float,
        max_queue: int,
        observer: BatchObserver,
        scorer: Scorer | None = None,
        workers: int = 1,
        max_source_tokens: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}.")
        self.engine, self.count_tokens, self.scorer, self.observer = engine, count_tokens, scorer, observer
        self.max_batch_tokens, self.max_batch_sentences = max_batch_tokens, max_batch_sentences
        self.max_wait, self.max_queue = max_wait, max_queue
        # the engine's (`Engine.max_source_tokens`); None: no limit
        self.max_source_tokens = max_source_tokens
        self._waiting: deque[Item] = deque()
        self._condition = threading.Condition()
        self._stopping = self._hurrying = False
        self._left_over = False  # sentences a full batch left behind: they have waited their share already
        # Each worker holds its own lock while it decodes; `model_idle` holds them all.
        self._locks = [threading.Lock() for _ in range(workers)]
        # each worker's share of torch's threads, as `decoded_batches` gives its workers
        self._threads_each = max(1, torch.get_num_threads() // workers) if workers > 1 else None
        self._threads = [
            threading.Thread(target=self._work, args=(lock,), name=f"decoding-{number}", daemon=True)
            for number, lock in enumerate(self._locks)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, wait: float | None = None) -> None:
        """Decode what is waiting, then end the workers; `wait`: at most that many seconds for a batch still
        decoding (its daemon thread ends with the process), None: until it is done."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join(wait)

    @property
    def decoding(self) -> bool:
        """Whether a worker is still at work (after `stop(wait=...)` ran out: a batch past the shutdown timeout)."""
        return any(thread.is_alive() for thread in self._threads)

    @contextmanager
    def model_idle(self) -> Iterator[None]:
        """No batch decodes inside (others use the model between batches: the page's attention)."""
        with ExitStack() as held:
            for lock in self._locks:  # always in the same order: two callers cannot each hold a part
                held.enter_context(lock)
            yield

    def hurry(self) -> None:
        """From now on, decode what waits without waiting for company (the server is shutting down)."""
        with self._condition:
            self._hurrying = True
            self._condition.notify_all()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, sentences: list[str], options: Options, want_scores: bool) -> Job:
        """Queue a request's sentences (SentenceTooLong for one the engine would cut, QueueFull when they do not
        fit beside the live requests' sentences); its future resolves in the loop."""
        loop = asyncio.get_running_loop()
        job = Job(sentences, options, want_scores, loop, loop.create_future())
        if not sentences:
            job.future.set_result(None)
            return job
        now = time.monotonic()
        items = [Item(job, index, self.count_tokens(text), now) for index, text in enumerate(sentences)]
        limit = self.max_source_tokens
        if limit is not None and (too_long := next((item for item in items if item.tokens > limit), None)):
            raise SentenceTooLong(too_long.index, too_long.tokens, limit)
        with self._condition:
            self._drop_abandoned()  # a client that left holds no place in the queue
            if self._stopping or len(self._waiting) + len(items) > self.max_queue:
                raise QueueFull
            self._waiting.extend(items)
            self._condition.notify_all()  # a worker waiting for company may now have a full batch
        self.observer.queued(len(self._waiting))
        return job

    async def translate(
        self, sentences: list[str], options: Options, want_scores: bool = False
    ) -> tuple[list[str], list[float | None]]:
        """The translations (and scores) of `sentences`, decoded with the other requests' sentences; a cancelled
        caller (a client gone, a timeout) has its sentences dropped."""
        job = self.submit(sentences, options, want_scores)
        try:
            await job.future
        except asyncio.CancelledError:
            job.abandoned = True
            raise
        return [text or "" for text in job.translations], job.scores

    def _work(self, lock: threading.Lock) -> None:
        with ExitStack() as threads:
            if self._threads_each is not None:
                threads.enter_context(intra_op_threads(self._threads_each))
            while (batch := self._next_batch()) is not None:
                if batch:
                    with lock:
                        self._decode(batch)

    def _next_batch(self) -> list[Item] | None:
        """The next batch (empty when all that waited was dropped), or None once stopping with nothing left."""
        with self._condition:
            while True:  # after each wait, from the start: another worker may have taken what waited
                while not self._waiting and not self._stopping:
                    self._condition.wait()
                if not self._waiting:
                    return None
                left = self._waiting[0].arrived + self.max_wait - time.monotonic()
                if self._stopping or self._hurrying or self._left_over or self._budget_full() or left <= 0:
                    break
                self._condition.wait(left)
            batch = self._take()
        self.observer.queued(len(self._waiting))
        return batch

    def _budget_full(self) -> bool:
        longest = max(item.tokens for item in self._waiting)
        return (
            longest * len(self._waiting) >= self.max_batch_tokens
            or len(self._waiting) >= self.max_batch_sentences
        )

    def _drop_abandoned(self) -> None:
        """The sentences of requests whose client went away leave the queue (the condition is held)."""
        waiting = [item for item in self._waiting if not item.job.abandoned]
        if dropped := len(self._waiting) - len(waiting):
            self.observer.dropped(dropped)
            self._waiting = deque(waiting)

    def _take(self) -> list[Item]:
        """The batch (removed from the queue, oldest first), once abandoned requests' sentences are dropped."""
        self._drop_abandoned()
        waiting = list(self._waiting)
        batch: list[Item] = []
        longest, self._left_over = 0, False
        for item in waiting:
            if item.job.options != waiting[0].job.options:
                continue
            full = len(batch) == self.max_batch_sentences
            if full or (batch and max(longest, item.tokens) * (len(batch) + 1) > self.max_batch_tokens):
                self._left_over = True
                continue
            batch.append(item)
            longest = max(longest, item.tokens)
        taken = {id(item) for item in batch}
        self._waiting = deque(item for item in waiting if id(item) not in taken)
        return batch

    def _decode(self, batch: list[Item]) -> None:
        """Translate a batch (and score it where asked) and hand each job what is now done."""
        sources = [item.job.sentences[item.index] for item in batch]
        options = dict(batch[0].job.options)
        if self.engine.name in STOPPABLE_ENGINES:
            # a batch whose requests have all gone (a timeout, a client that left) stops at its next step
            jobs = list({id(item.job): item.job for item in batch}.values())
            options["stopping_criteria"] = StoppingCriteriaList(
                [StopWhen(lambda: all(job.abandoned for job in jobs))]
            )
        started = time.monotonic()
        try:
            translations = self.engine.translate(sources, batch_size=len(batch), **options)
            scored = [index for index, item in enumerate(batch) if item.job.want_scores]
            if scored and self.scorer is not None:
                scores = self.scorer([sources[i] for i in scored], [translations[i] for i in scored])
                for index, score in zip(scored, scores, strict=True):
                    batch[index].job.scores[batch[index].index] = score
        except Exception as error:  # a batch that failed fails its requests, not the server
            for job in {id(item.job): item.job for item in batch}.values():
                job.loop.call_soon_threadsafe(_fail, job.future, error)
            return
        self.observer.decoded(len(batch), sum(item.tokens for item in batch), time.monotonic() - started)
        for item, translation in zip(batch, translations, strict=True):
            item.job.translations[item.index] = translation
            item.job.remaining -= 1
            if item.job.remaining == 0:
                item.job.loop.call_soon_threadsafe(_finish, item.job.future)


def _finish(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _fail(future: asyncio.Future, error: Exception) -> None:
    if not future.done():
        future.set_exception(error)
