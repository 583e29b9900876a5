"""Figures: written as PNG files, with a clear error when there is nothing to plot."""

from pathlib import Path

import pytest

from vaswani_transformer.plotting import plot_positional_encoding, plot_training_curve


def test_positional_encoding_figure(tmp_path: Path) -> None:
    path = plot_positional_encoding(64, 50, tmp_path / "pe.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 5000


def test_training_curve_needs_loss_entries(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no training-loss entries"):
        plot_training_curve([{"train_runtime": 1.0}], tmp_path / "curve.png")
    history = [{"step": s, "loss": 5.0 / s, "learning_rate": 1e-3 * s} for s in range(1, 6)]
    assert plot_training_curve(history, tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")
