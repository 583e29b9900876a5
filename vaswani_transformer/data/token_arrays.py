"""Tokenised training pairs as flat token arrays: the one tokenisation path for training data, written once in
bounded memory, memory-mapped by every process, served as padded batches.

`tokenize_into` is the only code that turns text pairs into training ids (and drops pairs with an empty or
over-long side): `write_tokenized` sends its output to a prepared folder of the data cache (the training pairs),
`tokenize_pairs` keeps it in memory (a dev set, a test, a user's own pairs).

A prepared folder holds each side's token ids back to back in one raw file (`source.bin`, `target.bin`; uint16
when the vocabulary fits, else int32), each pair's length per side (`source_lengths.npy`, `target_lengths.npy`)
and how often each id occurs among the targets (`target_counts.npy`, for the loss floor). Training maps the token
files read-only, so the processes of a distributed run, and a DataLoader's workers, share one copy in the page
cache, and a run starts without reading them (fairseq's memory-mapped indexed datasets do the same).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow.compute as pc
import torch
from datasets import Dataset, Features, List, Value
from tokenizers import Tokenizer
from torch.utils.data import Dataset as TorchDataset
from transformers import PreTrainedTokenizerBase

from .prepared import SIDES, arrow_batches

ENCODE_BATCH = 10_000  # pairs encoded at a time: bounds preparation's memory, not its speed
COUNT_CHUNK = 1 << 24  # token ids counted at a time (bincount widens them to 8 bytes each)
FORMAT_FILE = "tokens.json"
# `tokenize_parallel`'s columns: the pairs as rows of ids, for `datasets` and the stock Seq2SeqTrainer
TOKENIZED_FEATURES = Features(
    {
        "input_ids": List(Value("int32")),
        "attention_mask": List(Value("int8")),
        "labels": List(Value("int32")),
        "src_len": Value("int32"),
        "tgt_len": Value("int32"),
    }
)


@dataclass
class FilterStats:
    """How many tokenised pairs `tokenize_into` kept, and why it removed the others."""

    total: int
    kept: int
    removed_empty: int
    removed_too_long: int
    max_length: int

    def summary(self) -> str:
        """One line for logs."""
        return (
            f"tokenised {self.total:,} pairs, kept {self.kept:,}; removed {self.removed_empty:,} with an "
            f"empty side, {self.removed_too_long:,} with a side longer than {self.max_length} tokens"
        )


def dropped_pairs(
    src_len: np.ndarray, tgt_len: np.ndarray, n_special: int, max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Which pairs training drops, by their lengths in tokens: those with a side of special tokens only (empty),
    and the others with a side longer than `max_length`."""
    empty = (src_len <= n_special) | (tgt_len <= n_special)
    return empty, ~empty & ((src_len > max_length) | (tgt_len > max_length))


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest id type for the vocabulary: uint16 up to 65,536 tokens (the paper's 37k), else int32."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """Each row's start in the flat array, plus the end."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _count_ids(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """How often each id occurs in `tokens`, counted in chunks (no full-size int64 copy of a mapped file)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start in range(0, len(tokens), COUNT_CHUNK):
        counts += np.bincount(tokens[start : start + COUNT_CHUNK], minlength=vocab_size)[:vocab_size]
    return counts


def _flat_ids(rows: Sequence[Sequence[int]], lengths: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A batch's rows of ids back to back, in the token files' dtype."""
    return np.fromiter(chain.from_iterable(rows), dtype=dtype, count=int(lengths.sum()))


def _flat_list_column(ds: Dataset, name: str) -> tuple[np.ndarray, np.ndarray]:
    """A list-of-ids column as one flat int32 array and each row's length."""
    column = ds.with_format("arrow")[name].combine_chunks()
    tokens = pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return tokens, pc.list_value_length(column).to_numpy(zero_copy_only=False).astype(np.int64)


class TokenizedPairs:
    """Tokenised pairs: each side's ids as one flat array (in memory, or mapped from a prepared folder) with each
    pair's length, without a Python object per token."""

    def __init__(
        self,
        source: np.ndarray,
        source_lengths: np.ndarray,
        target: np.ndarray,
        target_lengths: np.ndarray,
        target_counts: np.ndarray | None = None,
    ) -> None:
        self.source, self.target = source, target
        self.source_lengths = np.asarray(source_lengths, dtype=np.int64)
        self.target_lengths = np.asarray(target_lengths, dtype=np.int64)
        self.source_offsets, self.target_offsets = (
            _offsets(self.source_lengths),
            _offsets(self.target_lengths),
        )
        self._target_counts = target_counts

    def __len__(self) -> int:
        return len(self.source_lengths)

    @classmethod
    def from_dataset(cls, ds: Dataset) -> "TokenizedPairs":
        """The "input_ids" and "labels" columns of a `tokenize_parallel` Dataset, copied into flat arrays."""
        (source, source_lengths), (target, target_lengths) = (
            _flat_list_column(ds, name) for name in ("input_ids", "labels")
        )
        return cls(source, source_lengths, target, target_lengths)

    @classmethod
    def load(cls, folder: Path) -> "TokenizedPairs":
        """The pairs `write_tokenized` wrote into `folder`, their token files mapped read-only."""
        dtype = np.dtype(json.loads((folder / FORMAT_FILE).read_text())["dtype"])
        lengths = {side: np.load(folder / f"{side}_lengths.npy") for side in SIDES}
        tokens = {
            side: np.memmap(folder / f"{side}.bin", dtype=dtype, mode="r")
            if lengths[side].sum()
            else np.empty(0, dtype)  # a file of no bytes cannot be mapped
            for side in SIDES
        }
        counts = np.load(folder / "target_counts.npy")
        return cls(tokens["source"], lengths["source"], tokens["target"], lengths["target"], counts)

    def target_counts(self, vocab_size: int) -> np.ndarray:
        """How often each of the vocabulary's ids occurs among the targets (what `monitoring.unigram_loss` needs)."""
        if self._target_counts is None or len(self._target_counts) != vocab_size:
            self._target_counts = _count_ids(self.target, vocab_size)
        return self._target_counts

    def _rows(self, side: str) -> list[list[int]]:
        tokens, offsets = (
            (self.source, self.source_offsets) if side == "source" else (self.target, self.target_offsets)
        )
        return [tokens[start:end].tolist() for start, end in zip(offsets[:-1], offsets[1:], strict=True)]

    def to_dataset(self) -> Dataset:
        """The pairs as a Dataset of rows (`TOKENIZED_FEATURES`: input_ids, attention_mask, labels and each side's
        length), which the stock Seq2SeqTrainer and DataCollatorForSeq2Seq take. Meant for small sets (a dev
        set): every id becomes a Python int on the way."""
        sources, targets = self._rows("source"), self._rows("target")
        columns = {
            "input_ids": sources,
            "attention_mask": [[1] * len(row) for row in sources],
            "labels": targets,
            "src_len": self.source_lengths.tolist(),
            "tgt_len": self.target_lengths.tolist(),
        }
        return Dataset.from_dict(columns, features=TOKENIZED_FEATURES)


class _TokenSink(Protocol):
    """Where `tokenize_into` sends the kept pairs' ids, a batch and a side at a time."""

    def add(self, side: str, rows: Sequence[Sequence[int]], lengths: np.ndarray) -> None: ...

    def close(self) -> None: ...


class _TokenFileWriter:
    """Appends pairs' ids to a prepared folder's token files and keeps their lengths and target counts."""

    def __init__(self, folder: Path, vocab_size: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.dtype = folder, token_dtype(vocab_size)
        self.files = {side: (folder / f"{side}.bin").open("wb") for side in SIDES}
        self.lengths: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
        self.counts = np.zeros(vocab_size, dtype=np.int64)

    def add(self, side: str, rows: Sequence[Sequence[int]], lengths: np.ndarray) -> None:
        ids = _flat_ids(rows, lengths, self.dtype)
        ids.tofile(self.files[side])
        self.lengths[side].append(lengths)
        if side == "target":
            self.counts += _count_ids(ids, len(self.counts))

    def close(self) -> None:
        for side, file in self.files.items():
            file.close()
            lengths = np.concatenate(self.lengths[side]) if self.lengths[side] else np.zeros(0, np.int64)
            np.save(self.folder / f"{side}_lengths.npy", lengths.astype(np.int32))
        np.save(self.folder / "target_counts.npy", self.counts)
        (self.folder / FORMAT_FILE).write_text(json.dumps({"dtype": self.dtype.name}))


class _TokenArrays:
    """Collects pairs' ids in memory as `_TokenFileWriter` writes them, and gives them as TokenizedPairs."""

    def __init__(self, vocab_size: int) -> None:
        self.dtype = token_dtype(vocab_size)
        self.ids: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}
        self.lengths: dict[str, list[np.ndarray]] = {side: [] for side in SIDES}

    def add(self, side: str, rows: Sequence[Sequence[int]], lengths: np.ndarray) -> None:
        self.ids[side].append(_flat_ids(rows, lengths, self.dtype))
        self.lengths[side].append(lengths)

    def close(self) -> None:
        """Nothing to release."""

    def pairs(self) -> TokenizedPairs:
        ids = {side: np.concatenate(self.ids[side] or [np.zeros(0, self.dtype)]) for side in SIDES}
        lengths = {side: np.concatenate(self.lengths[side] or [np.zeros(0, np.int64)]) for side in SIDES}
        return TokenizedPairs(ids["source"], lengths["source"], ids["target"], lengths["target"])


def _ids(encodings: list) -> tuple[list[list[int]], np.ndarray]:
    rows = [encoding.ids for encoding in encodings]
    return rows, np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))


