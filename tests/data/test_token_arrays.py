"""The one tokenisation path (`tokenize_into`): the tokenizer's own ids, in bounded batches, into flat token
files (mapped read-only) or memory, served as the batches `DataCollatorForSeq2Seq` makes."""

from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from vaswani_transformer.data import TokenBudgetBatchSampler, load_tatoeba, token_arrays, tokenize_parallel
from vaswani_transformer.data.token_arrays import (
    PaddedPairBatches,
    TokenizedPairs,
    already_collated,
    token_dtype,
    tokenize_pairs,
    write_tokenized,
)
from vaswani_transformer.data.tokenization import train_bpe


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


def reference_tokenization(
    pairs: Dataset, tokenizer: PreTrainedTokenizerFast, max_length: int
) -> tuple[list[list[int]], list[list[int]], int, int]:
    """What the tokenizer itself gives for the pairs (its __call__, untruncated), with training's rule applied
    row by row: (kept source ids, kept target ids, pairs with an empty side, pairs with a side too long)."""
    encoded = tokenizer(pairs["source"][:], text_target=pairs["target"][:], truncation=False)
    special = tokenizer.num_special_tokens_to_add()
    sources, targets, empty, too_long = [], [], 0, 0
    for source, target in zip(encoded["input_ids"], encoded["labels"], strict=True):
        if min(len(source), len(target)) <= special:
            empty += 1
        elif max(len(source), len(target)) > max_length:
            too_long += 1
        else:
            sources.append(source)
            targets.append(target)
    return sources, targets, empty, too_long


def test_training_pairs_are_the_tokenizers_own_ids_in_files_and_in_memory(
    sample: Dataset, tokenizer: PreTrainedTokenizerFast, tmp_path: Path, monkeypatch
) -> None:
    """Across many small batches, with the caller's tokenizer set to truncate: the tokenizer's own ids, the same
    pairs dropped for the same reasons, target counts of the labels, alike in files and in memory; the tokenizer
    keeps its own settings."""
    monkeypatch.setattr(token_arrays, "ENCODE_BATCH", 97)
    sources, targets, empty, too_long = reference_tokenization(sample, tokenizer, max_length=20)
    tokenizer.backend_tokenizer.enable_truncation(4)
    stats = write_tokenized(sample, tokenizer, tmp_path, max_length=20)
    assert tokenizer.backend_tokenizer.truncation["max_length"] == 4
    assert (stats.total, stats.kept, stats.removed_empty, stats.removed_too_long) == (
        len(sample),
        len(sources),
        empty,
        too_long,
    )
    assert empty == 2 and too_long > 0

    pairs = TokenizedPairs.load(tmp_path)
    assert isinstance(pairs.source, np.memmap) and not pairs.source.flags.writeable
    assert pairs.source.dtype == pairs.target.dtype == np.uint16
    assert rows_of(pairs.source, pairs.source_lengths) == sources
    assert rows_of(pairs.target, pairs.target_lengths) == targets
    counts = np.bincount(np.concatenate(targets), minlength=len(tokenizer))
    assert np.array_equal(pairs.target_counts(len(tokenizer)), counts)
    in_memory, in_memory_stats = tokenize_pairs(sample, tokenizer, max_length=20)
    assert in_memory_stats == stats
    assert rows_of(in_memory.source, in_memory.source_lengths) == sources
    assert rows_of(in_memory.target, in_memory.target_lengths) == targets
    assert np.array_equal(in_memory.target_counts(len(tokenizer)), counts)


def test_tokenize_parallel_gives_the_pairs_as_rows_with_exact_counts(
    tokenizer: PreTrainedTokenizerFast, sample: Dataset
) -> None:
    """The Dataset form (for `datasets` and the stock Seq2SeqTrainer): a row per kept pair, its lengths."""
    long_text = " ".join(["Haus"] * 40)
    extra = Dataset.from_dict(
        {
            "source": ["   ", long_text, "Short.", " ", "Fine."],
            "target": ["Leer.", "Kurz.", long_text, long_text, "Gut."],
        }
    )
    pairs = datasets.concatenate_datasets([sample.select(range(100)), extra])
    tokenized, stats = tokenize_parallel(pairs, tokenizer, max_length=20)
    sources, targets, empty, too_long = reference_tokenization(pairs, tokenizer, max_length=20)
    assert (stats.total, stats.removed_empty, stats.removed_too_long) == (105, empty, too_long)
    assert stats.kept == len(tokenized) == len(sources) and f"kept {len(sources):,}" in stats.summary()
    assert tokenized.column_names == ["input_ids", "attention_mask", "labels", "src_len", "tgt_len"]
    rows = tokenized[:]
    assert rows["input_ids"] == sources and rows["labels"] == targets
    assert rows["attention_mask"] == [[1] * len(ids) for ids in sources]
    assert rows["src_len"] == [len(ids) for ids in sources] and rows["tgt_len"] == [
        len(ids) for ids in targets
    ]
    assert tokenizer.decode(rows["labels"][-1], skip_special_tokens=True) == "Gut."


def test_ids_are_stored_in_the_narrowest_type_that_holds_the_vocabulary() -> None:
    assert token_dtype(37_000) == np.uint16 and token_dtype(65_536) == np.uint16
    assert token_dtype(65_537) == np.int32
    assert np.iinfo(token_dtype(65_536)).max == 65_535


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("mapped", [False, True])
def test_padded_pair_batches_equal_the_seq2seq_collator_within_budget(
    tokenizer: PreTrainedTokenizerFast, sample: Dataset, tmp_path: Path, num_workers: int, mapped: bool
) -> None:
    """From a tokenize_parallel Dataset (copied into flat arrays) or from the files write_tokenized made of the
    same pairs, mapped."""
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
