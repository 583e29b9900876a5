"""Figures: written in the format their file names, with a clear error when there is nothing to plot, the format
is not one matplotlib writes, or the picture would not fit in memory."""

from pathlib import Path

import pytest

from vaswani_transformer.plotting import (
    MAX_ENCODING_VALUES,
    check_figure_file,
    check_positional_encoding_size,
    figure_formats,
    plot_positional_encoding,
    plot_training_curve,
)


def test_positional_encoding_figure(tmp_path: Path) -> None:
    path = plot_positional_encoding(64, 50, tmp_path / "pe.png")
    assert path.read_bytes().startswith(b"\x89PNG") and path.stat().st_size > 5000


def test_training_curve_needs_loss_entries(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no training-loss entries"):
        plot_training_curve([{"train_runtime": 1.0}], tmp_path / "curve.png")
    history = [{"step": s, "loss": 5.0 / s, "learning_rate": 1e-3 * s} for s in range(1, 6)]
    assert plot_training_curve(history, tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG")


def test_attention_maps_are_distributions_over_real_tokens_only(trained_run) -> None:
    import torch

    from vaswani_transformer.evaluation import load_for_decoding
    from vaswani_transformer.plotting import attention_maps

    model, tokenizer = load_for_decoding(trained_run.model_dir, device="cpu")
    sources = ["Tom is reading a long book in the garden today.", "Hi."]
    translations = ["Tom liest heute im Garten ein langes Buch.", "Hallo."]
    implementation = model.config._attn_implementation
    together = attention_maps(model, tokenizer, sources, translations)  # one padded batch
    alone = attention_maps(model, tokenizer, sources[1:], translations[1:])[0]
    short = together[1]
    assert short.source_tokens == tokenizer.convert_ids_to_tokens(tokenizer(sources[1])["input_ids"])
    assert "<pad>" not in short.source_tokens + short.target_tokens and short.target_tokens[-1] == "</s>"
    config = model.config
    assert len(short.encoder) == config.num_encoder_layers and len(short.cross) == config.num_decoder_layers
    src, tgt = len(short.source_tokens), len(short.target_tokens)
    for layer in short.cross:
        assert layer.shape == (config.num_heads, tgt, src)
        torch.testing.assert_close(
            layer.sum(-1), torch.ones(config.num_heads, tgt)
        )  # nothing left on padding
    for layer in short.encoder:
        assert layer.shape == (config.num_heads, src, src)
    for padded, single in zip(
        short.cross + short.encoder + short.decoder, alone.cross + alone.encoder + alone.decoder, strict=True
    ):
        torch.testing.assert_close(padded, single, rtol=1e-4, atol=1e-5)  # padding changes nothing
    assert model.config._attn_implementation == implementation  # eager only while recording


def test_attention_command_writes_labelled_pictures(trained_run, tmp_path: Path, capsys) -> None:
    from vaswani_transformer.cli import plot_attention

    args = [str(trained_run.model_dir), "I love you.", "--output_dir", str(tmp_path), "--layer", "1"]
    assert plot_attention.main(args) == 0
    for name in ("cross_attention_layer1.png", "encoder_self_attention_layer1.png"):
        picture = tmp_path / name
        assert picture.read_bytes().startswith(b"\x89PNG") and picture.stat().st_size > 20_000
    assert "I love you.  ->" in capsys.readouterr().out
    assert plot_attention.main([*args[:4], "--layer", "9"]) == 2
    assert "--layer 9: the model has 2 layers of cross attention" in capsys.readouterr().err


@pytest.mark.parametrize("suffix", [".png", ".PDF", ".svg"])
def test_the_positional_encoding_is_written_in_the_format_its_suffix_names(
    tmp_path: Path, suffix: str
) -> None:
    path = plot_positional_encoding(8, 10, tmp_path / f"pe{suffix}")
    assert path.read_bytes().startswith({".png": b"\x89PNG", ".PDF": b"%PDF", ".svg": b"<?xml"}[suffix])


def test_a_format_matplotlib_does_not_write_is_refused_before_drawing(tmp_path: Path) -> None:
    """--output x.safetensors is refused before drawing (matplotlib raised ValueError after the drawing)."""
    for name in ("pe.safetensors", "pe"):
        with pytest.raises(
            ValueError, match=r"give a file name ending in a format matplotlib writes \(.*\.png.*\)"
        ):
            check_figure_file(tmp_path / name)
    assert "png" in figure_formats() and "svg" in figure_formats()
    assert not list(tmp_path.iterdir())


def test_a_positional_encoding_table_too_large_to_draw_is_refused_before_it_is_made() -> None:
    """--length 1000000000 is refused before the table is made (the kernel killed it after 40 s, silently)."""
    check_positional_encoding_size(512, MAX_ENCODING_VALUES // 512)
    for d_model, length in ((512, 10**9), (2, MAX_ENCODING_VALUES)):
        with pytest.raises(ValueError, match="lower --length or --d_model"):
            check_positional_encoding_size(d_model, length)
