"""vaswani-serve under load: concurrent clients on loopback against the real server, and offline `translate()` on the
same sentences in the same run.

    python benchmarks/bench_serve.py --model runs/tatoeba-en-de/final
    python benchmarks/bench_serve.py --model runs/tatoeba-en-de/final --engines torch --clients 32 --soak_minutes 10

For each engine (--engines, default torch and ctranslate2) the server is started (`vaswani-serve MODEL --engine E`
on 127.0.0.1 and a free port) and loaded by an asyncio httpx generator: for each count of --clients (1, 8, 32,
128), that many clients send LibreTranslate requests back to back, each one Tatoeba sentence (workload
"sentences") or a paragraph of three (workload "paragraphs"), until --requests requests are answered or --seconds
have passed, whichever is first: the run stops by itself. It prints, per engine, workload and clients: sentences/s,
p50/p95/p99 latency, errors (any answer but 200, or a transport error: a request lost), and the ratio of the served
sentences/s to offline `translate()` (the torch engine) and to CTranslate2's `translate_batch` (the ctranslate2
engine), each on the same sentences in one batched call in the same run, for the engines among --engines; with one
client, p95 over one sentence's offline latency (the same engine's); and the server's RSS after its warm-up and at the
end (its growth), and its peak. --soak_minutes M then loads each server with --soak_clients (32) for M minutes and
prints its RSS at the start and the end of the soak.
Two references separate what batching allows from what the server costs: "× at its batch" is the served rate over
offline decoding of the same sentences in batches as large as the load can form (one call per `clients` requests'
sentences: 32 one-sentence clients can never be decoded in batches above 32), and "p95 / single p95" compares one
client's p95 with the p95 of one-sentence `translate()` calls on the sentences that client sends (like with like:
sentences differ in length). Errors are listed by kind under the table.
The serving targets: at 32 clients ≥ 0.8 of offline; one client p95 ≤ 1.2 × a single sentence; 0 errors; RSS
growth ≤ 10% over a 10-minute soak at 32 clients. A miniature run (tests/serving/test_bench_serve.py):
`--clients 1 2 --requests 6 --seconds 5 --sentences 12 --dtype float32 --device cpu --soak_minutes 0.05`.
"""

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from vaswani_transformer.data import load_tatoeba
from vaswani_transformer.engines import EngineOptions, load_engine

SENTENCES_PER_PARAGRAPH = 3
READY_SECONDS = 600
SINGLES = 40  # one-sentence offline calls timed: the first sentences, which one client sends first


@dataclass
class LoadResult:
    """What one load level measured."""

    clients: int
    answered: int
    sentences: int
    errors: int
    seconds: float
    latencies: list[float]
    failures: Counter[str] = field(default_factory=Counter)  # each kind of error, counted

    def percentile(self, share: float) -> float:
        """The latency below which `share` of the answered requests fell (nearest rank)."""
        return percentile(self.latencies, share)

    @property
    def sentences_per_second(self) -> float:
        return self.sentences / self.seconds if self.seconds else 0.0


def percentile(values: list[float], share: float) -> float:
    """The value below which `share` of `values` fall (nearest rank); NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered) + 0.5) - 1))]


def sentences_per_request(workload: str) -> int:
    return 1 if workload == "sentences" else SENTENCES_PER_PARAGRAPH


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
    target: str = "de",
) -> LoadResult:
    """`clients` concurrent senders of `texts` (in turn) to POST /translate, until `requests` are answered or
    `seconds` have passed."""
    latencies: list[float] = []
    counters = {"sent": 0, "errors": 0}
    failures: Counter[str] = Counter()
    deadline = time.monotonic() + seconds

    async def sender() -> None:
        while counters["sent"] < requests and time.monotonic() < deadline:
            text = texts[counters["sent"] % len(texts)]
            counters["sent"] += 1
            started = time.monotonic()
            try:
                answer = await client.post("/translate", json={"q": text, "source": "auto", "target": target})
                failure = None if answer.status_code == 200 else f"{answer.status_code} {answer.text[:200]}"
            except httpx.HTTPError as error:
                failure = f"{type(error).__name__}: {error}"[:200]
            if failure is None:
                latencies.append(time.monotonic() - started)
            else:
                counters["errors"] += 1
                failures[failure] += 1

    started = time.monotonic()
    await asyncio.gather(*(sender() for _ in range(clients)))
    elapsed = time.monotonic() - started
    return LoadResult(
        clients, len(latencies), len(latencies) * per_text, counters["errors"], elapsed, latencies, failures
    )


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(args: argparse.Namespace, engine: str, port: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "vaswani_transformer", "serve", args.model, "--engine", engine]
    command += ["--device", args.device, "--dtype", args.dtype, "--port", str(port), "--log_level", "warning"]
    command += ["--max_queue", "100000", "--request_timeout", "3600"]
    if args.decoding_workers is not None:
        command += ["--decoding_workers", str(args.decoding_workers)]
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


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """The process's resident memory now (VmRSS) or at its peak (VmHWM), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def growth(start: float, end: float) -> str:
    return f"{100 * (end - start) / start:+.1f}%"


