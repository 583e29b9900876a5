"""`vaswani-serve` under faults, the real server in a subprocess: a full queue (503, then recovery), a
client that goes away (its sentences dropped), API keys and rates, the per-request timeout, and a model folder that
does not load (exit 2 before it listens). Signals in the middle of a load: test_shutdown.py."""

import socket
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import SENTENCES
from tests.serving.server_process import (
    CPU_FLOAT32,
    ENV,
    free_port,
    post_in_thread,
    sample_folder,
    serve_command,
    serving,
    until,
)

pytestmark = pytest.mark.slow  # server processes (fresh interpreters loading a model)

GREEDY = ("--num_beams", "1")


# The small sample model's random weights do not end a sentence: each decodes to its limit, here 300 tokens.
LONG = {"max_new_tokens": 300}


def test_a_full_queue_answers_503_and_recovers_and_a_client_that_goes_away_is_dropped(tmp_path: Path) -> None:
    # one sentence decodes at a time (--batch_size 1), so the others wait
    folder = sample_folder(tmp_path / "model")
    with serving(folder, *GREEDY, "--max_queue", "4", "--batch_size", "1") as server:
        answers: list = []
        first = post_in_thread(f"{server.url}/v1/translate", {"q": SENTENCES[:3], **LONG}, answers)
        until(lambda: server.metric("vaswani_queue_sentences") == 2)  # one decoding, two waiting
        full = httpx.post(f"{server.url}/v1/translate", json={"q": SENTENCES[2:5]}, timeout=60)
        assert full.status_code == 503, full.text
        assert "--max_queue" in full.json()["error"] and full.headers["retry-after"] == "1"
        first.join(timeout=300)
        assert [answer.status_code for answer in answers] == [200]
        again = httpx.post(f"{server.url}/v1/translate", json={"q": SENTENCES[2:5]}, timeout=300)
        assert again.status_code == 200, again.text  # recovered

        decoded = server.metric("vaswani_sentences_total")
        body = b'{"q": ["I love you.", "No.", "Hi."], "max_new_tokens": 300}'
        with socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1]))) as client:
            client.sendall(
                b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            until(lambda: server.metric("vaswani_queue_sentences") == 2)  # one decoding, two waiting
        # dropped, not decoded: the two waiting, and the one decoding at its next step
        until(lambda: server.metric("vaswani_dropped_sentences_total") == 3)
        assert server.metric("vaswani_sentences_total") == decoded
        assert httpx.get(f"{server.url}/ready").status_code == 200


def test_api_keys_rates_and_the_request_timeout(tmp_path: Path) -> None:
    folder = sample_folder(tmp_path / "model")
    keys = tmp_path / "keys.txt"
    keys.write_text("# key, then its requests per minute\nslow-key 2\nfast-key\n", encoding="utf-8")
    flags = (*GREEDY, "--api_keys", str(keys), "--request_timeout", "5")
    # 16 beams of 8 sentences to 1,000 tokens: far longer than the 5 s a request may take
    slow = {"q": ["I love you."] * 8, "num_beams": 16, "max_new_tokens": 1000, "api_key": "slow-key"}
    with serving(folder, *flags) as server:
        url = f"{server.url}/translate"
        assert httpx.post(url, json={"q": "Hi."}).status_code == 403
        wrong = httpx.post(url, json={"q": "Hi.", "api_key": "fast-kez"})
        assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key."}
        for _ in range(2):
            timed_out = httpx.post(f"{server.url}/v1/translate", json=slow, timeout=60)
            assert timed_out.status_code == 504 and "--request_timeout" in timed_out.json()["error"]
        limited = httpx.post(url, json={"q": "Hi.", "api_key": "slow-key"})
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        body = {"q": SENTENCES[:4], "num_beams": 1, "max_new_tokens": 4}
        native = httpx.post(
            f"{server.url}/v1/translate", json=body, headers={"Authorization": "Bearer fast-key"}, timeout=60
        )
        assert native.status_code == 200, native.text
        assert server.metric("vaswani_dropped_sentences_total") == 16  # the timed-out requests' sentences


@pytest.mark.parametrize(
    ("damage", "named"), [("config.json", "config.json"), ("model.safetensors", "model.safetensors")]
)
def test_a_model_that_does_not_load_exits_2_before_it_listens(
    tmp_path: Path, damage: str, named: str
) -> None:
    folder = sample_folder(tmp_path / "model")  # a saved model that loads, until damaged
    (folder / damage).write_bytes(b"{not what it should be")
    port = free_port()
    completed = subprocess.run(
        serve_command(folder, port, *CPU_FLOAT32), capture_output=True, text=True, env=ENV, timeout=300
    )
    assert completed.returncode == 2, completed.stderr[-3000:]
    assert named in completed.stderr and "Traceback" not in completed.stderr
    assert (
        "Uvicorn running" not in completed.stderr
    )  # what uvicorn logs (at the default level) once it listens
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=5)
