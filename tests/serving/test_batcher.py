"""The decoding process's batching policies. A batch at a time (`Batcher`, with an engine that records its batches):
requests that arrive together share a batch, a request larger than a batch does not wait for company after its
first batch, an abandoned request's sentences never decode, and several workers decode batches at once, each on its
share of torch's threads. In flight (`InFlightBatcher`, a tiny model): a sentence joins the batch decoding and
leaves as soon as it is done, so a short request does not wait for a long one, and each gets `translate()`'s
translation of its own sentences."""

import threading
import time

import pytest
import torch

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration, translate
from vaswani_transformer.engines.torch_engine import TorchEngine
from vaswani_transformer.serving.batcher import Batcher, InFlightBatcher, Job, in_flight_blocker
from vaswani_transformer.serving.messages import QueueFull, SentenceTooLong

WAIT = 60  # seconds a test waits for a job at most


class RecordingEngine:
    name = "recording"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def translate(self, texts, *, batch_size=None, **options):
        self.batches.append(list(texts))
        return [text.upper() for text in texts]


class Counting:
    """A `BatchObserver` that keeps what it is told."""

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.dropped_count = 0

    def queued(self, sentences: int) -> None: ...
    def batch(self, sentences: int) -> None:
        self.batches.append(sentences)

    def decoded(self, sentences: int, tokens: int, seconds: float) -> None: ...
    def dropped(self, sentences: int) -> None:
        self.dropped_count += sentences


class Waiting:
    """A job and the event its finish sets."""

    def __init__(self, worker: Batcher, sentences: list[str], options=(), n_best: int = 1) -> None:
        self.done, self.error, self.finished_at = threading.Event(), None, None
        self.job = Job(sentences, options, self._finished, self._failed, n_best=n_best)
        worker.submit(self.job)

    def _finished(self, job: Job) -> None:
        self.finished_at = time.monotonic()
        self.done.set()

    def _failed(self, job: Job, error: Exception) -> None:
        self.error = error
        self.done.set()

    def result(self) -> list[str]:
        assert self.done.wait(WAIT), "the job was not done in time"
        assert self.error is None, self.error
        return self.job.translations


def batcher(
    engine: RecordingEngine, max_wait: float, max_batch_tokens: int = 1000, workers: int = 1, **settings
) -> Batcher:
    options = dict(max_batch_sentences=64, max_queue=100, observer=Counting(), workers=workers)
    return Batcher(
        engine,
        lambda text: text.split(),
        max_batch_tokens=max_batch_tokens,
        max_wait=max_wait,
        **{**options, **settings},
    )


def test_requests_that_arrive_together_share_one_batch_and_each_gets_its_own() -> None:
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0.5)
    worker.start()
    try:
        first, second = Waiting(worker, ["a b", "c"]), Waiting(worker, ["d e f"])
        assert first.result() == ["A B", "C"] and second.result() == ["D E F"]
    finally:
        worker.stop()
    assert engine.batches == [["a b", "c", "d e f"]]


def test_sentences_a_full_batch_left_behind_decode_at_once() -> None:
    """Before, they waited max_wait for company (60 s here) although they had waited already."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=60, max_batch_tokens=6)  # two 3-word sentences a batch
    worker.start()
    started = time.monotonic()
    try:
        assert Waiting(worker, ["a b c", "d e f", "g h i"]).result() == ["A B C", "D E F", "G H I"]
    finally:
        worker.stop()
    assert engine.batches == [["a b c", "d e f"], ["g h i"]]
    assert time.monotonic() - started < 30


def test_a_server_that_shuts_down_decodes_what_waits_at_once() -> None:
    """`hurry` (the first SIGTERM): a sentence that would wait 60 s for company decodes now."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=60)
    worker.start()
    try:
        waiting = Waiting(worker, ["a"])
        time.sleep(0.1)
        worker.hurry()
        assert waiting.result() == ["A"]
    finally:
        worker.stop()


