"""What the benchmarks share: MarianMTModel of our model's shape, alternating timing, peak GPU memory."""

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from transformers import MarianConfig, MarianMTModel

from vaswani_transformer import VaswaniTransformerConfig


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
    """--device (a GPU when there is one) and --dtype (float32 or bfloat16), alike in every benchmark."""
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])


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
