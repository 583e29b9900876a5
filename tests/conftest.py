"""Shared fixtures: tiny model configs and the path to ../shared/data."""

from pathlib import Path

import pytest
import torch

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real corpora beside the checkout (research-only: read, never copied into the repo)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} not found: the real-corpus tests need ../shared/data beside the repo")
    return SHARED_DATA


def tiny_config(**overrides: object) -> VaswaniTransformerConfig:
    """A few-thousand-parameter model with uneven stack depths (catches encoder/decoder mix-ups)."""
    values: dict[str, object] = {
        "vocab_size": 64,
        "d_model": 32,
        "d_ff": 64,
        "num_heads": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 3,
        "dropout": 0.0,
    }
    values.update(overrides)
    return VaswaniTransformerConfig(**values)


@pytest.fixture
def tiny_model() -> VaswaniTransformerForConditionalGeneration:
    """A seeded tiny model in eval mode."""
    torch.manual_seed(0)
    return VaswaniTransformerForConditionalGeneration(tiny_config()).eval()


@pytest.fixture
def source_batch() -> dict[str, torch.Tensor]:
    """Two right-padded source sentences (pad = 0, eos = 3)."""
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0]])
    return {"input_ids": input_ids, "attention_mask": (input_ids != 0).long()}


@pytest.fixture(scope="session")
def letter_tokenizer():
    """A word-level tokenizer over the letters a-z with this package's special tokens (ids 0-3)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3} | {chr(97 + i): 4 + i for i in range(26)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 3)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
