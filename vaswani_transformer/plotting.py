"""Figures people would rather see than read: the training curve and the §3.5 positional encodings."""

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")  # files only: no display needed
import matplotlib.pyplot as plt  # noqa: E402

from .modeling_vaswani_transformer import VaswaniTransformerSinusoidalPositionalEncoding  # noqa: E402


def plot_training_curve(log_history: Sequence[dict], path: str | Path) -> Path:
    """Training loss and learning rate against step, from a Trainer's `state.log_history`."""
    entries = [entry for entry in log_history if "loss" in entry and "step" in entry]
    if not entries:
        raise ValueError("log_history has no training-loss entries (set logging_steps below max_steps)")
    steps = [entry["step"] for entry in entries]
    figure, loss_axis = plt.subplots(figsize=(7, 4))
    loss_axis.plot(steps, [entry["loss"] for entry in entries], color="tab:blue", label="label-smoothed loss")
    loss_axis.set_xlabel("step")
    loss_axis.set_ylabel("training loss (per target token)", color="tab:blue")
    rate_axis = loss_axis.twinx()
    rate_axis.plot(steps, [entry.get("learning_rate", float("nan")) for entry in entries], color="tab:orange")
    rate_axis.set_ylabel("learning rate (eq. 3)", color="tab:orange")
    loss_axis.set_title("Training")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return Path(path)


def plot_positional_encoding(d_model: int, length: int, path: str | Path) -> Path:
    """Heat map of PE(pos, i) for the first `length` positions (sin on even, cos on odd channels)."""
    table = VaswaniTransformerSinusoidalPositionalEncoding(d_model)(torch.arange(length))
    figure, axis = plt.subplots(figsize=(8, 4))
    image = axis.imshow(table.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    axis.set_xlabel("channel i")
    axis.set_ylabel("position")
    axis.set_title(f"Sinusoidal positional encoding, d_model = {d_model}")
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return Path(path)