@dataclass
class Offline:
    """One engine offline: sentences/s of one batched call, of calls in batches of each size the loads can form,
    and one-sentence calls' latencies."""

    rate: float
    at_batch: dict[int, float]
    singles: list[float]


def batch_sizes(args: argparse.Namespace) -> list[int]:
    """The largest batch each load level can form: its clients' sentences in flight."""
    return sorted({clients * per for clients in args.clients for per in (1, SENTENCES_PER_PARAGRAPH)})


def offline(model: str, options: EngineOptions, sentences: list[str], sizes: list[int]) -> Offline:
    """`translate()` (for ctranslate2: `translate_batch`) on `sentences` in one batched call, in calls of each of
    `sizes` sentences (on at least 256 of them, or two calls), and on the first SINGLES sentences one at a time."""
    engine = load_engine(model, options)
    engine.translate(sentences[:8])  # warm-up
    started = time.monotonic()
    engine.translate(sentences)
    rate = len(sentences) / (time.monotonic() - started)
    at_batch = {}
    for size in sizes:
        chosen = sentences[: max(256, 2 * size)]
        started = time.monotonic()
        for first in range(0, len(chosen), size):
            engine.translate(chosen[first : first + size], batch_size=size)
        at_batch[size] = len(chosen) / (time.monotonic() - started)
    singles = []
    for sentence in sentences[:SINGLES]:
        started = time.monotonic()
        engine.translate([sentence])
        singles.append(time.monotonic() - started)
    return Offline(rate, at_batch, singles)


async def measure(
    url: str, texts: dict[str, list[str]], args: argparse.Namespace
) -> list[tuple[str, LoadResult]]:
    """Each workload at each count of clients, one after the other."""
    results = []
    limits = httpx.Limits(max_connections=max(args.clients) + 8)
    async with httpx.AsyncClient(base_url=url, timeout=args.seconds + 60, limits=limits) as client:
        target = (await client.get("/languages")).json()[0]["targets"][0]
        for workload, items in texts.items():
            per_text = sentences_per_request(workload)
            for clients in args.clients:
                result = await load(client, items, clients, args.requests, args.seconds, per_text, target)
                results.append((workload, result))
    return results


async def soak(url: str, sentences: list[str], clients: int, seconds: float) -> LoadResult:
    """`clients` clients sending sentences back to back for `seconds`, bounded by time alone."""
    limits = httpx.Limits(max_connections=clients + 8)
    async with httpx.AsyncClient(base_url=url, timeout=seconds + 600, limits=limits) as client:
        target = (await client.get("/languages")).json()[0]["targets"][0]
        return await load(client, sentences, clients, sys.maxsize, seconds, target=target)


def figure(value: float) -> str:
    """A rate or a ratio: one decimal from 10 on, three significant digits below (a slow CPU's 0.0321)."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def ratio(rate: float, reference: float | None) -> str:
    return "" if reference is None else figure(rate / reference)


@dataclass
class Served:
    """One engine's server run: its load levels, and its RSS after the warm-up, after the levels and at its peak."""

    results: list[tuple[str, LoadResult]]
    rss_start: float
    rss_end: float
    rss_peak: float
    soaked: tuple[LoadResult, float, float] | None


