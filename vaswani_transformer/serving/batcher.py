"""The sentences of many requests decoded together, in the decoding process (`decoding_process`).

Each request is a `Job`; its sentences join one queue. Two policies decode them (docs/decisions/in-flight-batching.md):

- **In flight** (`InFlightBatcher`: the PyTorch engine, whose model this package runs step by step): each worker
  runs `decoding.in_flight.InFlightSearch`; at every step boundary the waiting sentences join its running beam
  search (their encoder pass, then their beams among the others'), within `max_batch_sentences` sentences and
  `max_batch_tokens` padded source tokens, and each sentence leaves as soon as it is final. No sentence waits for a
  batch to end, and none waits for company.
- **A batch at a time** (`Batcher`: CTranslate2, ONNX Runtime, and a model whose decoding settings the in-flight
  search does not follow): a free worker takes the oldest sentence, waits at most `max_wait` seconds for more
  (not when a full batch left sentences behind: they decode next, at once), and decodes, in one call of the
  engine's `translate`, the waiting sentences that share its decoding options, within the same bounds. Under
  CTranslate2 its workers' batches decode at once on CTranslate2's own threads.

A job is done (`Job.finish`) as soon as its last sentence is; the sentences of a job whose client went away
(`abandon`) leave the queue, and the running search at its next step. Each sentence's output limit is its own
(its source + 50, §6.1), so what decodes beside it does not change its translation.

`workers` decode at once, each on its share of torch's intra-op threads, as `translate()` decodes its batches on a
multi-core CPU (docs/decisions/decoding-batches.md): while one worker is in Python the other computes.
"""

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from transformers import GenerationConfig, StoppingCriteriaList

from ..decoding.engine import Engine
from ..decoding.in_flight import MASKED_KERNELS, InFlightSearch, Wanted
from ..decoding.translate import StopWhen, intra_op_threads
from ..modeling.generation_vaswani_transformer import model_max_length
from ..precision import autocast_to, decoding_precision
from .messages import Options, QueueFull, SentenceTooLong

# Engines whose translate() takes generate()'s stopping criteria (CTranslate2 decodes a batch to its end).
STOPPABLE_ENGINES = ("torch", "onnxruntime")
# generation_config.json settings the in-flight search follows; any other setting off transformers' default
# (a logits processor: min_length, no_repeat_ngram_size, forced ids, sampling...) is left to generate()
IN_FLIGHT_SETTINGS = {
    "num_beams",
    "length_penalty",
    "early_stopping",
    "max_length",
    "max_new_tokens",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "decoder_start_token_id",
    "use_cache",
    "output_attentions",
    "output_hidden_states",
    "transformers_version",
    "_from_model_config",
}


class BatchObserver(Protocol):
    """What the batcher reports (the decoding process passes it on to the server's `metrics.ServerMetrics`): the
    sentences waiting, the sentences of each batch (or in-flight step), the sentences done with their source tokens
    and the seconds spent decoding, and the sentences dropped."""

    def queued(self, sentences: int) -> None: ...
    def batch(self, sentences: int) -> None: ...
    def decoded(self, sentences: int, tokens: int, seconds: float) -> None: ...
    def dropped(self, sentences: int) -> None: ...


@dataclass(eq=False)
class Job:
    """One request's sentences, how to decode them (`options` in generate()'s names; `n_best` hypotheses each), and,
    as they are done, each sentence's hypotheses (best first) and score (if `want_scores`). `finish` or `fail` is
    called once, from a worker."""

    sentences: list[str]
    options: Options
    finish: Callable[["Job"], None]
    fail: Callable[["Job", Exception], None]
    want_scores: bool = False
    n_best: int = 1
    hypotheses: list[list[str] | None] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    remaining: int = 0
    abandoned: bool = False

    def __post_init__(self) -> None:
        self.hypotheses = [None] * len(self.sentences)
        self.scores = [None] * len(self.sentences)
        self.remaining = len(self.sentences)

    @property
    def translations(self) -> list[str]:
        """Each sentence's best translation."""
        return [found[0] if found else "" for found in self.hypotheses]