def tokenize_into(
    pairs: Dataset, tokenizer: PreTrainedTokenizerBase, sink: _TokenSink, max_length: int
) -> FilterStats:
    """Tokenise the pairs ("source"/"target") with the tokenizer's own settings (special tokens added, nothing
    truncated) into `sink`, dropping those with an empty side or a side longer than `max_length` tokens
    (`dropped_pairs`). Batches of ENCODE_BATCH pairs keep memory bounded whatever the corpus size; the fast
    tokenizer encodes each batch on every core."""
    backend = Tokenizer.from_str(
        tokenizer.backend_tokenizer.to_str()
    )  # a copy: the caller's keeps its settings
    backend.no_truncation()
    backend.no_padding()
    n_special = tokenizer.num_special_tokens_to_add()
    totals = np.zeros(3, dtype=np.int64)  # kept, empty, too long
    try:
        for batch in arrow_batches(pairs, SIDES, ENCODE_BATCH):  # plain reads of a cached corpus file
            encoded = {side: _ids(backend.encode_batch_fast(batch[side].to_pylist())) for side in SIDES}
            empty, too_long = dropped_pairs(encoded["source"][1], encoded["target"][1], n_special, max_length)
            keep = ~(empty | too_long)
            for side, (rows, lengths) in encoded.items():
                kept_rows = (
                    rows if keep.all() else [row for row, kept in zip(rows, keep, strict=True) if kept]
                )
                sink.add(side, kept_rows, lengths[keep])
            totals += (int(keep.sum()), int(empty.sum()), int(too_long.sum()))
    finally:
        sink.close()
    kept, empty, too_long = map(int, totals)
    return FilterStats(len(pairs), kept, empty, too_long, max_length)


