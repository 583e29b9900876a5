"""Which precision a device computes fastest: bfloat16 where it multiplies bfloat16 faster than float32, float32
elsewhere.

One place for training (the package's `training.precision`: bf16 autocast) and decoding (`translate()` and the
pipeline: bf16 autocast over float32 weights). On a CPU the instruction set alone does not say: CPUs with the same
AVX512-BF16 instructions multiply bfloat16 anywhere from half to four times as fast as float32
(docs/decisions/automatic-bf16.md). So a CPU with the instructions is measured once per process (a few
milliseconds of matrix products) and gets bfloat16 only where it is clearly faster; a CPU without them would
convert bfloat16 through float32 and keeps float32 unmeasured. Decoding, whose products are few rows by a
model's width, also measures the model's own layer (`cpu_bf16_layer_speedup`): a CPU can be faster in bfloat16
at 512 wide and slower at `tiny`'s 128.
"""

import contextlib
import functools
import time
from collections.abc import Callable

import torch

# bf16 autocast adds casts around every product, so it must win the products by a clear margin to pay
# (docs/decisions/automatic-bf16.md). A training run decides once and keeps its choice (`training.precision`).
BF16_MIN_SPEEDUP = 1.5

# Decoding multiplies few rows at a time (translate()'s batches: 64 sentences × 4 beams) by weights as wide as the
# model, where bfloat16's casts and per-product overheads can outweigh its faster arithmetic: a CPU whose 512-wide
# bfloat16 products are 3x float32's can still run `tiny`'s 128-wide layers slower. So decoding in bfloat16 also
# needs the model's own layer to measure faster, by a margin (docs/decisions/automatic-bf16.md).
DECODING_ROWS = 256
DECODING_MIN_SPEEDUP = 1.1


def cpu_bf16_instructions() -> str | None:
    """The bfloat16 instructions this CPU has by torch.cpu's own checks (cpuinfo's reading of its feature
    flags): "AMX", "AVX512-BF16", or None."""
    if torch.cpu._is_amx_tile_supported():
        return "AMX"
    if torch.cpu._is_avx512_bf16_supported():
        return "AVX512-BF16"
    return None


def _best_seconds(work: dict[torch.dtype, Callable[[], object]], rounds: int) -> dict[torch.dtype, float]:
    """The fastest of `rounds` runs of each dtype's work, dtypes taking turns so that a change of load hits both."""
    best = dict.fromkeys(work, float("inf"))
    for round_ in range(rounds + 1):  # round 0 warms the kernels up and is not counted
        for dtype, run in work.items():
            start = time.perf_counter()
            run()
            elapsed = time.perf_counter() - start
            if round_:
                best[dtype] = min(best[dtype], elapsed)
    return best


@functools.cache
def cpu_bf16_speedup(size: int = 512, rounds: int = 7) -> float:
    """How many times faster this CPU multiplies bfloat16 than float32 matrices (size × size products, best of
    `rounds`, with this process's threads), measured once per process in a few milliseconds. Uses its own random
    generator and no autocast, so it changes no global state."""
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator) for _ in range(2))
    a16, b16 = a.bfloat16(), b.bfloat16()
    products = {torch.float32: lambda: torch.mm(a, b), torch.bfloat16: lambda: torch.mm(a16, b16)}
    with torch.inference_mode(), torch.autocast("cpu", enabled=False):
        best = _best_seconds(products, rounds)
    return best[torch.float32] / best[torch.bfloat16]


def cpu_bf16_is_faster() -> bool:
    """Whether this CPU computes bfloat16 clearly faster than float32: it has the instructions and its measured
    products are at least BF16_MIN_SPEEDUP times float32's."""
    return cpu_bf16_instructions() is not None and cpu_bf16_speedup() >= BF16_MIN_SPEEDUP


