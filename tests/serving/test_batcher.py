"""The batcher's policy with an engine that records its batches: requests that arrive together share a
batch, a request larger than a batch does not wait for company after its first batch, an abandoned request's
sentences never decode, and several workers decode batches at once, each on its share of torch's threads."""

import asyncio
import threading
import time

import pytest
import torch

from vaswani_transformer.serving.batcher import Batcher, SentenceTooLong


class RecordingEngine:
    name = "recording"

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def translate(self, texts, *, batch_size=None, **options):
        self.batches.append(list(texts))
        return [text.upper() for text in texts]


class Quiet:
    def queued(self, sentences: int) -> None: ...
    def decoded(self, sentences: int, tokens: int, seconds: float) -> None: ...
    def dropped(self, sentences: int) -> None:
        self.dropped_count = sentences


def batcher(
    engine: RecordingEngine, max_wait: float, max_batch_tokens: int = 1000, workers: int = 1
) -> Batcher:
    return Batcher(
        engine,
        lambda text: len(text.split()),
        max_batch_tokens=max_batch_tokens,
        max_batch_sentences=64,
        max_wait=max_wait,
        max_queue=100,
        observer=Quiet(),
        workers=workers,
    )


def test_requests_that_arrive_together_share_one_batch_and_each_gets_its_own() -> None:
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0.5)
    worker.start()

    async def both():
        return await asyncio.gather(worker.translate(["a b", "c"], ()), worker.translate(["d e f"], ()))

    try:
        first, second = asyncio.run(both())
    finally:
        worker.stop()
    assert first == (["A B", "C"], [None, None]) and second == (["D E F"], [None])
    assert engine.batches == [["a b", "c", "d e f"]]


def test_sentences_a_full_batch_left_behind_decode_at_once() -> None:
    """Before, they waited max_wait for company (60 s here) although they had waited already."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=60, max_batch_tokens=6)  # two 3-word sentences a batch
    worker.start()
    started = time.monotonic()
    try:
        translations, _ = asyncio.run(worker.translate(["a b c", "d e f", "g h i"], ()))
    finally:
        worker.stop()
    assert translations == ["A B C", "D E F", "G H I"]
    assert engine.batches == [["a b c", "d e f"], ["g h i"]]
    assert time.monotonic() - started < 30


def test_a_server_that_shuts_down_decodes_what_waits_at_once() -> None:
    """`hurry` (the first SIGTERM): a sentence that would wait 60 s for company decodes now."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=60)
    worker.start()

    async def hurried():
        waiting = asyncio.ensure_future(worker.translate(["a"], ()))
        await asyncio.sleep(0.1)
        worker.hurry()
        return await asyncio.wait_for(waiting, 30)

    try:
        assert asyncio.run(hurried()) == (["A"], [None])
    finally:
        worker.stop()


def test_an_abandoned_request_s_sentences_are_dropped_before_they_decode() -> None:
    engine = RecordingEngine()
    observer = Quiet()
    worker = batcher(engine, max_wait=0.5)
    worker.observer = observer
    worker.start()

    async def abandon_one():
        gone = asyncio.ensure_future(worker.translate(["x y"], ()))
        await asyncio.sleep(0.05)
        gone.cancel()
        return await worker.translate(["z"], ())

    try:
        kept = asyncio.run(abandon_one())
    finally:
        worker.stop()
    assert kept == (["Z"], [None]) and engine.batches == [["z"]] and observer.dropped_count == 1


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
        translations, _ = asyncio.run(worker.translate(["a b", "c d"], ()))
    finally:
        worker.stop()
    assert translations == ["A B", "C D"] and sorted(engine.batches) == [["a b"], ["c d"]]
    assert engine.threads == [max(1, torch.get_num_threads() // 2)] * 2


def test_a_worker_whose_company_another_worker_took_waits_for_the_next_request() -> None:
    """Before, the worker that woke to an empty queue died (max() of no sentences) and served nothing more."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0.2, workers=2)
    worker.start()

    async def one_then_another():
        first = await worker.translate(["a"], ())
        await asyncio.sleep(0.3)  # both workers have woken by now
        return first, await worker.translate(["b"], ())

    try:
        answers = asyncio.run(one_then_another())
        alive = [thread for thread in threading.enumerate() if thread.name.startswith("decoding-")]
    finally:
        worker.stop()
    assert answers == ((["A"], [None]), (["B"], [None])) and len(alive) == 2


def test_a_sentence_longer_than_the_engine_translates_whole_is_refused_before_it_queues() -> None:
    """The server cut such a sentence silently to the model's positions: now its request is refused, naming it."""
    engine = RecordingEngine()
    worker = batcher(engine, max_wait=0)
    worker.max_source_tokens = 3
    worker.start()
    try:
        with pytest.raises(SentenceTooLong) as refused:
            asyncio.run(worker.translate(["a b", "c d e f"], ()))
        assert asyncio.run(worker.translate(["a b c"], ())) == (["A B C"], [None])
    finally:
        worker.stop()
    assert (refused.value.index, refused.value.tokens, refused.value.limit) == (1, 4, 3)
    assert engine.batches == [["a b c"]] and worker.waiting == 0


def test_a_client_that_left_holds_no_place_in_the_queue() -> None:
    """Abandoned sentences counted toward --max_queue until the running batch ended: 503s after every client left."""
    engine = RecordingEngine()
    worker = Batcher(
        engine, lambda text: 1, max_batch_tokens=1000, max_batch_sentences=64, max_wait=60, max_queue=2,
        observer=Quiet(),
    )  # fmt: skip
    worker.start()

    async def leave_then_ask():
        # waits 60 s for company: the queue is full
        gone = asyncio.ensure_future(worker.translate(["a", "b"], ()))
        await asyncio.sleep(0.1)
        gone.cancel()
        await asyncio.sleep(0.05)
        worker.hurry()
        return await asyncio.wait_for(worker.translate(["c", "d"], ()), 30)

    try:
        assert asyncio.run(leave_then_ask()) == (["C", "D"], [None, None])
    finally:
        worker.stop()
    assert engine.batches == [["c", "d"]]
