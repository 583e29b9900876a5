"""vaswani-serve under load as users' load balancers put it: a C load generator (wrk, from Debian's packages:
`apt-get install wrk`) on loopback against the real server, and offline decoding of the same sentences in the same
run.

    python benchmarks/bench_serve.py --model runs/tatoeba-en-de/final
    python benchmarks/bench_serve.py --model runs/tatoeba-en-de/final --engines torch --clients 32 --soak_minutes 10

For each engine (--engines, default torch and ctranslate2) the server is started (`vaswani-serve MODEL --engine E`
on 127.0.0.1 and a free port) and loaded by wrk, one thread, `clients` connections each sending LibreTranslate
requests back to back (one Tatoeba sentence a request, workload "sentences", or a paragraph of three, "paragraphs")
for --seconds a level: the C clients cost the server's cores little, where Python clients on the same cores cost
as much as the server. Before the load, httpx clients (32 at once) send every workload's texts once and check that
the server's translations are offline decoding's (`translate()`, or CTranslate2's `translate_batch`): a sentence
translates the same whatever decodes beside it.

It prints, per engine, workload and clients: sentences/s, p50/p95/p99 latency, errors (any answer but 200, or a
socket error: a request lost), the ratio of the served sentences/s to offline `translate()` (the torch engine) and
to CTranslate2's `translate_batch` (the ctranslate2 engine), each on the same sentences in one call, to the same
engine's offline decoding in batches as large as the level's clients can form ("× at its batch": 32 one-sentence
clients can never be decoded in batches above 32), and, with one client, its p95 over one-sentence offline calls'
p95 on the sentences that client sends. Then the server's RSS after its warm-up and at the end, and its peak;
--soak_minutes M loads each server with --soak_clients (32) for M minutes and prints its RSS growth.

The serving targets (docs/serving.md): at 32 clients ≥ 0.8 of offline decoding in batches of 32, at 128 clients
≥ 0.8 of offline one-call decoding, one client's p95 ≤ 1.2 × a single sentence, 0 errors, RSS growth ≤ 10% over a
10-minute soak at 32 clients. --sample: "random" (default), 1,000 sentences drawn from Tatoeba's (every length);
"shortest", its 1,000 shortest (one to three words: the server's own cost weighs most). A miniature run
(tests/serving/test_bench_serve.py): `--clients 1 2 --seconds 2 --sentences 12 --dtype float32 --device cpu
--soak_minutes 0.05`.
"""

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from vaswani_transformer.data import load_tatoeba
from vaswani_transformer.decoding.sentences import recorded_languages, translate_by_sentences
from vaswani_transformer.engines import EngineOptions, load_engine

