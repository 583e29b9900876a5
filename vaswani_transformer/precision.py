"""Which precision a device computes fastest: bfloat16 where it multiplies bfloat16 natively, float32 elsewhere.

One place for training (`training.mixed_precision_arguments`: bf16 autocast) and decoding (`translate.translate`
and the pipeline: bf16 autocast over float32 weights). A CPU computes bfloat16 natively with AVX512-BF16 (AMD
Zen 4 and later, Intel Cooper Lake) or AMX (Intel Sapphire Rapids and later); there matrix products run about 4x
faster than in float32 (benchmarks/RESULTS.md). Without them torch emulates bfloat16 through float32, slower than
float32 itself, so such CPUs keep float32. Shipped beside translate.py as remote code: it imports only torch.
"""

import contextlib

import torch


def cpu_computes_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively: AVX512-BF16 or AMX tiles, by torch.cpu's own checks
    (cpuinfo's reading of the processor's feature flags)."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def computes_bf16_natively(device: torch.device | str) -> bool:
    """Whether `device` computes bfloat16 faster than float32: a CUDA GPU that supports it, or such a CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return device.type == "cpu" and cpu_computes_bf16()


def bf16_reason(device: torch.device | str) -> str:
    """Why `device` does or does not get bfloat16, in words for logs, scores and model cards."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"the GPU {'supports' if computes_bf16_natively(device) else 'lacks'} bfloat16"
    if device.type != "cpu":
        return f"{device.type}: float32"
    if torch.cpu._is_amx_tile_supported():
        return "the CPU computes bfloat16 natively (AMX)"
    if torch.cpu._is_avx512_bf16_supported():
        return "the CPU computes bfloat16 natively (AVX512-BF16)"
    return "the CPU has no native bfloat16 (no AVX512-BF16 or AMX), where it would be slower than float32"


def decoding_precision(
    weights: torch.dtype, device: torch.device | str, dtype: torch.dtype | None = None
) -> torch.dtype:
    """The dtype decoding computes in: `dtype` when given, else bfloat16 for float32 weights on a device that
    computes it natively (autocast; within 0.1 BLEU of float32, benchmarks/RESULTS.md), else the weights' own."""
    if dtype is not None:
        return dtype
    if weights == torch.float32 and computes_bf16_natively(device):
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
