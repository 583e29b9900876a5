"""The joint BPE tokenizer: special ids, reversible encoding, </s>, labels, save/load, options."""

import re
from pathlib import Path

import pytest
from datasets import Dataset
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from vaswani_transformer.data import load_tatoeba, load_text_pair
from vaswani_transformer.data.tokenization import (
    BOS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    UNK,
    load_tokenizer,
    train_bpe,
)

VOCAB_SIZE = 2000
HANDWRITTEN = [
    "Grüß Gott! Ich wohne in der Müllerstraße 12, 80331 München.",
    'Tom sagte: "Es ist 3:45 Uhr." Ich glaube ihm nicht.',
    "Ärger, Öl und Übermut: 3 Dinge kosten 19,99 Euro?",
    "I don't know if it's true; Mary's car isn't red.",
    "Hello , world . 1 2 3 ... ?!",
]


@pytest.fixture(scope="module")
def tatoeba() -> Dataset:
    """The embedded English-German corpus."""
    return load_tatoeba()[0]


@pytest.fixture(scope="module")
def tokenizer(tatoeba: Dataset) -> PreTrainedTokenizerFast:
    """A small joint BPE trained on every 50th pair (both languages)."""
    sample = tatoeba.select(range(0, len(tatoeba), 50))
    return train_bpe(sample["source"][:] + sample["target"][:], VOCAB_SIZE)


def held_out_texts(tatoeba: Dataset) -> list[str]:
    """English and German sentences the small tokenizer was not trained on."""
    sample = tatoeba.select(range(25, len(tatoeba), 50))
    return sample["source"][:] + sample["target"][:]


def round_trip(tokenizer: PreTrainedTokenizerFast, text: str) -> str:
    """Encode then decode without special tokens."""
    return tokenizer.decode(tokenizer(text)["input_ids"], skip_special_tokens=True)


def normalized(tokenizer: PreTrainedTokenizerFast, text: str) -> str:
    """The text after the tokenizer's normaliser."""
    return tokenizer.backend_tokenizer.normalizer.normalize_str(text)