SENTENCES_PER_PARAGRAPH = 3
READY_SECONDS = 600
SINGLES = 40  # one-sentence offline calls timed: the first sentences, which one client sends first
CHECK_CLIENTS = 32  # httpx clients of the correctness check
WRK_RESULT = re.compile(
    r"^RESULT requests=(\d+) seconds=([\d.]+) p50=([\d.]+) p95=([\d.]+) p99=([\d.]+) status=(\d+) "
    r"connect=(\d+) read=(\d+) write=(\d+) timeout=(\d+)$",
    re.MULTILINE,
)
# wrk's script: each connection sends the texts in turn; at the end, the figures in one line
WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local bodies = {BODIES}
local counter = 0
function request()
  counter = counter + 1
  return wrk.format(nil, "/translate", nil, bodies[(counter % #bodies) + 1])
end
function done(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format("RESULT requests=%d seconds=%.3f p50=%.5f p95=%.5f p99=%.5f status=%d connect=%d read=%d "
    .. "write=%d timeout=%d\\n", summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e6,
    latency:percentile(95) / 1e6, latency:percentile(99) / 1e6, errors.status, errors.connect, errors.read,
    errors.write, errors.timeout))
end
"""


@dataclass
class LoadResult:
    """What one load level measured (wrk's figures)."""

    clients: int
    answered: int
    sentences: int
    errors: int
    seconds: float
    p50: float
    p95: float
    p99: float

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


def wrk_script(texts: list[str], source: str, target: str, folder: Path) -> Path:
    """wrk's Lua script sending `texts` in turn as LibreTranslate requests."""
    bodies = [json.dumps({"q": text, "source": source, "target": target}) for text in texts]
    path = folder / f"load-{len(list(folder.iterdir()))}.lua"
    lua_strings = ", ".join(
        json.dumps(body) for body in bodies
    )  # JSON strings are Lua strings here: ASCII-escaped
    path.write_text(WRK_SCRIPT.replace("{BODIES}", "{" + lua_strings + "}"), encoding="utf-8")
    return path


def run_wrk(url: str, script: Path, clients: int, seconds: float, per_text: int) -> LoadResult:
    """wrk with one thread and `clients` connections for `seconds`."""
    command = [
        "wrk",
        "-t1",
        f"-c{clients}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "120s",
        "-s",
        script,
        url,
    ]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return wrk_result(completed.stdout + completed.stderr, clients, per_text)


def wrk_result(printed: str, clients: int, per_text: int) -> LoadResult:
    """The figures the script's `done` printed: every request answered but those with an error status counted."""
    found = WRK_RESULT.search(printed)
    if found is None:
        raise SystemExit(f"wrk printed no result: {printed[-2000:]}")
    requests, duration, p50, p95, p99, status, *socket_errors = found.groups()
    answered = int(requests) - int(status)
    errors = int(status) + sum(map(int, socket_errors))
    return LoadResult(
        clients, answered, answered * per_text, errors, float(duration), float(p50), float(p95), float(p99)
    )


async def served_translations(url: str, texts: list[str], source: str, target: str) -> list[str | None]:
    """Each text's translation from the server, CHECK_CLIENTS clients at once (None: an error)."""
    limits = httpx.Limits(max_connections=CHECK_CLIENTS)
    found: list[str | None] = [None] * len(texts)
    queue = list(enumerate(texts))
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def sender() -> None:
            while queue:
                index, text = queue.pop()
                answer = await client.post("/translate", json={"q": text, "source": source, "target": target})
                found[index] = answer.json()["translatedText"] if answer.status_code == 200 else None

        await asyncio.gather(*(sender() for _ in range(CHECK_CLIENTS)))
    return found


def free_port() -> int:
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


def rss_mb(pids: list[int], field: str = "VmRSS") -> float:
    """The processes' resident memory together now (VmRSS) or at their peaks (VmHWM), in MB."""
    total = 0.0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                total += int(line.split()[1]) / 1024
    return total


def server_pids(process: subprocess.Popen) -> list[int]:
    """The server's process and its decoding process."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    decoding = [int(pid) for pid in children if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return [process.pid, *decoding]


def growth(start: float, end: float) -> str:
    return f"{100 * (end - start) / start:+.1f}%"


@dataclass
class Offline:
    """One engine offline: sentences/s of one call, of calls in batches of each size the loads can form,
    one-sentence calls' latencies, and each workload's translations."""

    rate: float
    at_batch: dict[int, float]
    singles: list[float]
    translations: dict[str, list[str]]


def batch_sizes(args: argparse.Namespace) -> list[int]:
    """The largest batch each load level can form: its clients' sentences in flight."""
    return sorted({clients * per for clients in args.clients for per in (1, SENTENCES_PER_PARAGRAPH)})


def offline(model: str, options: EngineOptions, texts: dict[str, list[str]], sizes: list[int]) -> Offline:
    """`translate()` (for ctranslate2: `translate_batch`) on the sentences in one call, in calls of each of `sizes`
    sentences (on at least 256 of them, or two calls), on the first SINGLES sentences one at a time, and on each
    workload's texts (sentence by sentence, as the server splits them)."""
    engine = load_engine(model, options)
    sentences = texts["sentences"]
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
    language = (recorded_languages(model) or ("en", "de"))[0]
    translations = {
        workload: translate_by_sentences(items, language, engine.translate)
        for workload, items in texts.items()
    }  # as the server translates a text: sentence by sentence, joined back with its own spacing
    return Offline(rate, at_batch, singles, translations)


def figure(value: float) -> str:
    """A rate or a ratio: one decimal from 10 on, three significant digits below (a slow CPU's 0.0321)."""
    return f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def ratio(rate: float, reference: float | None) -> str:
    return "" if reference is None else figure(rate / reference)


@dataclass
class Served:
    """One engine's server run: its load levels, translations checked, and RSS after the warm-up, after the levels
    and at its peak."""

    results: list[tuple[str, LoadResult]]
    checked: dict[str, tuple[int, int]]  # workload: (identical to offline, texts)
    rss_start: float
    rss_end: float
    rss_peak: float
    soaked: tuple[LoadResult, float, float] | None


def serve_and_load(
    args: argparse.Namespace, engine: str, texts: dict[str, list[str]], reference: Offline
) -> Served:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start_server(args, engine, port)
    try:
        pids = server_pids(process)
        source, target = (lambda pair: (pair["code"], pair["targets"][0]))(
            httpx.get(f"{url}/languages").json()[0]
        )
        start = rss_mb(pids)
        checked = {}
        for workload, items in texts.items():
            found = asyncio.run(served_translations(url, items, source, target))
            same = sum(a == b for a, b in zip(found, reference.translations[workload], strict=True))
            checked[workload] = (same, len(items))
        results = []
        with tempfile.TemporaryDirectory() as folder:
            scripts = {
                workload: wrk_script(items, source, target, Path(folder)) for workload, items in texts.items()
            }
            for workload, script in scripts.items():
                for clients in args.clients:
                    result = run_wrk(url, script, clients, args.seconds, sentences_per_request(workload))
                    results.append((workload, result))
            end = rss_mb(pids)
            soaked = None
            if args.soak_minutes > 0:
                before = rss_mb(pids)
                result = run_wrk(url, scripts["sentences"], args.soak_clients, args.soak_minutes * 60, 1)
                soaked = (result, before, rss_mb(pids))
        peak = rss_mb(pids, "VmHWM")
    finally:
        process.terminate()
        process.wait(timeout=120)
    return Served(results, checked, start, end, peak, soaked)


def chosen_sentences(sample: str, count: int) -> list[str]:
    unique = list(dict.fromkeys(load_tatoeba()[0]["source"]))
    return unique[:count] if sample == "shortest" else random.Random(0).sample(unique, count)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="a trained model folder or Hub id")
    parser.add_argument("--engines", nargs="+", default=["torch", "ctranslate2"])
    parser.add_argument("--clients", nargs="+", type=int, default=[1, 8, 32, 128])
    parser.add_argument("--seconds", type=float, default=15, help="seconds of load per level")
    parser.add_argument("--sentences", type=int, default=1000, help="Tatoeba sentences used")
    parser.add_argument("--sample", choices=["random", "shortest"], default="random", help="which sentences")
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
    if shutil.which("wrk") is None:
        print("error: the load generator wrk is not installed: apt-get install wrk", file=sys.stderr)
        raise SystemExit(2)
    sentences = chosen_sentences(args.sample, args.sentences)
    texts = workloads(sentences)
    words = sum(len(sentence.split()) for sentence in sentences) / len(sentences)
    print(
        f"{len(sentences)} Tatoeba sentences ({args.sample}, {words:.1f} words on average); {os.cpu_count()} CPUs"
    )
    offline_runs = {}
    for engine in args.engines:
        options = EngineOptions(engine=engine, device=args.device, dtype=args.dtype)
        run = offline_runs[engine] = offline(args.model, options, texts, batch_sizes(args))
        print(
            f"{engine}: offline {figure(run.rate)} sentences/s, one sentence p50 {percentile(run.singles, 0.5):.4f} s "
            f"p95 {percentile(run.singles, 0.95):.4f} s; in batches of "
            + ", ".join(f"{size}: {figure(rate)}" for size, rate in run.at_batch.items())
        )
    served = {engine: serve_and_load(args, engine, texts, offline_runs[engine]) for engine in args.engines}
    for engine, run in served.items():
        for workload, (same, total) in run.checked.items():
            print(f"{engine} {workload}: {same} of {total} served translations identical to offline decoding")
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
            single_ratio = f"{result.p95 / single_p95:.2f}" if result.clients == 1 else ""
            print(
                f"| {engine} | {workload} | {result.clients} | {figure(rate)} | {result.p50:.4f} | "
                f"{result.p95:.4f} | {result.p99:.4f} | {result.errors} | "
                f"{ratio(rate, rates.get('torch'))} | {ratio(rate, rates.get('ctranslate2'))} | "
                f"{ratio(rate, at_batch)} | {single_ratio} |"
            )
    for engine, run in served.items():
        print(
            f"{engine}: server RSS {run.rss_start:.0f} MB after its warm-up, {run.rss_end:.0f} MB after the "
            f"loads ({growth(run.rss_start, run.rss_end)}), peak {run.rss_peak:.0f} MB (both processes)"
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


if __name__ == "__main__":
    main()
