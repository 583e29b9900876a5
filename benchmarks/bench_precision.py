"""The timings behind the precision rule (docs/decisions/automatic-bf16.md): how many times faster this CPU
multiplies bfloat16 than float32 matrices, and runs a model-wide linear layer under bf16 autocast than in float32,
beside what the rule (`vaswani_transformer.precision`) gives this machine. Each figure is the best of `--rounds`,
the two precisions taking turns so that a change of load hits both; rerun it a few times on a machine, since a
host's load moves the figures (the reason the package decides by rule, not by these timings).

    python benchmarks/bench_precision.py --widths 128 256 512 1024
"""

import argparse
import time
from collections.abc import Callable

import torch

from vaswani_transformer import precision

DECODING_ROWS = 256  # translate()'s batches: 64 sentences × 4 beams


def best_seconds(work: dict[torch.dtype, Callable[[], object]], rounds: int) -> dict[torch.dtype, float]:
    """The fastest of `rounds` runs of each dtype's work, dtypes taking turns (round 0 warms up, not counted)."""
    best = dict.fromkeys(work, float("inf"))
    for round_ in range(rounds + 1):
        for dtype, run in work.items():
            start = time.perf_counter()
            run()
            elapsed = time.perf_counter() - start
            if round_:
                best[dtype] = min(best[dtype], elapsed)
    return best


def product_speedup(size: int, rounds: int) -> float:
    """bfloat16 against float32 size × size matrix products."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator) for _ in range(2))
    a16, b16 = a.bfloat16(), b.bfloat16()
    products = {torch.float32: lambda: torch.mm(a, b), torch.bfloat16: lambda: torch.mm(a16, b16)}
    with torch.inference_mode(), torch.autocast("cpu", enabled=False):
        best = best_seconds(products, rounds)
    return best[torch.float32] / best[torch.bfloat16]


def layer_speedup(width: int, rounds: int, rows: int = DECODING_ROWS, calls: int = 10) -> float:
    """A `width`-wide linear layer on `rows` rows, `calls` calls, under bf16 autocast against float32: float32
    weights as a model holds them, the activations' casts included."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(rows, width, generator=generator)
    weight = torch.nn.Parameter(torch.randn(width, width, generator=generator))

    def layer_calls(autocast: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for _ in range(calls):
                torch.nn.functional.linear(inputs, weight)

    with torch.no_grad():
        best = best_seconds(
            {torch.float32: lambda: layer_calls(False), torch.bfloat16: lambda: layer_calls(True)}, rounds
        )
    return best[torch.float32] / best[torch.bfloat16]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--widths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(
        f"CPU: {precision.cpu_vendor() or 'vendor unknown'}, bf16 instructions: {precision.cpu_bf16_instructions()}"
    )
    print(
        f"rule: training {'bf16' if precision.bf16_is_faster('cpu') else 'float32'} ({precision.bf16_reason('cpu')})"
    )
    if precision.cpu_bf16_instructions() is None:
        print("no native bfloat16: nothing to time")
        return
    print(f"512 x 512 products: bf16 {product_speedup(512, args.rounds):.2f}x float32")
    for width in args.widths:
        decodes = precision.decoding_precision(torch.float32, "cpu", width=width)
        print(
            f"width {width}: layer under bf16 autocast {layer_speedup(width, args.rounds):.2f}x float32; rule decodes in {decodes}"
        )


if __name__ == "__main__":
    main()
