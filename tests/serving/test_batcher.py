"""The batcher's policy (issue 62) with an engine that records its batches: requests that arrive together share a
batch, a request larger than a batch does not wait for company after its first batch, and an abandoned request's
sentences never decode."""

import asyncio
import time

from vaswani_transformer.serving.batcher import Batcher


class RecordingEngine:
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


def batcher(engine: RecordingEngine, max_wait: float, max_batch_tokens: int = 1000) -> Batcher:
    return Batcher(
        engine,
        lambda text: len(text.split()),
        max_batch_tokens=max_batch_tokens,
        max_batch_sentences=64,
        max_wait=max_wait,
        max_queue=100,
        observer=Quiet(),
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
