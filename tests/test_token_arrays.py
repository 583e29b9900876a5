"""Tokenised pairs as flat token files: written in batches exactly as `tokenize_parallel` tokenises, mapped
read-only, served as the batches `DataCollatorForSeq2Seq` makes."""

from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from vaswani_transformer import token_arrays
from vaswani_transformer.data import TokenBudgetBatchSampler, load_tatoeba, tokenize_parallel
from vaswani_transformer.token_arrays import (
    PaddedPairBatches,
    TokenizedPairs,
    already_collated,
    token_dtype,
    write_tokenized,
)
from vaswani_transformer.tokenization import train_bpe


@pytest.fixture(scope="module")
def sample() -> Dataset:
    """Every 50th Tatoeba pair (short to long: the corpus is sorted by length), with an empty target and a
    whitespace-only source among them, as real corpora have."""
    tatoeba = load_tatoeba()[0]
    rows = tatoeba.select(range(0, len(tatoeba), 50)).to_dict()
    rows["target"][5], rows["source"][9] = "", "   "
    return Dataset.from_dict(rows)


@pytest.fixture(scope="module")
def tokenizer(sample: Dataset) -> PreTrainedTokenizerFast:
    """A small joint BPE trained on the sample."""
    return train_bpe(sample["source"][:] + sample["target"][:], 1500)


def rows_of(tokens: np.ndarray, lengths: np.ndarray) -> list[list[int]]:
    return [row.tolist() for row in np.split(np.asarray(tokens), np.cumsum(lengths)[:-1])]


def test_written_pairs_are_tokenize_parallels_ids_memory_mapped(
    sample: Dataset, tokenizer: PreTrainedTokenizerFast, tmp_path: Path, monkeypatch
) -> None:
    """Across many small batches, with the caller's tokenizer set to truncate: the same ids, the same pairs
    dropped for the same reasons, target counts of the labels; the tokenizer keeps its own settings."""
    monkeypatch.setattr(token_arrays, "ENCODE_BATCH", 97)
    tokenizer.backend_tokenizer.enable_truncation(4)
    stats = write_tokenized(sample, tokenizer, tmp_path, max_length=20)
    assert tokenizer.backend_tokenizer.truncation["max_length"] == 4
    expected, expected_stats = tokenize_parallel(sample, tokenizer, max_length=20)
    assert stats == expected_stats
    assert stats.removed_empty == 2 and stats.removed_too_long > 0 and stats.kept == len(expected)

    pairs = TokenizedPairs.load(tmp_path)
    assert isinstance(pairs.source, np.memmap) and not pairs.source.flags.writeable
    assert pairs.source.dtype == pairs.target.dtype == np.uint16
    assert rows_of(pairs.source, pairs.source_lengths) == expected["input_ids"]
    assert rows_of(pairs.target, pairs.target_lengths) == expected["labels"]
    labels = np.concatenate(expected["labels"])
    assert np.array_equal(pairs.target_counts(len(tokenizer)), np.bincount(labels, minlength=len(tokenizer)))
    in_memory = TokenizedPairs.from_dataset(expected)
    assert np.array_equal(in_memory.target_counts(len(tokenizer)), pairs.target_counts(len(tokenizer)))


def test_ids_are_stored_in_the_narrowest_type_that_holds_the_vocabulary() -> None:
    assert token_dtype(37_000) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.int32
    assert np.iinfo(token_dtype(65_536)).max == 65_535


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("mapped", [False, True])
def test_padded_pair_batches_equal_the_seq2seq_collator_within_budget(
    tokenizer: PreTrainedTokenizerFast, sample: Dataset, tmp_path: Path, num_workers: int, mapped: bool
) -> None:
    """From a tokenize_parallel Dataset (an index mapping, as selecting and filtering leave) or from the files
    write_tokenized made of the same pairs, mapped."""
    subset = sample.select(range(len(sample) - 1, 0, -2))
    tokenized, _ = tokenize_parallel(subset, tokenizer)
    pairs: TokenizedPairs | Dataset = tokenized
    if mapped:
        write_tokenized(subset, tokenizer, tmp_path, max_length=256)
        pairs = TokenizedPairs.load(tmp_path)
    batches = PaddedPairBatches(pairs, tokenizer.pad_token_id)
    lengths = batches.pairs.source_lengths, batches.pairs.target_lengths
    sampler = TokenBudgetBatchSampler(*lengths, max_tokens=600, seed=3)
    loader = DataLoader(batches, batch_sampler=sampler, collate_fn=already_collated, num_workers=num_workers)
    collator = DataCollatorForSeq2Seq(tokenizer, padding=True, label_pad_token_id=-100)
    rows = tokenized.remove_columns(["src_len", "tgt_len"])
    seen = 0
    for indices, batch in zip(sampler, loader, strict=True):
        expected = collator([rows[i] for i in indices])
        assert batch.keys() == expected.keys() == {"input_ids", "attention_mask", "labels"}
        for name, tensor in expected.items():
            assert batch[name].dtype == tensor.dtype and torch.equal(batch[name], tensor), name
        assert batch["input_ids"].numel() <= 600 and batch["labels"].numel() <= 600
        label_ends = (batch["labels"] != -100).sum(1) - 1
        assert (batch["labels"].gather(1, label_ends[:, None]) == tokenizer.eos_token_id).all()
        seen += batch["input_ids"].shape[0]
    assert seen == len(tokenized)
