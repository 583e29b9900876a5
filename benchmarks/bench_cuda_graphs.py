"""Decoding through CUDA graphs against plain generate() and MarianMTModel, same run.

    python benchmarks/bench_cuda_graphs.py                       # CUDA: base, vocabulary 37k, batch 1 and 64
    python benchmarks/bench_cuda_graphs.py --device cpu --preset tiny --vocab_size 1000 --batch 8 --backend eager

Random weights (MarianMTModel computing the same function: bench_decoding.marian_copy), random sources of
--source_length tokens, exactly --new_tokens output tokens each (min = max), so every decoder does the same work,
at batch 1 and --batch, beam 4 and greedy: ours plain (`generate()`), ours through CUDA graphs
(`cuda_graphs_vaswani_transformer.bucketed_generate`, what `translate(..., cuda_graphs=True)` and `--cuda_graphs`
run) and MarianMTModel, all in --dtype. The first call of each shape is untimed: it compiles and records the graphs
(printed as compile seconds). Prints one table: sentences/s, ms per batch, the speed-ups over MarianMTModel and
over the plain path, and whether the graphs decoded the plain path's tokens. After the table, one line per run and
search in bench_decoding.py's format (sentences/s at --batch, one sentence's latency), which gpu_owed.py's decision
run reads: `ours DTYPE` is the CUDA-graph path (the option under test), `plain DTYPE` plain generate() and
`marian DTYPE` MarianMTModel. --backend compiles with another torch.compile backend than inductor's CUDA graphs
(eager: no code generation, a smoke run on a CPU).
"""

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import torch
from bench_decoding import marian_copy, report
from peers import add_device_arguments, alternating_medians, compile_config, dtype_name, resolve_dtype
from transformers import CompileConfig, PreTrainedModel

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.cuda_graphs import bucketed_generate

SEARCHES = {"beam 4": 4, "greedy": 1}


def timed_once(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


RUNS = {
    "graphs": "ours",
    "plain": "plain",
    "marian": "marian",
}  # this table's names → the decision run's rows


@dataclass(frozen=True)
class Timing:
    """One search at one batch size: each decoder's median seconds, the first call's (compiling) seconds, and
    whether the graphs decoded the plain path's tokens."""

    batch: int
    seconds: dict[str, float]
    compile_seconds: float
    same: bool


def time_shape(
    args: argparse.Namespace,
    ours: VaswaniTransformerForConditionalGeneration,
    marian: PreTrainedModel,
    graphs_config: CompileConfig,
    search: str,
    batch: int,
) -> Timing:
    """One search at one batch size, every decoder timed in turns."""
    sources = torch.randint(4, args.vocab_size, (batch, args.source_length), device=args.device)
    inputs = {"input_ids": sources, "attention_mask": torch.ones_like(sources)}
    settings = {
        "max_new_tokens": args.new_tokens,
        "min_new_tokens": args.new_tokens,
        "num_beams": SEARCHES[search],
    }
    runs = {
        "plain": partial(ours.generate, **inputs, **settings),
        "graphs": partial(bucketed_generate, ours, **inputs, **settings, compile_config=graphs_config),
        "marian": partial(marian.generate, **inputs, **settings),
    }
    with torch.no_grad():
        compile_seconds = timed_once(runs["graphs"])
        seconds = alternating_medians(runs, args.repeats, args.device)
        same = torch.equal(runs["plain"](), runs["graphs"]())
    return Timing(batch, seconds, compile_seconds, same)


def table_row(search: str, timing: Timing) -> str:
    seconds = timing.seconds
    return (
        f"| {search} | {timing.batch} | {seconds['plain']:.4f} | {seconds['graphs']:.4f} | {seconds['marian']:.4f} "
        f"| {timing.batch / seconds['graphs']:,.1f} | {seconds['marian'] / seconds['graphs']:.2f}× "
        f"| {seconds['plain'] / seconds['graphs']:.2f}× | {timing.compile_seconds:.1f} "
        f"| {'yes' if timing.same else 'no'} |"
    )


def report_runs(
    args: argparse.Namespace, dtype: torch.dtype, search: str, one: Timing, batch: Timing
) -> None:
    """Each decoder's line in bench_decoding.py's format: --batch sentences at a time, and one sentence's latency."""
    for run, name in RUNS.items():
        report(
            f"{name} {dtype_name(dtype)}",
            SEARCHES[search],
            batch.batch,
            args.new_tokens,
            batch.seconds[run],
            one.seconds[run],
            None,
            None,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_device_arguments(parser)
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab_size", type=int, default=37000)
    parser.add_argument("--batch", type=int, default=64, help="the large batch (batch 1 is always run)")
    parser.add_argument("--source_length", type=int, default=20)
    parser.add_argument("--new_tokens", type=int, default=20, help="output tokens per sentence (fixed)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backend", default="inductor", help="torch.compile backend (inductor: CUDA graphs)")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error("--device cuda: this machine has no CUDA GPU; give --device cpu with --backend eager")
    if args.device == "cpu" and args.backend == "inductor":
        parser.error("CUDA graphs need a GPU: on a CPU give --backend eager (a smoke run)")

    torch.manual_seed(0)
    dtype = resolve_dtype(args.dtype, args.device)
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    ours = VaswaniTransformerForConditionalGeneration(config).to(args.device, dtype).eval()
    marian = marian_copy(ours)
    graphs_config = compile_config(args.backend, args.device)
    print(
        f"{args.preset}, vocabulary {args.vocab_size:,}, {dtype_name(dtype)}, {args.device}, {args.backend}"
    )
    print(
        "| search | batch | plain s | graphs s | Marian s | graphs sent/s | × Marian | × plain | compile s | same tokens |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    timings = {
        search: [time_shape(args, ours, marian, graphs_config, search, batch) for batch in (1, args.batch)]
        for search in SEARCHES
    }
    for search, shapes in timings.items():
        for timing in shapes:
            print(table_row(search, timing))
    print()
    for search, (one, batch) in timings.items():
        report_runs(args, dtype, search, one, batch)


if __name__ == "__main__":
    main()
