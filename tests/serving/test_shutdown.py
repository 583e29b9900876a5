"""`vaswani-serve`'s graceful end, the real server in a subprocess on 127.0.0.1 under load: SIGTERM in the
middle of a 32-client load (every accepted request answered, new ones refused, exit 0), the requests still open when
--shutdown_timeout runs out (each a JSON 503 with Retry-After, not a 500 or a dropped connection), and a second
signal (the process exits at once)."""

import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.serving.server_process import Served, post_in_thread, sample_folder, serving, until
from vaswani_transformer.engines import EngineOptions, load_engine

pytestmark = pytest.mark.slow  # server processes (fresh interpreters loading a model) under load

GREEDY = ("--num_beams", "1")
SENTENCES = ["No.", "Who are you?", "Tom is reading a book in the garden.", "Hi.", "Run!", "It is raining."]
# Slow work: one sentence a batch (--batch_size 1), each decoded to 200 tokens (the sample's random weights do
# not end a sentence), 128 sentences in all: far more than the few seconds the tests wait.
SLOW = ("--batch_size", "1", "--request_timeout", "600", "--max_wait_ms", "0")
SLOW_REQUEST = {"q": [SENTENCES[i % len(SENTENCES)] for i in range(32)], "max_new_tokens": 200}
SLOW_CLIENTS = 4


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sample_folder(tmp_path_factory.mktemp("sample") / "model")


def slow_load(url: str) -> tuple[list, list[threading.Thread]]:
    answers: list = []
    threads = [post_in_thread(f"{url}/v1/translate", SLOW_REQUEST, answers) for _ in range(SLOW_CLIENTS)]
    return answers, threads


def until_every_request_is_in(server: Served) -> None:
    """Until the server holds all of `slow_load`'s sentences (waiting, or decoded: a few may be decoding, in neither
    count), so that none arrives after the signal and meets the draining refusal instead."""
    everything = SLOW_CLIENTS * len(SLOW_REQUEST["q"])
    until(
        lambda: (
            server.metric("vaswani_queue_sentences") + server.metric("vaswani_sentences_total")
            >= everything - 4
        )
    )


def test_sigterm_in_the_middle_of_a_32_client_load_answers_every_accepted_request_and_exits_0(
    folder: Path,
) -> None:
    """32 clients send requests back to back until the signal has come (each on a new connection, as
    LibreTranslate's clients do): every request the server took is answered, with its translation (those it had
    accepted, some of them after the signal) or 503, every answer it sent reached its client (its access log and
    the clients' answers agree), and the server exits 0. A connection may still be refused or reset once the
    drained server stops listening: the server never saw those requests."""
    engine = load_engine(folder, EngineOptions(device="cpu", dtype="float32"))
    expected = dict(zip(SENTENCES, engine.translate(SENTENCES, num_beams=1, max_new_tokens=8), strict=True))
    flags = (*GREEDY, "--max_wait_ms", "20", "--shutdown_timeout", "120", "--request_timeout", "300")
    # info: uvicorn's access log, a line for each answer sent
    with serving(folder, *flags, "--log_level", "info") as server:
        answers: list[tuple[str, float, httpx.Response]] = []
        stop = threading.Event()

        def client(number: int) -> None:
            sent = 0
            while not stop.is_set():
                sentence = SENTENCES[(number + sent) % len(SENTENCES)]
                body = {"q": sentence, "source": "en", "target": "de", "max_new_tokens": 8}
                try:
                    answer = httpx.post(f"{server.url}/v1/translate", json=body, timeout=300)
                except httpx.TransportError:
                    continue  # the server's access log below says whether it had taken the request
                answers.append((sentence, time.monotonic(), answer))
                sent += 1

        threads = [threading.Thread(target=client, args=(number,)) for number in range(32)]
        for thread in threads:
            thread.start()
        until(lambda: len(answers) >= 64, 240)  # the load is under way
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        until(lambda: "SIGTERM" in server.stderr())
        stop.set()  # the clients send no more: the server may end once it has answered what it accepted
        try:
            refused = httpx.post(f"{server.url}/translate", json={"q": "Hi."}, timeout=30)
            assert refused.status_code == 503 and "shutting down" in refused.json()["error"]
        except httpx.ConnectError:
            pass  # or it no longer listens: either way, not accepted
        for thread in threads:
            thread.join(timeout=240)
        assert server.process.wait(timeout=240) == 0, server.stderr()[-3000:]
        log = server.stderr()
        assert "Traceback" not in log
    sent = Counter(re.findall(r'"POST /v1/translate HTTP/1\.1" (\d{3})', log))
    received = Counter(str(answer.status_code) for _, _, answer in answers)
    assert sent == received  # every answer the server sent reached its client: nothing it took was dropped
    statuses = {answer.status_code for _, _, answer in answers}
    assert statuses <= {200, 503}, statuses
    for sentence, _, answer in answers:
        if answer.status_code == 200:
            assert answer.json()["translations"][0]["translation"] == expected[sentence]
        else:
            assert "shutting down" in answer.json()["error"]
    assert any(when > signalled and answer.status_code == 200 for _, when, answer in answers)  # drained