@dataclass(eq=False)
class Item:
    """One sentence waiting: its job, its place there, its source token ids and when it arrived."""

    job: Job
    index: int
    ids: list[int]
    arrived: float

    @property
    def tokens(self) -> int:
        return len(self.ids)


Scorer = Callable[[Sequence[str], Sequence[str]], list[float | None]]


class Batcher:
    """The decoding workers and their queue (`start`, `submit`, `abandon`, `stop`), a batch at a time."""

    def __init__(
        self,
        engine: Engine,
        encode: Callable[[str], list[int]],
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
        self.engine, self.encode, self.scorer, self.observer = engine, encode, scorer, observer
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
            threading.Thread(target=self._work, args=(number,), name=f"decoding-{number}", daemon=True)
            for number in range(workers)
        ]

    def start(self) -> None:
        """Every worker in a thread of its own."""
        for thread in self._threads:
            thread.start()

    def serve(self) -> None:
        """The first worker in this thread, the others in threads of their own, until `stop`: the decoding
        process's main thread decodes (torch's OpenMP threads wait passively between operators for any other
        thread, docs/decisions/decoding-batches.md)."""
        for thread in self._threads[1:]:
            thread.start()
        self._work(0)
        for thread in self._threads[1:]:
            thread.join()

    def stop(self, wait: float | None = None) -> None:
        """Decode what is waiting, then end the workers; `wait`: at most that many seconds for a batch still
        decoding (its daemon thread ends with the process), None: until it is done."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(wait)

    @property
    def workers(self) -> int:
        return len(self._threads)

    @contextmanager
    def model_idle(self) -> Iterator[None]:
        """No worker decodes inside (others use the model between steps: the page's attention)."""
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

    def submit(self, job: Job) -> None:
        """Queue a job's sentences: SentenceTooLong for one the engine would cut, QueueFull when they do not fit
        beside the live requests' sentences; a job of no sentences is done at once."""
        if not job.sentences:
            job.finish(job)
            return
        now = time.monotonic()
        items = [Item(job, index, self.encode(text), now) for index, text in enumerate(job.sentences)]
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

    def abandon(self, job: Job) -> None:
        """The job's client went away: its sentences leave the queue, and the decoding at its next step."""
        job.abandoned = True
        with self._condition:
            self._condition.notify_all()

    def _work(self, number: int) -> None:
        with ExitStack() as threads:
            if self._threads_each is not None:
                threads.enter_context(intra_op_threads(self._threads_each))
            while (batch := self._next_batch()) is not None:
                if batch:
                    with self._locks[number]:
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
            if item.job.options != waiting[0].job.options or item.job.n_best != waiting[0].job.n_best:
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
        """Translate a batch and hand each job what is now done."""
        sources = [item.job.sentences[item.index] for item in batch]
        options = dict(batch[0].job.options)
        n_best = batch[0].job.n_best
        if n_best > 1:  # the beam's n best: at least n beams
            beams = options.get("num_beams") or self.engine.decoding_settings()["num_beams"]
            options.update(num_beams=max(beams, n_best), num_return_sequences=n_best)
        if self.engine.name in STOPPABLE_ENGINES:
            # a batch whose requests have all gone (a timeout, a client that left) stops at its next step
            jobs = list({id(item.job): item.job for item in batch}.values())
            options["stopping_criteria"] = StoppingCriteriaList(
                [StopWhen(lambda: all(job.abandoned for job in jobs))]
            )
        self.observer.batch(len(batch))
        started = time.monotonic()
        try:
            translations = self.engine.translate(sources, batch_size=len(batch), **options)
        except Exception as error:  # a batch that failed fails its requests, not the server
            self._fail(batch, error)
            return
        self.observer.decoded(len(batch), sum(item.tokens for item in batch), time.monotonic() - started)
        hypotheses = [found if n_best > 1 else [found] for found in translations]
        self._deliver(list(zip(batch, hypotheses, strict=True)))

    def _deliver(self, done: list[tuple[Item, list[str]]]) -> None:
        """Each sentence's hypotheses into its job; a job whose last sentence this was is scored (where asked)
        and finished."""
        for item, hypotheses in done:
            item.job.hypotheses[item.index] = hypotheses
            item.job.remaining -= 1
            if item.job.remaining == 0:
                self._finish(item.job)

    def _finish(self, job: Job) -> None:
        try:
            if job.want_scores and self.scorer is not None and not job.abandoned:
                job.scores = self.scorer(job.sentences, job.translations)
        except Exception as error:
            job.fail(job, error)
            return
        job.finish(job)

    def _fail(self, items: list[Item], error: Exception) -> None:
        for job in {id(item.job): item.job for item in items}.values():
            job.fail(job, error)


def in_flight_blocker(engine: Engine) -> str | None:
    """Why the engine's sentences cannot decode in flight, or None where they can: the PyTorch engine without CUDA
    graphs, eager or sdpa attention, and decoding settings the in-flight search follows (the model's own, §6.1)."""
    model = getattr(engine, "model", None)
    if engine.name != "torch" or model is None:
        return f"the {engine.name} engine decodes whole batches"
    if getattr(engine, "cuda_graphs", False):
        return "CUDA graphs replay whole batches"
    if model.config._attn_implementation not in MASKED_KERNELS:
        return f"{model.config._attn_implementation} attention"
    settings = model.generation_config.to_diff_dict()
    others = sorted(name for name in settings if name not in IN_FLIGHT_SETTINGS)
    if others:
        return f"generation_config.json sets {', '.join(others)}, which generate() applies"
    return None


class InFlightBatcher(Batcher):
    """The PyTorch engine's sentences decoded in flight (module docstring): each worker's running beam searches (one
    per beam count) take the waiting sentences at a step boundary. Joining costs an encoder pass and a copy of the
    batch's caches, so a worker that decodes takes newcomers every JOIN_EVERY steps (an idle one at once;
    docs/decisions/in-flight-batching.md)."""

    JOIN_EVERY = 1

    def __init__(self, engine: Engine, encode: Callable[[str], list[int]], **settings: Any) -> None:
        super().__init__(engine, encode, **settings)
        model = engine.model
        self.model, self.tokenizer = model, engine.tokenizer
        self.generation: GenerationConfig = model.generation_config
        self.precision = decoding_precision(
            model.dtype, model.device, engine.dtype, width=model.config.d_model
        )
        self._running = [0] * len(self._threads)  # sentences in each worker's searches

    def _work(self, number: int) -> None:
        searches: dict[int, InFlightSearch] = {}
        with ExitStack() as context:
            if self._threads_each is not None:
                context.enter_context(intra_op_threads(self._threads_each))
            # no_grad, not inference_mode: autocast keeps its bfloat16 copy of each weight while it is entered
            # only outside inference mode (as `translate()` decodes)
            context.enter_context(torch.no_grad())
            context.enter_context(autocast_to(self.precision, self.model.dtype, self.model.device))
            since_joined = 0
            while (newcomers := self._admit(number, searches, since_joined)) is not None:
                since_joined = 0 if newcomers else since_joined + 1
                with self._locks[number]:
                    self._step(searches, newcomers)

    def _admit(
        self, number: int, searches: dict[int, InFlightSearch], since_joined: int
    ) -> list[Item] | None:
        """The waiting sentences this worker takes at this step boundary: none until JOIN_EVERY steps since its
        last join (unless it decodes nothing), then at most its share of all the sentences in flight and waiting,
        within the budget; None once stopping with nothing left. Waits while it has nothing to do."""
        with self._condition:
            while True:
                self._drop_abandoned()
                self._running[number] = sum(len(search) for search in searches.values())
                if self._running[number]:
                    break
                if self._waiting:
                    since_joined = self.JOIN_EVERY  # nothing decoding: no reason to wait
                    break
                if self._stopping:
                    return None
                self._condition.wait()
            if since_joined < self.JOIN_EVERY and self._running[number]:
                return []
            newcomers = self._take_share(number, searches)
        if newcomers:
            self.observer.queued(len(self._waiting))
        return newcomers

    def _take_share(self, number: int, searches: dict[int, InFlightSearch]) -> list[Item]:
        """The oldest waiting sentences that fit this worker's share and its searches' budgets (the condition is
        held)."""
        share = -(-(len(self._waiting) + sum(self._running)) // len(self._threads))
        cost = {
            beams: (len(search), max(search.source_lengths, default=0)) for beams, search in searches.items()
        }
        newcomers, kept = [], deque()
        while self._waiting:
            item = self._waiting.popleft()
            beams = self._beams(item.job)
            sentences, longest = cost.get(beams, (0, 0))
            fits = sentences == 0 or (
                sentences < self.max_batch_sentences
                and (sentences + 1) * max(longest, item.tokens) <= self.max_batch_tokens
            )
            if fits and self._running[number] + len(newcomers) < share:
                newcomers.append(item)
                cost[beams] = (sentences + 1, max(longest, item.tokens))
            else:
                kept.append(item)
        self._waiting = kept
        self._running[number] += len(newcomers)
        return newcomers

    def _beams(self, job: Job) -> int:
        """The beams a job decodes with: its own, the server's or the model's (§6.1), at least its n-best."""
        return max(dict(job.options).get("num_beams") or self.generation.num_beams or 1, job.n_best)

    def _wanted(self, item: Item) -> Wanted:
        """What the in-flight search needs of a sentence: its ids, its own output limit (the request's
        max_new_tokens, else the model's, else its source + 50, §6.1) and α."""
        options, generation = dict(item.job.options), self.generation
        limit = options.get("max_new_tokens") or generation.max_new_tokens
        if limit is None and (max_length := model_max_length(generation)) is not None:
            limit = max_length - 1  # generate()'s max_length counts the decoder's start token
        if limit is None:
            limit = item.tokens + self.model.config.max_length_offset
        alpha = options.get("length_penalty", generation.length_penalty)
        return Wanted(item.ids, limit, alpha, item.job.n_best, item)

    def _step(self, searches: dict[int, InFlightSearch], newcomers: list[Item]) -> None:
        """The newcomers join their searches, the sentences of requests that have gone are dropped, every search
        takes one step, and the sentences it made final are handed to their jobs."""
        started = time.monotonic()
        try:
            for beams, group in _by_beams(newcomers, self._beams).items():
                search = searches.setdefault(beams, InFlightSearch(self.model, beams))
                search.join([self._wanted(item) for item in group])
            for search in searches.values():
                if dropped := search.drop({tag for tag in search.tags if tag.job.abandoned}):
                    self.observer.dropped(dropped)
            self.observer.batch(sum(len(search) for search in searches.values()))
            finished = [done for search in searches.values() for done in search.step()]
            for beams in [beams for beams, search in searches.items() if not len(search)]:
                del searches[beams]
        except Exception as error:  # a step that failed fails the requests decoding, not the server
            failed = [tag for search in searches.values() for tag in search.tags] + newcomers
            searches.clear()
            self._fail(failed, error)
            return
        texts = self.tokenizer.batch_decode(
            [tokens for done in finished for tokens in done.hypotheses], skip_special_tokens=True
        )
        answers, start = [], 0
        for done in finished:
            count = len(done.hypotheses)
            answers.append((done.tag, [text.strip() for text in texts[start : start + count]]))
            start += count
        tokens = sum(item.tokens for item, _ in answers)
        self.observer.decoded(len(finished), tokens, time.monotonic() - started)
        self._deliver(answers)


def _by_beams(items: list[Item], beams: Callable[[Job], int]) -> dict[int, list[Item]]:
    groups: dict[int, list[Item]] = {}
    for item in items:
        groups.setdefault(beams(item.job), []).append(item)
    return groups
