"""The precision training and decoding compute in by default, by a fixed rule on the device and the model's width,
never by a timing: the same command on the same machine computes the same numbers whatever else runs.

bfloat16 (autocast over float32 weights) where the device computes it faster, as measured once per kind of machine
(docs/decisions/automatic-bf16.md): a CUDA GPU that supports it; a CPU with AMX; an AMD CPU with AVX512-BF16. Not
an Intel CPU with AVX512-BF16 but no AMX (its bfloat16 products measured half float32's speed), and not a CPU
without native bfloat16, which would convert through float32. Decoding multiplies few rows at a time, where
bfloat16's casts can outweigh its faster arithmetic: on AMX it measured slower at `tiny`'s width (128) and faster
from 256, so a model narrower than AMX_DECODING_MIN_WIDTH decodes in float32 there. The timings behind the rule are
benchmarks/bench_precision.py's.
"""

import contextlib
import functools
from pathlib import Path

import torch

# The narrowest d_model that decodes faster in bf16 autocast on an AMX CPU (width 128: 0.77x float32; 256: 1.5x)
AMX_DECODING_MIN_WIDTH = 256
CPU_INFO = Path("/proc/cpuinfo")


def cpu_bf16_instructions() -> str | None:
    """The bfloat16 instructions this CPU has by torch.cpu's own checks (cpuinfo's reading of its feature
    flags): "AMX", "AVX512-BF16", or None."""
    if torch.cpu._is_amx_tile_supported():
        return "AMX"
    if torch.cpu._is_avx512_bf16_supported():
        return "AVX512-BF16"
    return None


@functools.cache
def cpu_vendor(cpu_info: Path = CPU_INFO) -> str | None:
    """The CPU's vendor as Linux names it ("AuthenticAMD", "GenuineIntel"); None where it cannot be read."""
    try:
        text = cpu_info.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return None


def cpu_bf16_is_faster() -> bool:
    """Whether this CPU computes bfloat16 faster than float32, by the rule: AMX, or AVX512-BF16 on an AMD CPU."""
    instructions = cpu_bf16_instructions()
    return instructions == "AMX" or (instructions == "AVX512-BF16" and cpu_vendor() == "AuthenticAMD")


def cpu_bf16_decodes_faster(width: int | None) -> bool:
    """Whether this CPU decodes a model `width` wide (its d_model; None: not known) faster in bfloat16: it computes
    bfloat16 faster, and on AMX the model is at least AMX_DECODING_MIN_WIDTH wide."""
    if not cpu_bf16_is_faster():
        return False
    narrow = width is not None and width < AMX_DECODING_MIN_WIDTH
    return not (narrow and cpu_bf16_instructions() == "AMX")


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
    if cpu_bf16_is_faster():
        return (
            f"the CPU computes bfloat16 natively ({instructions}{'' if instructions == 'AMX' else ', AMD'})"
        )
    return (
        f"the CPU has {instructions} but not AMX ({cpu_vendor() or 'vendor unknown'}), where bfloat16 measured "
        "slower than float32"
    )


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
    decodes a model `width` wide (its d_model) faster in it by the rule (autocast; within 0.1 BLEU of float32,
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