def test_requests_still_open_when_the_shutdown_timeout_runs_out_get_a_json_503(folder: Path) -> None:
    """Before, uvicorn cancelled them: each got a plain-text 500 and the log an "Exception in ASGI application"
    traceback."""
    with serving(folder, *GREEDY, *SLOW, "--shutdown_timeout", "3") as server:
        answers, threads = slow_load(server.url)
        until_every_request_is_in(server)
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(timeout=120)
        assert server.process.wait(timeout=120) == 0, server.stderr()[-3000:]
        assert time.monotonic() - signalled < 60  # the 3 s, and the one sentence decoding then
        log = server.stderr()
        assert "Traceback" not in log and "still open after --shutdown_timeout" in log
    assert len(answers) == SLOW_CLIENTS and all(isinstance(answer, httpx.Response) for answer in answers)
    assert 503 in {answer.status_code for answer in answers}
    for answer in answers:
        if answer.status_code != 200:
            assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
            assert "--shutdown_timeout" in answer.json()["error"]


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_exits_at_once(folder: Path, second: signal.Signals) -> None:
    """The first signal drains (here it would take far longer than the test waits); the second ends the process at
    once, with the signal's status, without answering what is still open."""
    with serving(folder, *GREEDY, *SLOW, "--shutdown_timeout", "600") as server:
        answers, threads = slow_load(server.url)
        until_every_request_is_in(server)
        server.process.send_signal(signal.SIGTERM)
        until(lambda: "SIGTERM" in server.stderr())
        assert server.process.poll() is None and answers == []  # draining
        server.process.send_signal(second)
        assert server.process.wait(timeout=30) == 128 + second
        assert f"{second.name} again: exiting at once" in server.stderr()
        for thread in threads:
            thread.join(timeout=60)
    assert len(answers) == SLOW_CLIENTS and all(
        isinstance(answer, httpx.TransportError) for answer in answers
    )


def test_a_batch_that_decodes_long_does_not_hold_the_exit_past_the_shutdown_timeout(folder: Path) -> None:
    """A 16-beam, 1,000-token batch decoding when SIGTERM came kept the process alive long after --shutdown_timeout
    had answered its request 503: the exit waited for the batch to end (here: 8 sentences of 300 words, 128 rows
    of the sample's random weights decoded to the limit, about 40 s on 2 cores)."""
    long_request = {"q": [" ".join(["house"] * 300)] * 8, "num_beams": 16, "max_new_tokens": 1000}
    flags = ("--batch_size", "8", "--max_wait_ms", "0", "--request_timeout", "600", "--shutdown_timeout", "2")
    with serving(folder, *flags) as server:
        answers: list = []
        thread = post_in_thread(f"{server.url}/v1/translate", long_request, answers)
        time.sleep(3)  # arrived and decoding
        signalled = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=300) == 0, server.stderr()[-3000:]
        took = time.monotonic() - signalled
        thread.join(timeout=60)
    assert [answer.status_code for answer in answers] == [503], answers
    assert took < 2 + 5 + 10, took  # the timeout, the time the open requests get to send their 503, and slack
