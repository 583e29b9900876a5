"""The model options published weights need: fairseq's sinusoid layout, positions from an offset and
attention biases; off by default, checked, and honoured on every path (cache, static cache, learned table)."""

import pytest
import torch
from transformers.models.fsmt.modeling_fsmt import SinusoidalPositionalEmbedding

from tests.conftest import TINY
from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration

FAIRSEQ_LIKE = {"sinusoid_layout": "halves", "position_offset": 2, "attention_bias": True}


def model_with(seed: int = 0, **options) -> VaswaniTransformerForConditionalGeneration:
    torch.manual_seed(seed)
    config = VaswaniTransformerConfig(vocab_size=50, init_std=0.3, fast_path=False, **{**TINY, **options})
    return VaswaniTransformerForConditionalGeneration(config).eval()


def test_the_options_are_off_by_default() -> None:
    config = VaswaniTransformerConfig()
    assert (config.sinusoid_layout, config.position_offset, config.attention_bias) == (
        "interleaved",
        0,
        False,
    )
    assert all(layer.self_attn.q_proj.bias is None for layer in model_with().model.encoder.layers)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sinusoid_layout": "sines-first"}, "sinusoid_layout must be one of"),
        ({"position_offset": -1}, "position_offset must be >= 0"),
        (
            {"sinusoid_layout": "halves", "d_model": 2, "num_heads": 1},
            "at least 4 for sinusoid_layout='halves'",
        ),
    ],
)
def test_bad_options_are_refused(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VaswaniTransformerConfig(**options)


def test_halves_from_an_offset_are_fairseq_s_table() -> None:
    model = model_with(**FAIRSEQ_LIKE)
    table = SinusoidalPositionalEmbedding.get_embedding(100 + 2, 32, padding_idx=1)[2:]
    assert torch.equal(model.model.encoder.embed_positions(torch.arange(100)), table)


def test_attention_biases_are_used() -> None:
    model = model_with(**FAIRSEQ_LIKE)
    inputs = {"input_ids": torch.tensor([[5, 6, 7, 3]]), "decoder_input_ids": torch.tensor([[2, 8, 9]])}
    with torch.no_grad():
        before = model(**inputs).logits
        for layer in model.model.decoder.layers:
            layer.encoder_attn.out_proj.bias.fill_(0.5)
        assert not torch.allclose(model(**inputs).logits, before)


def test_the_offset_applies_with_and_without_the_cache() -> None:
    """The decoder's positions with a cache (one step at a time) are those of the whole sequence at once."""
    model = model_with(**FAIRSEQ_LIKE)
    source = {"input_ids": torch.tensor([[5, 6, 7, 8, 3], [9, 10, 3, 0, 0]])}
    source["attention_mask"] = (source["input_ids"] != 0).long()
    settings = {
        "num_beams": 1,
        "max_new_tokens": 6,
        "suppress_tokens": [model.config.eos_token_id],
    }  # 6 steps each
    with torch.no_grad():
        greedy = model.generate(**source, **settings)
        logits = model(**source, decoder_input_ids=greedy).logits
        logits[..., model.config.eos_token_id] = float("-inf")
        steps = logits[:, :-1].argmax(-1)
        static = model.generate(**source, **settings, cache_implementation="static")
    assert torch.equal(steps, greedy[:, 1:])
    assert torch.equal(static, greedy)


def test_the_offset_moves_the_learned_table_too() -> None:
    model = model_with(position_embedding_type="learned", position_offset=2, max_position_embeddings=8)
    positions = model.model.encoder.embed_positions
    assert positions.num_embeddings == 10
    assert torch.equal(positions(torch.arange(8)), positions.weight[2:])
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        positions(torch.arange(9))
