"""What the benchmarks share: MarianMTModel of our model's shape, alternating timing, peak GPU memory, the
machine's own matrix-product peaks (the roofline MFU figures divide by), the compile_config of the compiled
decoding path."""

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import CompileConfig, MarianConfig, MarianMTModel

from vaswani_transformer import VaswaniTransformerConfig
from vaswani_transformer.decoding.cuda_graphs import cuda_graphs_compile_config
from vaswani_transformer.precision import bf16_is_faster


def marian_twin(config: VaswaniTransformerConfig) -> MarianMTModel:
    """A MarianMTModel with the same architecture and size as `config`."""
    return MarianMTModel(
        MarianConfig(
            vocab_size=config.vocab_size,
            d_model=config.d_model,
            encoder_layers=config.num_encoder_layers,
            decoder_layers=config.num_decoder_layers,
            encoder_attention_heads=config.num_heads,
            decoder_attention_heads=config.num_heads,
            encoder_ffn_dim=config.d_ff,
            decoder_ffn_dim=config.d_ff,
            activation_function="relu",
            dropout=config.dropout,
            scale_embedding=True,
            max_position_embeddings=1024,
            pad_token_id=config.pad_token_id,
            eos_token_id=config.eos_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
            forced_eos_token_id=None,
        )
    )


def add_device_arguments(parser: argparse.ArgumentParser) -> None:
    """--device (a GPU when there is one) and --dtype, alike in every benchmark."""
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dtype",
        default="auto",
        choices=["auto", "float32", "bfloat16"],
        help="our model's precision (auto: the package's default there, bfloat16 where the device computes it "
        "faster); MarianMTModel runs in float32 (its users' default) and in this precision (like for like)",
    )
    parser.add_argument(
        "--peak_size",
        type=int,
        help="side of the square matrix products that measure the machine's peak (default: 8192 on a GPU, 2048 "
        "on a CPU); a CPU without bfloat16 instructions takes about a minute for one bfloat16 product of 2048, "
        "so miniature runs pass a small one",
    )


def peak_size(args: argparse.Namespace) -> int:
    """--peak_size, or the device's default: large enough to reach the machine's dense peak."""
    if args.peak_size is not None:
        return args.peak_size
    return 8192 if args.device.startswith("cuda") else 2048


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    """--dtype as a torch dtype; "auto" is what the package picks on `device` (precision.py)."""
    if dtype == "auto":
        return torch.bfloat16 if bf16_is_faster(device) else torch.float32
    return getattr(torch, dtype)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def matmul_products(
    device: str, dtype: torch.dtype, count: int, size: int
) -> tuple[Callable[[], None], float]:
    """A run of `count` square matrix products of side `size` in `dtype` and its FLOPs: the machine's peak in
    that precision, as a run that can take turns with others."""
    a, b = (torch.randn(size, size, device=device).to(dtype) for _ in range(2))

    def products() -> None:
        for _ in range(count):
            torch.mm(a, b)

    return products, 2 * size**3 * count


def matmul_peak_tflops(device: str, dtype: torch.dtype, size: int, repeats: int = 5) -> float:
    """The machine's own dense matrix-product peak in `dtype`: the best of `repeats` square products, in
    TFLOP/s. MFU figures divide by it, so they are shares of what this machine reaches."""
    product, flops = matmul_products(device, dtype, 1, size)
    best = float("inf")
    for round_ in range(repeats + 1):
        synchronize(device)
        start = time.perf_counter()
        product()
        synchronize(device)
        if round_:  # the first product warms up the kernels
            best = min(best, time.perf_counter() - start)
    return flops / best / 1e12


def print_peaks(device: str, size: int) -> dict[torch.dtype, float]:
    """Measure and print the float32 and bfloat16 matrix-product peaks of `device` (the roofline), with square
    products of side `size`."""
    peaks = {dtype: matmul_peak_tflops(device, dtype, size) for dtype in (torch.float32, torch.bfloat16)}
    ratio = peaks[torch.bfloat16] / peaks[torch.float32]
    print(
        f"roofline on {device} ({torch.get_num_threads()} CPU threads): matmul peak float32 "
        f"{peaks[torch.float32]:.3f} TFLOP/s, bfloat16 {peaks[torch.bfloat16]:.3f} TFLOP/s ({ratio:.1f}×)"
    )
    return peaks


def synchronize(device: str) -> None:
    """Wait for queued GPU work, so that wall time covers it."""
    if device == "cuda":
        torch.cuda.synchronize()


def alternating_medians(runs: dict[str, Callable[[], object]], repeats: int, device: str) -> dict[str, float]:
    """Median wall time of each run, the runs taking turns (after one untimed round) so drift hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for round_ in range(repeats + 1):
        for name, run in runs.items():
            synchronize(device)
            start = time.perf_counter()
            run()
            synchronize(device)
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def peak_memory_mb(run: Callable[[], object], device: str) -> float | None:
    """Peak GPU memory of one call of `run` in MB (None on CPU)."""
    if device != "cuda":
        return None
    torch.cuda.reset_peak_memory_stats()
    run()
    return torch.cuda.max_memory_allocated() / 2**20


def compile_config(backend: str, device: str) -> CompileConfig:
    """The package's CUDA-graph compile_config, or one with `backend` (compiling on a CPU too)."""
    if backend == "inductor" and device.startswith("cuda"):
        return cuda_graphs_compile_config()
    config = CompileConfig(dynamic=False, backend=backend, mode=None)
    config._compile_all_devices = True  # transformers compiles on GPUs only unless told
    return config
