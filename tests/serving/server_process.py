"""The real `vaswani-serve` in a subprocess on 127.0.0.1 and a free port, for the serving tests."""

import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import save_small_model

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
START = 300  # seconds the server may take to load and warm up on a busy machine
CPU_FLOAT32 = ("--device", "cpu", "--dtype", "float32")


def sample_folder(folder: Path) -> Path:
    """The small sample model (no training needed, `save_small_model`) saved into `folder` with the pair en→de
    recorded as `vaswani-train` records it (train_options.json)."""
    save_small_model(folder)
    (folder / "train_options.json").write_text('{"source_lang": "en", "target_lang": "de"}', encoding="utf-8")
    return folder


def until(condition, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.05)


def post_in_thread(url: str, body: dict, answers: list, **options) -> threading.Thread:
    """POST `body` to `url` from a thread; the answer (or the transport error) is appended to `answers`."""

    def post() -> None:
        try:
            answers.append(httpx.post(url, json=body, timeout=120, **options))
        except httpx.TransportError as error:
            answers.append(error)

    thread = threading.Thread(target=post)
    thread.start()
    return thread


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def serve_command(model: Path, port: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "vaswani_transformer", "serve", str(model), "--port", str(port), *flags]


@dataclass
class Served:
    url: str
    process: subprocess.Popen
    log: Path

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def metric(self, name: str) -> float:
        """A metric's value (the sum of its labelled series) from GET /metrics."""
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        values = [float(value) for value in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)]
        return sum(values)


def open_files_limited_to(count: int | None) -> Callable[[], None] | None:
    """A function for Popen's preexec_fn that sets `ulimit -n` (soft and hard) to `count`; None for no limit."""
    if count is None:
        return None
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


@contextmanager
def serving(model: Path, *flags: str, open_files: int | None = None) -> Iterator[Served]:
    """The server on a free port, ready (GET /ready), killed at the end if it is still running; `open_files`
    limits its file descriptors as `ulimit -n` does."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "stderr.txt"
        with log.open("wb") as stderr:
            process = subprocess.Popen(
                serve_command(model, port, *CPU_FLOAT32, "--log_level", "warning", *flags),
                stdout=stderr,  # uvicorn's access log (at --log_level info) goes to standard output
                stderr=stderr,
                env=ENV,
                preexec_fn=open_files_limited_to(open_files),
            )
        served = Served(f"http://127.0.0.1:{port}", process, log)
        try:
            wait_ready(served)
            yield served
        finally:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=60)


def wait_ready(served: Served) -> None:
    deadline = time.monotonic() + START
    while time.monotonic() < deadline:
        if served.process.poll() is not None:
            raise AssertionError(
                f"vaswani-serve exited with {served.process.returncode}: {served.stderr()[-3000:]}"
            )
        try:
            if httpx.get(f"{served.url}/ready", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"vaswani-serve was not ready within {START} s: {served.stderr()[-3000:]}")
