"""vaswani-serve under load: concurrent clients on loopback against the real server, and offline `translate()` on the
same sentences in the same run.

    python benchmarks/bench_serve.py --model runs/tatoeba-en-de/final
    python benchmarks/bench_serve.py --model runs/tatoeba-en-de/final --engines ctranslate2 --clients 32 --seconds 600

For each engine (--engines, default torch and ctranslate2) the server is started (`vaswani-serve MODEL --engine E`
on 127.0.0.1 and a free port) and loaded by an asyncio httpx generator: for each count of --clients (1, 8, 32,
128), that many clients send LibreTranslate requests back to back, each one Tatoeba sentence (workload
"sentences") or a paragraph of three (workload "paragraphs"), until --requests requests are answered or --seconds
have passed, whichever is first: the run stops by itself. It prints, per engine, workload and clients: sentences/s,
p50/p95/p99 latency, errors (any answer but 200, or a transport error), and the ratio of the served sentences/s to
offline `translate()` (for ctranslate2: CTranslate2's `translate_batch`) on the same sentences in one batched call;
with one client, p95 over one sentence's offline `translate()` latency; and the server's peak RSS.
The issue's targets: at 32 clients ≥ 0.8 of offline; one client p95 ≤ 1.2 × a single sentence; 0 errors.
"""

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from vaswani_transformer.data import load_tatoeba
from vaswani_transformer.engines import EngineOptions, load_engine

SENTENCES_PER_PARAGRAPH = 3
READY_SECONDS = 600


@dataclass
class LoadResult:
    """What one load level measured."""

    clients: int
    answered: int
    sentences: int
    errors: int
    seconds: float
    latencies: list[float]

    def percentile(self, share: float) -> float:
        """The latency below which `share` of the answered requests fell (nearest rank)."""
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]

    @property
    def sentences_per_second(self) -> float:
        return self.sentences / self.seconds if self.seconds else 0.0


def workloads(sentences: list[str]) -> dict[str, list[str]]:
    """Each request's text: one sentence, or a paragraph of SENTENCES_PER_PARAGRAPH consecutive ones."""
    step = SENTENCES_PER_PARAGRAPH
    paragraphs = [" ".join(sentences[i : i + step]) for i in range(0, len(sentences) - step + 1, step)]
    return {"sentences": sentences, "paragraphs": paragraphs}


async def load(
    client: httpx.AsyncClient,
    texts: list[str],
    clients: int,
    requests: int,
    seconds: float,
    per_text: int = 1,
) -> LoadResult:
    """`clients` concurrent senders of `texts` (in turn) to POST /translate, until `requests` are answered or
    `seconds` have passed."""
    latencies: list[float] = []
    counters = {"sent": 0, "errors": 0}
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        while counters["sent"] < requests and time.monotonic() < deadline:
            text = texts[counters["sent"] % len(texts)]
            counters["sent"] += 1
            started = time.monotonic()
            try:
                answer = await client.post("/translate", json={"q": text, "source": "auto", "target": "de"})
                ok = answer.status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                latencies.append(time.monotonic() - started)
            else:
                counters["errors"] += 1

    started = time.monotonic()
    await asyncio.gather(*(sender() for _ in range(clients)))
    elapsed = time.monotonic() - started
    return LoadResult(
        clients, len(latencies), len(latencies) * per_text, counters["errors"], elapsed, latencies
    )


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(model: str, engine: str, device: str, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "vaswani_transformer.cli.serve", model, "--engine", engine]
    command += ["--device", device, "--port", str(port), "--log_level", "warning", "--max_queue", "100000"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"vaswani-serve exited with {process.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/ready", timeout=5).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit(f"vaswani-serve was not ready within {READY_SECONDS} s")


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def offline(model: str, engine_name: str, device: str, sentences: list[str]) -> tuple[float, float]:
    """Offline sentences/s of one batched `translate()` call, and one sentence's median latency."""
    engine = load_engine(model, EngineOptions(engine=engine_name, device=device))
    engine.translate(sentences[:8])  # warm-up
    started = time.monotonic()
    engine.translate(sentences)
    rate = len(sentences) / (time.monotonic() - started)
    singles = []
    for sentence in sentences[:20]:
        started = time.monotonic()
        engine.translate([sentence])
        singles.append(time.monotonic() - started)
    return rate, statistics.median(singles)


async def measure(
    url: str, texts: dict[str, list[str]], args: argparse.Namespace
) -> list[tuple[str, LoadResult]]:
    results = []
    limits = httpx.Limits(max_connections=max(args.clients) + 8)
    async with httpx.AsyncClient(base_url=url, timeout=args.seconds + 60, limits=limits) as client:
        for workload, items in texts.items():
            per_text = 1 if workload == "sentences" else SENTENCES_PER_PARAGRAPH
            for clients in args.clients:
                results.append(
                    (workload, await load(client, items, clients, args.requests, args.seconds, per_text))
                )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a trained model folder or Hub id")
    parser.add_argument("--engines", nargs="+", default=["torch", "ctranslate2"])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--requests", type=int, default=500, help="requests per load level at most")
    parser.add_argument("--seconds", type=float, default=60, help="seconds per load level at most")
    parser.add_argument("--sentences", type=int, default=1000, help="Tatoeba sentences used")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    sentences = list(dict.fromkeys(load_tatoeba()[0]["source"]))[: args.sentences]
    texts = workloads(sentences)
    print(f"{len(sentences)} Tatoeba sentences; {os.cpu_count()} CPUs")
    print(
        "| engine | workload | clients | sentences/s | p50 s | p95 s | p99 s | errors | × offline | p95 / single |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for engine in args.engines:
        rate, single = offline(args.model, engine, args.device, sentences)
        port = free_port()
        process = start_server(args.model, engine, args.device, port)
        try:
            results = asyncio.run(measure(f"http://127.0.0.1:{port}", texts, args))
            rss = peak_rss_mb(process.pid)
        finally:
            process.terminate()
            process.wait(timeout=120)
        for workload, result in results:
            single_ratio = f"{result.percentile(0.95) / single:.2f}" if result.clients == 1 else ""
            print(
                f"| {engine} | {workload} | {result.clients} | {result.sentences_per_second:.1f} | "
                f"{result.percentile(0.5):.3f} | {result.percentile(0.95):.3f} | {result.percentile(0.99):.3f} | "
                f"{result.errors} | {result.sentences_per_second / rate:.2f} | {single_ratio} |"
            )
        print(
            f"{engine}: offline {rate:.1f} sentences/s, one sentence {single:.3f} s; server peak RSS {rss:.0f} MB"
        )


if __name__ == "__main__":
    main()
