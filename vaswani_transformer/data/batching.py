"""§5.1 batches: "sentence pairs were batched together by approximate sequence length", about 25,000 source and
25,000 target tokens each (here `max_tokens` per side and process); and, for a compiled job, the same batches in
a bounded set of shapes (`ShapeBuckets`)."""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from torch.utils.data import Sampler

# A compiled training step is compiled once per batch shape, and dynamo stops compiling a function after
# `torch._dynamo.config.recompile_limit` (8) shapes and runs the rest eagerly: at most this many shapes.
MAX_COMPILED_SHAPES = 8
# Padded lengths are multiples of this (or of a multiple of it, for long sentences): tensor-core friendly sizes.
LENGTH_QUANTUM = 16


def _round_up(values: np.ndarray, multiple: int) -> np.ndarray:
    return -(-values // multiple) * multiple


@dataclass(frozen=True)
class ShapeBuckets:
    """Token-budget batches padded to one shape per length bucket, so that a compiled step compiles a known few
    times (`MAX_COMPILED_SHAPES` at most).

    Lengths are rounded up to a multiple of `multiple` (source and target to the same length); a batch of padded
    length L has `max(1, max_tokens // L)` rows, the rows missing from it filled with pad sentences. The sampler
    packs by the rounded lengths (`TokenBudgetBatchSampler(length_multiple=...)`), so no batch needs more rows.
    Padding changes no loss: padded label positions and rows are -100, which the loss ignores and does not count.
    """

    multiple: int
    max_tokens: int

    @classmethod
    def for_lengths(cls, longest: np.ndarray, max_tokens: int) -> "ShapeBuckets":
        """Buckets of `LENGTH_QUANTUM` tokens, wider for long sentences so that at most `MAX_COMPILED_SHAPES`
        lengths cover `longest` (each pair's longer side)."""
        top = int(longest.max()) if len(longest) else 1
        quanta = -(-top // (LENGTH_QUANTUM * MAX_COMPILED_SHAPES))
        return cls(LENGTH_QUANTUM * max(1, quanta), max_tokens)

    def length(self, longest: int) -> int:
        """The padded length of a batch whose longest side has `longest` tokens."""
        return int(_round_up(np.int64(max(longest, 1)), self.multiple))

    def rows(self, length: int) -> int:
        """The rows of every batch of padded length `length`."""
        return max(1, self.max_tokens // length)

    def shapes(self, longest: np.ndarray) -> list[tuple[int, int]]:
        """The (rows, length) shapes that batches of pairs with these longest sides take: the compile bound."""
        lengths = sorted({self.length(int(value)) for value in np.unique(longest)})
        return [(self.rows(length), length) for length in lengths]

    def pad(self, batch: dict[str, torch.Tensor], pad_token_id: int) -> dict[str, torch.Tensor]:
        """`batch` (input_ids, attention_mask, labels) padded to its bucket's shape."""
        length = self.length(max(batch["input_ids"].shape[1], batch["labels"].shape[1]))
        rows = self.rows(length)
        if batch["input_ids"].shape[0] > rows:
            raise ValueError(f"a batch of {batch['input_ids'].shape[0]} rows exceeds its bucket's {rows}")
        # A pad sentence keeps one unmasked source token: in an attention kernel that masks with -inf, a row with
        # every key masked is NaN, and a NaN times a zero gradient is still NaN.
        mask = _padded(batch["attention_mask"], rows, length, 0)
        mask[batch["input_ids"].shape[0] :, 0] = 1
        return {
            "input_ids": _padded(batch["input_ids"], rows, length, pad_token_id),
            "attention_mask": mask,
            "labels": _padded(batch["labels"], rows, length, -100),
        }


def _padded(tensor: torch.Tensor, rows: int, length: int, value: int) -> torch.Tensor:
    """`tensor` (rows', length') right- and bottom-padded with `value` to (rows, length)."""
    out = tensor.new_full((rows, length), value)
    out[: tensor.shape[0], : tensor.shape[1]] = tensor
    return out


@dataclass(frozen=True)
class BucketCollator:
    """The DataLoader's collate_fn for `PaddedPairBatches` in a compiled job: each batch padded to its bucket's
    shape (a picklable object, for loader workers)."""

    buckets: ShapeBuckets
    pad_token_id: int

    def __call__(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return self.buckets.pad(batch, self.pad_token_id)


def _pack(lengths: np.ndarray, max_tokens: int) -> list[int]:
    """End offsets of greedy batches over ascending `lengths` so that batch size * longest <= max_tokens."""
    ends: list[int] = []
    start = 0
    while start < len(lengths):
        window = min(len(lengths) - start, max(1, max_tokens // max(int(lengths[start]), 1)))
        padded = np.arange(1, window + 1) * lengths[start : start + window]
        start += max(1, int(np.searchsorted(padded, max_tokens, side="right")))
        ends.append(start)
    return ends


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Length-bucketed batches of at most `max_tokens` padded tokens per side (Vaswani et al. 2017, §5.1).

    A batch's size times its longest source or target (whichever is longer) never exceeds `max_tokens`,
    except for a single example longer than `max_tokens`, which gets a batch of its own; with `length_multiple`,
    lengths count rounded up to that multiple (`ShapeBuckets`). With `shuffle`, each
    epoch sorts by length within random chunks of about `bucket_size_multiplier` batches and shuffles the
    batch order (seeded by `seed + epoch`); without it, batches follow one global length order.
    """

    def __init__(
        self,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int],
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        bucket_size_multiplier: int = 100,
        length_multiple: int = 1,
    ) -> None:
        """Index examples by their source and target lengths in tokens."""
        super().__init__()
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64)
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
        if self.src_lengths.shape != self.tgt_lengths.shape or self.src_lengths.ndim != 1:
            raise ValueError(
                f"got {self.src_lengths.shape} source and {self.tgt_lengths.shape} target lengths"
            )
        if max_tokens < 1 or bucket_size_multiplier < 1 or length_multiple < 1:
            raise ValueError(
                f"max_tokens ({max_tokens}), bucket_size_multiplier and length_multiple must be positive"
            )
        self.longest = np.maximum(self.src_lengths, self.tgt_lengths)
        self.packed_lengths = _round_up(self.longest, length_multiple)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        mean_length = float(self.longest.mean()) if len(self.longest) else 1.0
        self.chunk_size = bucket_size_multiplier * max(1, int(max_tokens / max(mean_length, 1.0)))
        self._cache: tuple[int, list[np.ndarray]] | None = None

    @classmethod
    def from_dataset(cls, ds: Dataset, max_tokens: int, **options: Any) -> "TokenBudgetBatchSampler":
        """A sampler over the "src_len"/"tgt_len" columns of a `tokenize_parallel` result."""
        columns = ds.with_format("arrow")
        src_lengths, tgt_lengths = columns["src_len"].to_numpy(), columns["tgt_len"].to_numpy()
        return cls(src_lengths, tgt_lengths, max_tokens, **options)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose shuffle the next iteration uses."""
        self.epoch = epoch

    def _sorted_batches(self, indices: np.ndarray) -> list[np.ndarray]:
        """Sort `indices` by length and cut them into batches within the token budget."""
        keys = (self.tgt_lengths[indices], self.src_lengths[indices], self.longest[indices])
        order = indices[np.lexsort(keys)]
        ends = _pack(self.packed_lengths[order], self.max_tokens)
        return np.split(order, ends[:-1]) if ends else []

    def _build(self) -> list[np.ndarray]:
        """The current epoch's batches, in the order they are served."""
        if not self.shuffle:
            return self._sorted_batches(np.arange(len(self.longest)))
        rng = np.random.default_rng(self.seed + self.epoch)
        permutation = rng.permutation(len(self.longest))
        batches: list[np.ndarray] = []
        for start in range(0, len(permutation), self.chunk_size):
            batches += self._sorted_batches(permutation[start : start + self.chunk_size])
        return [batches[i] for i in rng.permutation(len(batches))]

    def _batches(self) -> list[np.ndarray]:
        """The current epoch's batches, built once per epoch."""
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self._build())
        return self._cache[1]

    def __iter__(self) -> Iterator[list[int]]:
        """Yield lists of dataset indices."""
        for batch in self._batches():
            yield batch.tolist()

    def __len__(self) -> int:
        """The exact number of batches in the current epoch."""
        return len(self._batches())
