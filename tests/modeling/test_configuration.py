"""The config: paper defaults, presets and their sizes, validation messages."""

import pytest
import torch

from vaswani_transformer import PRESETS, VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration


def test_defaults_are_the_paper_base_model() -> None:
    config = VaswaniTransformerConfig()
    assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
    assert (config.d_model, config.d_ff, config.num_heads) == (512, 2048, 8)
    assert (config.head_dim_k, config.head_dim_v) == (64, 64)
    assert config.dropout == 0.1 and config.label_smoothing == 0.1
    assert config.activation_function == "relu" and config.scale_embedding and config.tie_word_embeddings
    assert config.position_embedding_type == "sinusoidal"
    assert config.init_scheme == "normal" and config.init_std == 0.02
    # generic HF names
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (512, 8, 6)


def expected_parameters(
    vocab: int, d: int, d_ff: int, layers: int, h: int = 8, d_k: int | None = None
) -> int:
    """Parameter count from the paper's equations: bias-free W^Q/K/V/O, FFN with biases, LayerNorm γ/β."""
    d_k = d_k or d // h
    attention = 3 * d * h * d_k + h * d_k * d
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab * d + layers * (encoder_layer + decoder_layer)


def count_parameters(config: VaswaniTransformerConfig) -> int:
    with torch.device("meta"):
        model = VaswaniTransformerForConditionalGeneration(config)
    return sum(p.numel() for p in model.parameters())  # tied tables counted once


@pytest.mark.parametrize(
    ("preset", "d", "d_ff", "millions"),
    [("base", 512, 2048, 63.0), ("big", 1024, 4096, 214.2)],
)
def test_preset_parameter_counts(preset: str, d: int, d_ff: int, millions: float) -> None:
    config = VaswaniTransformerConfig.from_preset(preset, vocab_size=37000)
    heads = config.num_heads
    count = count_parameters(config)
    assert count == expected_parameters(37000, d, d_ff, 6, heads)
    assert abs(count / 1e6 - millions) < 0.5  # paper: 65M / 213M with their (unpublished exact) vocabulary


def test_tiny_preset_is_the_published_multi30k_baseline_size() -> None:
    """Wu et al. (ACL 2021): d_model 128, 4 + 4 layers, 4 heads, d_ff 256."""
    config = VaswaniTransformerConfig.from_preset("tiny", vocab_size=8000)
    assert (config.d_model, config.d_ff, config.num_heads) == (128, 256, 4)
    assert (config.num_encoder_layers, config.num_decoder_layers) == (4, 4)
    assert count_parameters(config) == expected_parameters(8000, 128, 256, 4, h=4)


def test_big_preset_and_overrides() -> None:
    config = VaswaniTransformerConfig.from_preset("big", vocab_size=1000, dropout=0.1)
    assert (config.d_model, config.d_ff, config.num_heads, config.dropout) == (1024, 4096, 16, 0.1)
    assert config.vocab_size == 1000


def test_every_preset_builds() -> None:
    for name in PRESETS:
        config = VaswaniTransformerConfig.from_preset(name, vocab_size=100)
        assert config.num_heads * config.head_dim_k > 0


def test_table3_head_presets_keep_computation_constant() -> None:
    for heads in (1, 4, 16, 32):
        config = VaswaniTransformerConfig.from_preset(f"base-h{heads}")
        assert config.num_heads * config.head_dim_k == 512


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 510}, "d_model (510) must be divisible by num_heads (8)"),
        ({"dropout": 1.0}, "dropout must be in [0, 1)"),
        ({"attention_dropout": -0.1}, "attention_dropout must be in [0, 1)"),
        ({"label_smoothing": 1.5}, "label_smoothing must be in [0, 1)"),
        ({"d_ff": 0}, "d_ff must be a positive integer"),
        ({"num_encoder_layers": -1}, "num_encoder_layers must be a positive integer"),
        (
            {"position_embedding_type": "rope"},
            "position_embedding_type must be one of ('sinusoidal', 'learned')",
        ),
        ({"length_penalty_type": "wu"}, "length_penalty_type must be one of ('gnmt', 'hf')"),
        ({"d_k": 0}, "d_k must be a positive integer or None"),
        ({"init_scheme": "kaiming"}, "init_scheme must be one of ('normal', 'xavier')"),
        ({"init_std": 0.0}, "init_std must be positive"),
    ],
)
def test_bad_values_raise_clear_errors(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        VaswaniTransformerConfig(**overrides)


def test_unknown_preset_lists_choices() -> None:
    with pytest.raises(ValueError, match="Unknown preset 'huge'.*'big'"):
        VaswaniTransformerConfig.from_preset("huge")


def test_explicit_head_sizes_allow_indivisible_d_model() -> None:
    config = VaswaniTransformerConfig(d_model=510, num_heads=8, d_k=16, d_v=64)
    assert (config.head_dim_k, config.head_dim_v) == (16, 64)
