"""Figures people would rather see than read: the training curve and the §3.5 positional encodings.

Figures are built with matplotlib's object API (`Figure`), so importing this module changes no global state.
"""

from collections.abc import Sequence
from pathlib import Path

import torch
from matplotlib.figure import Figure

from .modeling_vaswani_transformer import VaswaniTransformerSinusoidalPositionalEncoding


def _series(log_history: Sequence[dict], key: str) -> tuple[list[int], list[float]]:
    """Steps and values of one logged quantity."""
    entries = [entry for entry in log_history if key in entry and "step" in entry]
    return [entry["step"] for entry in entries], [entry[key] for entry in entries]


def plot_training_curve(
    log_history: Sequence[dict], path: str | Path, unigram_floor: float | None = None
) -> Path:
    """Training (and dev) loss with the learning rate, and greedy dev BLEU, from a Trainer's `log_history`."""
    steps, losses = _series(log_history, "loss")
    if not steps:
        raise ValueError("log_history has no training-loss entries (set logging_steps below max_steps)")
    dev_steps, dev_bleu = _series(log_history, "eval_bleu")
    figure = Figure(figsize=(7, 6.5 if dev_steps else 4))
    loss_axis, *bleu_axis = figure.subplots(2 if dev_steps else 1, 1, sharex=True, squeeze=False)[:, 0]
    loss_axis.plot(steps, losses, color="tab:blue", label="training loss (label-smoothed)")
    loss_axis.plot(*_series(log_history, "eval_loss"), "o-", color="tab:green", label="dev loss")
    if unigram_floor is not None:
        loss_axis.axhline(unigram_floor, color="grey", lw=0.8, ls="--", label="unigram floor (collapse)")
    loss_axis.set_ylabel("loss per target token")
    loss_axis.legend(loc="upper right", fontsize=8)
    rate_axis = loss_axis.twinx()
    rate_axis.plot(*_series(log_history, "learning_rate"), color="tab:orange", lw=0.8)
    rate_axis.set_ylabel("learning rate (eq. 3 × lr_scale)", color="tab:orange")
    loss_axis.set_title("Training")
    if bleu_axis:
        bleu_axis[0].plot(dev_steps, dev_bleu, "o-", color="tab:red")
        bleu_axis[0].set_ylabel("dev BLEU (greedy)")
    (bleu_axis[0] if bleu_axis else loss_axis).set_xlabel("step")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return Path(path)


def plot_positional_encoding(d_model: int, length: int, path: str | Path) -> Path:
    """Heat map of PE(pos, i) for the first `length` positions (sin on even, cos on odd channels)."""
    table = VaswaniTransformerSinusoidalPositionalEncoding(d_model)(torch.arange(length))
    figure = Figure(figsize=(8, 4))
    axis = figure.subplots()
    image = axis.imshow(table.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    axis.set_xlabel("channel i")
    axis.set_ylabel("position")
    axis.set_title(f"Sinusoidal positional encoding, d_model = {d_model}")
    figure.colorbar(image, ax=axis)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return Path(path)