def test_special_tokens_have_fixed_ids_and_vocab_size_is_respected(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    assert SPECIAL_TOKENS == [PAD, UNK, BOS, EOS]
    assert tokenizer.convert_tokens_to_ids(SPECIAL_TOKENS) == [0, 1, 2, 3]
    ids = (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    assert ids == (0, 1, 2, 3)
    assert len(tokenizer) == VOCAB_SIZE
    assert tokenizer.padding_side == "right"
    assert tokenizer.model_max_length == 1024


def test_round_trip_on_held_out_german_and_english(
    tokenizer: PreTrainedTokenizerFast, tatoeba: Dataset
) -> None:
    vocab = tokenizer.get_vocab()
    texts = held_out_texts(tatoeba) + HANDWRITTEN
    known = [t for t in texts if all(c in vocab or c == " " for c in normalized(tokenizer, t))]
    assert len(known) >= 0.99 * len(texts)  # characters unseen in training become <unk>
    assert all(t in known for t in HANDWRITTEN)
    mismatches = [t for t in known if round_trip(tokenizer, t) != normalized(tokenizer, t)]
    assert mismatches == []
    assert round_trip(tokenizer, HANDWRITTEN[0]) == HANDWRITTEN[0]


def test_round_trip_on_multi30k(tokenizer: PreTrainedTokenizerFast, shared_data: Path) -> None:
    val = shared_data / "multi30k" / "val"
    pairs, _ = load_text_pair(val.with_suffix(".en"), val.with_suffix(".de"))
    vocab = tokenizer.get_vocab()
    texts = [t for t in pairs["source"][:] + pairs["target"][:] if all(c in vocab or c == " " for c in t)]
    assert len(texts) > 1900
    assert [t for t in texts if round_trip(tokenizer, t) != t] == []


def test_normaliser_collapses_whitespace_and_applies_nfkc(tokenizer: PreTrainedTokenizerFast) -> None:
    assert round_trip(tokenizer, "  Hallo \t  Welt \n") == "Hallo Welt"
    assert normalized(tokenizer, "ﬁnden² Mu\u0308ller") == "finden2 Müller"


def test_unseen_character_becomes_unk(tokenizer: PreTrainedTokenizerFast) -> None:
    ids = tokenizer("Der ☃ schmilzt.")["input_ids"]
    assert ids.count(tokenizer.unk_token_id) == 1
    assert tokenizer.decode(ids) == "Der <unk> schmilzt.</s>"


def test_digits_and_punctuation_never_merge_with_letters(tokenizer: PreTrainedTokenizerFast) -> None:
    pieces = [t.removeprefix("▁") for t in tokenizer.get_vocab() if t not in SPECIAL_TOKENS]
    assert [p for p in pieces if re.search(r"\d", p) and len(p) > 1] == []
    mixed = [p for p in pieces if re.search(r"[^\w'’]", p) and re.search(r"[^\W\d_]", p)]
    assert mixed == []
    tokens = tokenizer.tokenize("Er kam 1984 an.")
    start = tokens.index("▁1")
    assert tokens[start : start + 4] == ["▁1", "9", "8", "4"]


def test_eos_is_appended_once_and_no_bos(tokenizer: PreTrainedTokenizerFast) -> None:
    batch = tokenizer(HANDWRITTEN + [""])["input_ids"]
    for ids in batch:
        assert ids[-1] == tokenizer.eos_token_id
        assert ids.count(tokenizer.eos_token_id) == 1
        assert tokenizer.bos_token_id not in ids
    assert batch[-1] == [tokenizer.eos_token_id]


def test_text_target_gives_labels(tokenizer: PreTrainedTokenizerFast) -> None:
    sources, targets = ["How are you?", "I like 2 cats."], ["Wie geht es dir?", "Ich mag 2 Katzen."]
    encoded = tokenizer(sources, text_target=targets)
    assert set(encoded) == {"input_ids", "attention_mask", "labels"}
    assert encoded["input_ids"] == tokenizer(sources)["input_ids"]
    assert encoded["labels"] == tokenizer(targets)["input_ids"]
    assert encoded["labels"] != encoded["input_ids"]
    assert tokenizer.batch_decode(encoded["labels"], skip_special_tokens=True) == targets


def test_save_and_auto_load_round_trip(
    tokenizer: PreTrainedTokenizerFast, tatoeba: Dataset, tmp_path: Path
) -> None:
    tokenizer.save_pretrained(tmp_path)
    texts = held_out_texts(tatoeba)[:300] + HANDWRITTEN
    expected = tokenizer(texts)["input_ids"]
    for loaded in (AutoTokenizer.from_pretrained(tmp_path), load_tokenizer(str(tmp_path))):
        assert loaded(texts)["input_ids"] == expected
        assert loaded.batch_decode(expected, skip_special_tokens=True) == tokenizer.batch_decode(
            expected, skip_special_tokens=True
        )
        assert loaded.all_special_ids == tokenizer.all_special_ids
        assert (loaded.pad_token_id, loaded.eos_token_id, len(loaded)) == (0, 3, VOCAB_SIZE)
        padded = loaded(["Hallo!", "Wie geht es dir heute?"], padding=True)
        assert padded["input_ids"][0][-1] == loaded.pad_token_id
        assert padded["attention_mask"][0][-1] == 0


def test_lowercase_option(tatoeba: Dataset) -> None:
    texts = tatoeba.select(range(0, len(tatoeba), 200))["target"][:]
    lower = train_bpe(texts, 500, lowercase=True)
    assert round_trip(lower, "Guten Morgen, Herr Müller!") == "guten morgen, herr müller!"
    assert all(token == token.lower() for token in lower.get_vocab() if token not in SPECIAL_TOKENS)
    cased = train_bpe(texts, 500)
    assert any(token != token.lower() for token in cased.get_vocab())


@pytest.mark.parametrize(
    ("normalization", "expected"),
    [("NFKC", "fi2 Müller"), ("NFC", "ﬁ² Müller"), (None, "ﬁ² Mu\u0308ller")],
)
def test_normalization_options(normalization: str | None, expected: str) -> None:
    tokenizer = train_bpe(["ﬁ² Mu\u0308ller", "Müller"] * 5, 100, normalization=normalization)
    assert normalized(tokenizer, "ﬁ² Mu\u0308ller") == expected
    assert round_trip(tokenizer, "ﬁ² Mu\u0308ller") == expected


def test_unknown_normalization_is_rejected() -> None:
    with pytest.raises(ValueError, match="NFD"):
        train_bpe(["a b"], 10, normalization="NFD")


@pytest.mark.slow  # a 37,000-token BPE of the whole corpus
def test_training_on_full_tatoeba(tatoeba: Dataset) -> None:
    tokenizer = train_bpe(tatoeba["source"][:] + tatoeba["target"][:], 37000)
    assert len(tokenizer) == 37000
    sample = tatoeba[1000:1100]
    assert tokenizer.batch_decode(tokenizer(sample["target"])["input_ids"], skip_special_tokens=True) == [
        normalized(tokenizer, t) for t in sample["target"]
    ]
