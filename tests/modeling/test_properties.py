"""Properties that must hold for every batch: finite outputs, padding that changes nothing, cache = no cache.

Hypothesis draws batch sizes, sentence lengths (so padding patterns), decoder lengths, and attention
implementations, on a seeded tiny model in eval mode.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration

PAD, EOS, START = 0, 3, 2
VOCAB = 64
IMPLEMENTATIONS = ("eager", "sdpa")


@pytest.fixture(scope="module")
def models() -> dict[str, VaswaniTransformerForConditionalGeneration]:
    """One seeded tiny model per attention implementation, with identical weights."""
    torch.manual_seed(0)
    reference = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=VOCAB, init_std=0.1)).eval()
    result = {}
    for implementation in IMPLEMENTATIONS:
        model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=VOCAB, init_std=0.1)).eval()
        model.load_state_dict(reference.state_dict())
        model.set_attn_implementation(implementation)
        result[implementation] = model
    return result


sentences = st.lists(st.lists(st.integers(4, VOCAB - 1), min_size=1, max_size=9), min_size=1, max_size=4)


def right_padded(rows: list[list[int]]) -> dict[str, torch.Tensor]:
    """Rows right-padded into one batch, with its attention mask."""
    width = max(map(len, rows))
    input_ids = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long()}


@settings(max_examples=30, deadline=None, derandomize=True)
@given(sources=sentences, targets=sentences, implementation=st.sampled_from(IMPLEMENTATIONS))
def test_outputs_are_finite_and_padding_invariant(models, sources, targets, implementation) -> None:
    model = models[implementation]
    count = min(len(sources), len(targets))
    sources, targets = sources[:count], targets[:count]
    sources = [row + [EOS] for row in sources]
    source = right_padded(sources)
    decoder = right_padded([[START, *target] for target in targets])  # teacher forcing
    with torch.no_grad():
        batch = model(
            **source, decoder_input_ids=decoder["input_ids"], decoder_attention_mask=decoder["attention_mask"]
        ).logits  # (batch, tgt_len, vocab)
        assert torch.isfinite(batch).all()
        for row in range(count):
            alone_source = right_padded([sources[row]])
            real = int(decoder["attention_mask"][row].sum())
            alone = model(
                **alone_source, decoder_input_ids=decoder["input_ids"][row : row + 1, :real]
            ).logits  # (1, real, vocab)
            torch.testing.assert_close(batch[row, :real], alone[0], rtol=1e-4, atol=1e-5)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(sources=sentences, implementation=st.sampled_from(IMPLEMENTATIONS), new_tokens=st.integers(1, 6))
def test_cached_decoding_equals_recomputing_everything(models, sources, implementation, new_tokens) -> None:
    model = models[implementation]
    greedy = {"num_beams": 1, "max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    greedy |= {"output_scores": True, "return_dict_in_generate": True}
    with torch.no_grad():
        batch = right_padded([row + [EOS] for row in sources])
        cached = model.generate(**batch, use_cache=True, **greedy)
        uncached = model.generate(**batch, use_cache=False, **greedy)
    assert torch.equal(cached.sequences, uncached.sequences)
    for with_cache, without in zip(cached.scores, uncached.scores, strict=True):
        torch.testing.assert_close(with_cache, without, rtol=1e-4, atol=1e-4)
