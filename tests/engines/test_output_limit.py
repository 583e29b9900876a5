"""The model's output limit, read one way by everything that reads it (`model_max_length`): generate(), the torch
engine's record, the CTranslate2 export's decoding defaults and the CUDA graphs' cache length. transformers'
fallback max_length (20), which Seq2SeqTrainer writes into the generation config, is no limit: the paper's
"input length + 50" (§6.1) applies."""

import pytest

from vaswani_transformer.decoding.cuda_graphs import SHORTEST_CACHE_BUCKET, bucket, cache_length
from vaswani_transformer.engines.ctranslate2_export import decoding_defaults
from vaswani_transformer.engines.torch_engine import decoding_settings
from vaswani_transformer.modeling.generation_vaswani_transformer import (
    TRANSFORMERS_MAX_LENGTH,
    model_max_length,
)

LONGEST_SOURCE = 6  # conftest's source_batch: the longer sentence's tokens, </s> included


def generated_length(model, source_batch, **overrides) -> int:
    """The output length (decoder start token included) of greedy decoding that never ends a sentence early."""
    eos = model.config.eos_token_id
    output = model.generate(**source_batch, num_beams=1, suppress_tokens=[eos], **overrides)
    return output.shape[-1]


@pytest.mark.parametrize("max_length", [None, TRANSFORMERS_MAX_LENGTH])
def test_no_max_length_or_the_fallback_limits_the_output_to_the_source_plus_the_offset(
    tiny_model, source_batch, max_length
) -> None:
    tiny_model.generation_config.max_length = max_length
    offset = tiny_model.config.max_length_offset
    assert model_max_length(tiny_model.generation_config) is None
    assert generated_length(tiny_model, source_batch) == 1 + LONGEST_SOURCE + offset
    assert decoding_settings(tiny_model)["max_new_tokens"] == f"each source + {offset}"
    assert "max_length" not in decoding_settings(tiny_model)
    assert "max_decoding_length" not in decoding_defaults(tiny_model, 1024)
    limit = cache_length(tiny_model, LONGEST_SOURCE, {})
    assert limit == bucket(LONGEST_SOURCE + offset + 1, SHORTEST_CACHE_BUCKET)


def test_a_max_length_of_the_models_own_limits_every_reader(tiny_model, source_batch) -> None:
    tiny_model.generation_config.max_length = 200  # a converted published model's (fairseq's 200 tokens)
    assert model_max_length(tiny_model.generation_config) == 200
    assert generated_length(tiny_model, source_batch) == 200
    assert decoding_settings(tiny_model)["max_length"] == 200
    # CTranslate2 counts no start token
    assert decoding_defaults(tiny_model, 1024)["max_decoding_length"] == 199
    assert cache_length(tiny_model, LONGEST_SOURCE, {}) == bucket(201, SHORTEST_CACHE_BUCKET)


def test_a_calls_max_length_is_its_limit_even_at_the_fallbacks_value(tiny_model, source_batch) -> None:
    assert generated_length(tiny_model, source_batch, max_length=TRANSFORMERS_MAX_LENGTH) == 20
    assert decoding_settings(tiny_model, max_length=TRANSFORMERS_MAX_LENGTH)["max_length"] == 20