@functools.cache
def cpu_bf16_layer_speedup(width: int, rows: int = DECODING_ROWS, rounds: int = 7, calls: int = 10) -> float:
    """How many times faster a linear layer of `width` inputs and outputs runs on `rows` rows under bf16 autocast
    than in float32 on this CPU: float32 weights as a model has them, the activations' casts included (autocast
    keeps each weight's bfloat16 copy for a whole generate(), as here for `calls` calls); best of `rounds`, the
    precisions taking turns. Measured once per width and process in a few milliseconds, with its own random
    generator, so it changes no global state."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(rows, width, generator=generator)
    weight = torch.nn.Parameter(torch.randn(width, width, generator=generator))

    def layer_calls(autocast: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for _ in range(calls):
                torch.nn.functional.linear(inputs, weight)

    runs = {torch.float32: lambda: layer_calls(False), torch.bfloat16: lambda: layer_calls(True)}
    with torch.no_grad():
        best = _best_seconds(runs, rounds)
    return best[torch.float32] / best[torch.bfloat16]


def cpu_bf16_decodes_faster(width: int | None) -> bool:
    """Whether this CPU decodes a model `width` wide (its d_model; None: not known) faster in bfloat16: it computes
    bfloat16 clearly faster (`cpu_bf16_is_faster`) and the model's own layer measures at least
    DECODING_MIN_SPEEDUP times float32's under autocast (`cpu_bf16_layer_speedup`)."""
    if not cpu_bf16_is_faster():
        return False
    return width is None or cpu_bf16_layer_speedup(width) >= DECODING_MIN_SPEEDUP


def bf16_is_faster(device: torch.device | str) -> bool:
    """Whether `device` computes bfloat16 faster than float32: a CUDA GPU that supports it, or such a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_bf16_is_faster()


def bf16_reason(device: torch.device | str) -> str:
    """Why `device` does or does not get bfloat16, in words for logs, scores and model cards."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"the GPU {'supports' if bf16_is_faster(device) else 'lacks'} bfloat16"
    if device.type != "cpu":
        return f"{device.type}: float32"
    instructions = cpu_bf16_instructions()
    if instructions is None:
        return "the CPU has no native bfloat16 (no AVX512-BF16 or AMX), where it would be slower than float32"
    speedup = f"{cpu_bf16_speedup():.1f}x float32's speed in matrix products (measured)"
    if cpu_bf16_is_faster():
        return f"the CPU computes bfloat16 natively ({instructions}) at {speedup}"
    return f"the CPU has {instructions} but computes bfloat16 at {speedup}, so float32 is faster"


def bf16_decodes_faster(device: torch.device | str, width: int | None = None) -> bool:
    """Whether `device` decodes a model `width` wide faster in bfloat16: a CUDA GPU that supports it, or a CPU
    where `cpu_bf16_decodes_faster`."""
    device = torch.device(device)
    if device.type == "cuda":
        return bf16_is_faster(device)
    return device.type == "cpu" and cpu_bf16_decodes_faster(width)


def decoding_precision(
    weights: torch.dtype,
    device: torch.device | str,
    dtype: torch.dtype | None = None,
    width: int | None = None,
) -> torch.dtype:
    """The dtype decoding computes in: `dtype` when given, else bfloat16 for float32 weights where the device
    decodes a model `width` wide (its d_model) faster in it (autocast; within 0.1 BLEU of float32,
    docs/decisions/automatic-bf16.md), else the weights' own."""
    if dtype is not None:
        return dtype
    if weights == torch.float32 and bf16_decodes_faster(device, width):
        return torch.bfloat16
    return weights


def autocast_to(
    precision: torch.dtype, weights: torch.dtype, device: torch.device | str
) -> contextlib.AbstractContextManager:
    """A context that computes in `precision` over weights of dtype `weights` (autocast when they differ)."""
    device_type = torch.device(device).type
    if precision == weights or precision == torch.float32:
        return torch.autocast(device_type, enabled=False)
    return torch.autocast(device_type, dtype=precision)