def write_tokenized(
    pairs: Dataset, tokenizer: PreTrainedTokenizerBase, folder: Path, max_length: int
) -> FilterStats:
    """The pairs tokenised (`tokenize_into`) into a prepared folder's token files (`TokenizedPairs.load`)."""
    return tokenize_into(pairs, tokenizer, _TokenFileWriter(folder, len(tokenizer)), max_length)


def tokenize_pairs(
    pairs: Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int
) -> tuple[TokenizedPairs, FilterStats]:
    """The pairs tokenised (`tokenize_into`) into memory."""
    arrays = _TokenArrays(len(tokenizer))
    stats = tokenize_into(pairs, tokenizer, arrays, max_length)
    return arrays.pairs(), stats


def tokenize_parallel(
    pairs: Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int = 256
) -> tuple[Dataset, FilterStats]:
    """`tokenize_pairs` as a Dataset of rows (`TokenizedPairs.to_dataset`), for `datasets` and the stock
    Seq2SeqTrainer."""
    tokenized, stats = tokenize_pairs(pairs, tokenizer, max_length)
    return tokenized.to_dataset(), stats


def _padded_rows(
    tokens: np.ndarray, offsets: np.ndarray, indices: np.ndarray, pad: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rows `indices` right-padded with `pad` into one (rows, longest) int64 array, and the mask of real tokens."""
    starts, lengths = offsets[indices], offsets[indices + 1] - offsets[indices]
    width = int(lengths.max()) if len(indices) else 0
    real = np.arange(width) < lengths[:, None]  # (rows, longest)
    padded = np.full(real.shape, pad, dtype=np.int64)
    padded[real] = tokens[(starts[:, None] + np.arange(width))[real]]
    return padded, real


class PaddedPairBatches(TorchDataset):
    """Tokenised pairs served as padded batches without a Python object per token.

    `pairs.__getitems__(indices)` (what a DataLoader with a batch sampler calls) returns the tensors that
    `DataCollatorForSeq2Seq(label_pad_token_id=-100)` makes from the same rows: input_ids padded with `pad_token_id`,
    attention_mask, labels padded with -100 (the model shifts labels into decoder inputs itself). Memory: the
    pairs' own arrays (mapped from a prepared folder, shared by forked loader workers and by processes).
    """

    def __init__(self, pairs: TokenizedPairs | Dataset, pad_token_id: int) -> None:
        """Serve `pairs`: TokenizedPairs, or a `tokenize_parallel` Dataset (copied into flat arrays)."""
        self.pairs = pairs if isinstance(pairs, TokenizedPairs) else TokenizedPairs.from_dataset(pairs)
        self.pad_token_id = pad_token_id

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {name: rows[0] for name, rows in self.__getitems__([index]).items()}

    def __getitems__(self, indices: Sequence[int]) -> dict[str, torch.Tensor]:
        rows = np.asarray(indices, dtype=np.int64)
        pairs = self.pairs
        input_ids, real = _padded_rows(pairs.source, pairs.source_offsets, rows, self.pad_token_id)
        labels, _ = _padded_rows(pairs.target, pairs.target_offsets, rows, -100)
        return {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(real.astype(np.int64)),
            "labels": torch.from_numpy(labels),
        }


def already_collated(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The DataLoader's collate_fn for `PaddedPairBatches`, whose batches come out collated."""
    return batch