def test_an_abandoned_request_s_sentences_are_dropped_before_they_decode() -> None:
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0.5)
    worker.start()
    try:
        gone = Waiting(worker, ["x y"])
        worker.abandon(gone.job)
        assert Waiting(worker, ["z"]).result() == ["Z"]
    finally:
        worker.stop()
    assert engine.batches == [["z"]] and worker.observer.dropped_count == 1


class MeetingEngine(RecordingEngine):
    """Each batch waits (at most 30 s) until `meet` batches are inside `translate` together; records the torch
    threads each decodes with."""

    def __init__(self, meet: int) -> None:
        super().__init__()
        self.barrier, self.threads = threading.Barrier(meet, timeout=30), []

    def translate(self, texts, *, batch_size=None, **options):
        self.threads.append(torch.get_num_threads())
        self.barrier.wait()
        return super().translate(texts, batch_size=batch_size, **options)


def test_two_workers_decode_two_batches_at_once_each_on_its_share_of_the_threads() -> None:
    """One worker would decode the second batch only after the first: the barrier would break after 30 s."""
    engine = MeetingEngine(meet=2)
    worker = batcher(engine, max_wait=0.05, max_batch_tokens=2, workers=2)  # one 2-word sentence a batch
    worker.start()
    try:
        assert Waiting(worker, ["a b", "c d"]).result() == ["A B", "C D"]
    finally:
        worker.stop()
    assert sorted(engine.batches) == [["a b"], ["c d"]]
    assert engine.threads == [max(1, torch.get_num_threads() // 2)] * 2


def test_a_worker_whose_company_another_worker_took_waits_for_the_next_request() -> None:
    """Before, the worker that woke to an empty queue died (max() of no sentences) and served nothing more."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0.2, workers=2)
    worker.start()
    try:
        first = Waiting(worker, ["a"]).result()
        time.sleep(0.3)  # both workers have woken by now
        answers = (first, Waiting(worker, ["b"]).result())
        alive = [thread for thread in threading.enumerate() if thread.name.startswith("decoding-")]
    finally:
        worker.stop()
    assert answers == (["A"], ["B"]) and len(alive) == 2


def test_a_sentence_longer_than_the_engine_translates_whole_is_refused_before_it_queues() -> None:
    """The server cut such a sentence silently to the model's positions: now its request is refused, naming it."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0, max_source_tokens=3)
    worker.start()
    try:
        with pytest.raises(SentenceTooLong) as refused:
            Waiting(worker, ["a b", "c d e f"])
        assert Waiting(worker, ["a b c"]).result() == ["A B C"]
    finally:
        worker.stop()
    assert (refused.value.index, refused.value.tokens, refused.value.limit) == (1, 4, 3)
    assert engine.batches == [["a b c"]] and worker.waiting == 0


def test_a_client_that_left_holds_no_place_in_the_queue() -> None:
    """Abandoned sentences counted toward --max_queue until the running batch ended: 503s after every client left."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=60, max_queue=2)
    worker.start()
    try:
        gone = Waiting(worker, ["a", "b"])  # waits 60 s for company: the queue is full
        with pytest.raises(QueueFull):
            Waiting(worker, ["c"])
        worker.abandon(gone.job)
        asked = Waiting(worker, ["c", "d"])
        worker.hurry()
        assert asked.result() == ["C", "D"]
    finally:
        worker.stop()
    assert engine.batches == [["c", "d"]]


def test_n_best_hypotheses_come_from_the_engine_with_enough_beams() -> None:
    class Hypotheses(RecordingEngine):
        def decoding_settings(self, **overrides):
            return {"num_beams": 4}

        def translate(self, texts, *, batch_size=None, **options):
            self.options = options
            return [[f"{text}{rank}" for rank in range(options["num_return_sequences"])] for text in texts]

    engine = Hypotheses()
    worker = batcher(engine, max_wait=0)
    worker.start()
    try:
        waiting = Waiting(worker, ["a", "b"], n_best=6)
        waiting.result()
    finally:
        worker.stop()
    assert waiting.job.hypotheses == [[f"a{rank}" for rank in range(6)], [f"b{rank}" for rank in range(6)]]
    assert engine.options["num_beams"] == 6  # as many beams as hypotheses wanted, at least the model's


# In flight


@pytest.fixture(scope="module")
def engine(letter_tokenizer) -> TorchEngine:
    """A tiny model with random weights, which decode each sentence to its limit (its source + 8 tokens)."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30, max_length_offset=8)).eval()
    return TorchEngine(model, letter_tokenizer, torch.float32)


def in_flight(engine: TorchEngine, **settings) -> InFlightBatcher:
    options = dict(
        max_batch_tokens=4096, max_batch_sentences=64, max_wait=0.0, max_queue=100, observer=Counting()
    )
    encode = lambda text: engine.tokenizer(text)["input_ids"]  # noqa: E731
    return InFlightBatcher(engine, encode, **{**options, **settings})


def test_the_torch_engine_decodes_in_flight(engine: TorchEngine) -> None:
    assert in_flight_blocker(engine) is None
    assert "whole batches" in in_flight_blocker(RecordingEngine())
    graphs = TorchEngine(engine.model, engine.tokenizer, torch.float32, cuda_graphs=True)
    assert "CUDA graphs" in in_flight_blocker(graphs)
    settings = engine.model.generation_config
    before, settings.no_repeat_ngram_size = (
        settings.no_repeat_ngram_size,
        3,
    )  # a logits processor of generate()'s
    try:
        assert "no_repeat_ngram_size" in in_flight_blocker(engine)
    finally:
        settings.no_repeat_ngram_size = before


def test_a_short_request_joins_a_long_one_decoding_and_leaves_before_it(engine: TorchEngine) -> None:
    """A batch at a time, the short request would have waited for the long one's batch to end (the random
    model decodes the long sentence to 76 tokens, the short one to 10)."""
    worker = in_flight(engine)
    worker.start()
    long_text = " ".join("abcdefghijklmnopqrst")
    try:
        long = Waiting(worker, [long_text], (("max_new_tokens", 400),))
        until(lambda: worker.observer.batches)  # decoding
        short = Waiting(worker, ["a b"])
        translations = long.result(), short.result()
    finally:
        worker.stop()
    expected_long = translate(
        long_text, engine.model, engine.tokenizer, max_new_tokens=400, dtype=torch.float32
    )
    assert translations == (
        [expected_long],
        [translate("a b", engine.model, engine.tokenizer, dtype=torch.float32)],
    )
    assert short.finished_at < long.finished_at
    assert 2 in worker.observer.batches  # the two decoded side by side


def until(condition, seconds: float = WAIT) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.001)


def test_requests_in_flight_get_translate_s_translations_whatever_decodes_beside_them(
    engine: TorchEngine,
) -> None:
    texts = [" ".join("abcdefghijklmnopqrstuvwxyz"[start : start + 1 + start % 7]) for start in range(20)]
    worker = in_flight(engine)
    worker.start()
    try:
        waiting = []
        for start in range(0, len(texts), 3):  # arriving while the others decode
            waiting.append(Waiting(worker, texts[start : start + 3], (("num_beams", 2),)))
            time.sleep(0.01)
        found = [text for job in waiting for text in job.result()]
        two_best = Waiting(worker, texts[:2], n_best=2)
        two_best.result()
    finally:
        worker.stop()
    alone = [
        translate(text, engine.model, engine.tokenizer, num_beams=2, dtype=torch.float32) for text in texts
    ]
    assert found == alone
    expected = translate(
        texts[:2], engine.model, engine.tokenizer, num_return_sequences=2, dtype=torch.float32
    )
    assert two_best.job.hypotheses == expected


def test_an_abandoned_request_leaves_the_search_at_the_next_step(engine: TorchEngine) -> None:
    worker = in_flight(engine)
    worker.start()
    try:
        gone = Waiting(worker, [" ".join("abcdefghijklmnopqrst")] * 3, (("max_new_tokens", 400),))
        until(lambda: worker.observer.batches)  # decoding
        worker.abandon(gone.job)
        assert Waiting(worker, ["a"]).result()  # the worker serves on
    finally:
        worker.stop()
    assert worker.observer.dropped_count == 3 and not gone.done.is_set()