def serve_and_load(args: argparse.Namespace, engine: str, sentences: list[str]) -> Served:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_server(args, engine, port)
    try:
        start = rss_mb(process.pid)
        results = asyncio.run(measure(url, workloads(sentences), args))
        end = rss_mb(process.pid)
        soaked = None
        if args.soak_minutes > 0:
            before = rss_mb(process.pid)
            result = asyncio.run(soak(url, sentences, args.soak_clients, args.soak_minutes * 60))
            soaked = (result, before, rss_mb(process.pid))
        peak = rss_mb(process.pid, "VmHWM")
    finally:
        process.terminate()
        process.wait(timeout=120)
    return Served(results, start, end, peak, soaked)


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
    parser.add_argument("--dtype", default="auto", help="the server's and offline decoding's --dtype")
    parser.add_argument(
        "--soak_minutes", type=float, default=0, help="then load each server this long (0: no soak)"
    )
    parser.add_argument("--soak_clients", type=int, default=32, help="clients of the soak")
    parser.add_argument(
        "--decoding_workers", type=int, default=None, help="the servers' --decoding_workers (default: theirs)"
    )
    args = parser.parse_args()
    sentences = list(dict.fromkeys(load_tatoeba()[0]["source"]))[: args.sentences]
    print(f"{len(sentences)} Tatoeba sentences; {os.cpu_count()} CPUs")
    offline_runs = {}
    for engine in args.engines:
        options = EngineOptions(engine=engine, device=args.device, dtype=args.dtype)
        run = offline_runs[engine] = offline(args.model, options, sentences, batch_sizes(args))
        print(
            f"{engine}: offline {figure(run.rate)} sentences/s, one sentence p50 {percentile(run.singles, 0.5):.3f} s "
            f"p95 {percentile(run.singles, 0.95):.3f} s; in batches of "
            + ", ".join(f"{size}: {figure(rate)}" for size, rate in run.at_batch.items())
        )
    served = {engine: serve_and_load(args, engine, sentences) for engine in args.engines}
    rates = {engine: run.rate for engine, run in offline_runs.items()}
    print(
        "| engine | workload | clients | sentences/s | p50 s | p95 s | p99 s | errors | × translate() "
        "| × translate_batch | × at its batch | p95 / single p95 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for engine, run in served.items():
        reference = offline_runs[engine]
        single_p95 = percentile(reference.singles, 0.95)
        for workload, result in run.results:
            rate = result.sentences_per_second
            at_batch = reference.at_batch[result.clients * sentences_per_request(workload)]
            single_ratio = f"{result.percentile(0.95) / single_p95:.2f}" if result.clients == 1 else ""
            print(
                f"| {engine} | {workload} | {result.clients} | {figure(rate)} | {result.percentile(0.5):.3f} | "
                f"{result.percentile(0.95):.3f} | {result.percentile(0.99):.3f} | {result.errors} | "
                f"{ratio(rate, rates.get('torch'))} | {ratio(rate, rates.get('ctranslate2'))} | "
                f"{ratio(rate, at_batch)} | {single_ratio} |"
            )
    for engine, run in served.items():
        for workload, result in run.results:
            for failure, count in result.failures.most_common(3):
                print(f"{engine} {workload} {result.clients} clients: {count} × {failure}")
    for engine, run in served.items():
        print(
            f"{engine}: server RSS {run.rss_start:.0f} MB after its warm-up, {run.rss_end:.0f} MB after the "
            f"loads ({growth(run.rss_start, run.rss_end)}), peak {run.rss_peak:.0f} MB"
        )
    soaks = {engine: run.soaked for engine, run in served.items() if run.soaked is not None}
    if soaks:
        print(
            "| engine | soak minutes | clients | sentences/s | errors | RSS start MB | RSS end MB | RSS growth |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for engine, (result, before, after) in soaks.items():
        print(
            f"| {engine} | {args.soak_minutes:g} | {result.clients} | {figure(result.sentences_per_second)} | "
            f"{result.errors} | {before:.0f} | {after:.0f} | {growth(before, after)} |"
        )
    for engine, (result, _, _) in soaks.items():
        for failure, count in result.failures.most_common(3):
            print(f"{engine} soak: {count} × {failure}")


if __name__ == "__main__":
    main()
