"""§5.1 batches: "sentence pairs were batched together by approximate sequence length", about 25,000 source and
25,000 target tokens each (here `max_tokens` per side and process); and, for a compiled job, the same batches in
a bounded set of shapes (`ShapeBuckets`)."""

import math
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
# Padded lengths are multiples of this: sizes tensor cores take whole.
LENGTH_QUANTUM = 8


@dataclass(frozen=True)
class ShapeBuckets:
    """Token-budget batches padded to one shape per length bucket, so that a compiled step compiles a known few
    times (`MAX_COMPILED_SHAPES` at most).

    A batch's longest side is padded up to the shortest of `lengths` that holds it (source and target to the same
    length); a batch of padded length L has `max(1, max_tokens // L)` rows, the rows missing from it filled with
    pad sentences. The sampler packs by the padded lengths (`TokenBudgetBatchSampler(length_buckets=...)`), so no
    batch needs more rows. Padding changes no loss: padded label positions and rows are -100, which the loss
    ignores and does not count.
    """

    lengths: tuple[int, ...]  # ascending
    max_tokens: int

    @classmethod
    def for_lengths(cls, longest: np.ndarray, max_tokens: int) -> "ShapeBuckets":
        """At most `MAX_COMPILED_SHAPES` multiples of `LENGTH_QUANTUM`, those that pad these pairs (`longest`: each
        pair's longer side) with the fewest tokens: on two 170k-pair corpora cut at 128 tokens, 81-82% of the
        padded target tokens are real, where multiples of 16 keep 70-72% (unbucketed batches 96%)."""
        return cls(_fewest_padding_lengths(np.asarray(longest, dtype=np.int64)), max_tokens)

    def padded_lengths(self, longest: np.ndarray) -> np.ndarray:
        """Each length in `longest` padded up to its bucket."""
        buckets = np.asarray(self.lengths)
        index = np.searchsorted(buckets, longest)
        if (index >= len(buckets)).any():
            raise ValueError(f"a pair of {int(np.max(longest))} tokens is longer than the longest bucket")
        return buckets[index]

    def length(self, longest: int) -> int:
        """The padded length of a batch whose longest side has `longest` tokens."""
        return int(self.padded_lengths(np.asarray([longest]))[0])

    def rows(self, length: int) -> int:
        """The rows of every batch of padded length `length`."""
        return max(1, self.max_tokens // length)

    def shapes(self, longest: np.ndarray) -> list[tuple[int, int]]:
        """The (rows, length) shapes that batches of pairs with these longest sides take: the compile bound."""
        lengths = np.unique(self.padded_lengths(longest)).tolist()
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


def _fewest_padding_lengths(longest: np.ndarray) -> tuple[int, ...]:
    """At most `MAX_COMPILED_SHAPES` multiples of `LENGTH_QUANTUM`, the last holding the longest of `longest`,
    that pad every length up to the next of them with the fewest tokens in all (dynamic programming over the
    candidate lengths: best[k][i] is the least padding of the lengths up to candidate i with k buckets)."""
    top = max(int(longest.max()) if len(longest) else 1, 1)
    candidates = np.arange(LENGTH_QUANTUM, top + LENGTH_QUANTUM, LENGTH_QUANTUM)
    counts = np.bincount(np.minimum(longest, top), minlength=int(candidates[-1]) + 1)
    pairs_upto = np.concatenate([[0], np.cumsum(counts)])  # pairs_upto[n]: pairs shorter than n
    tokens_upto = np.concatenate([[0], np.cumsum(counts * np.arange(len(counts)))])

    def padding(low: int, high: int) -> int:
        """The padding of the lengths low+1 .. high up to high."""
        pairs = pairs_upto[high + 1] - pairs_upto[low + 1]
        return int(high * pairs - (tokens_upto[high + 1] - tokens_upto[low + 1]))

    edges = [int(high) for high in candidates]
    best = [[float(padding(0, high)) for high in edges]]  # one bucket: everything padded to `high`
    came_from: list[list[int]] = [[-1] * len(edges)]
    for _ in range(1, min(MAX_COMPILED_SHAPES, len(edges))):
        row, links = [], []
        for i, high in enumerate(edges):
            cost, j = min(
                ((best[-1][j] + padding(edges[j], high), j) for j in range(i)), default=(math.inf, -1)
            )
            row.append(cost)
            links.append(j)
        best.append(row)
        came_from.append(links)
    k = min(range(len(best)), key=lambda buckets: best[buckets][-1])
    lengths, i = [], len(edges) - 1
    while i >= 0:
        lengths.append(edges[i])
        i, k = came_from[k][i], k - 1
    return tuple(sorted(lengths))


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
    except for a single example longer than `max_tokens`, which gets a batch of its own; with `length_buckets`,
    lengths count padded up to their bucket (`ShapeBuckets`). With `shuffle`, each
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
        length_buckets: ShapeBuckets | None = None,
    ) -> None:
        """Index examples by their source and target lengths in tokens."""
        super().__init__()
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64)
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
        if self.src_lengths.shape != self.tgt_lengths.shape or self.src_lengths.ndim != 1:
            raise ValueError(
                f"got {self.src_lengths.shape} source and {self.tgt_lengths.shape} target lengths"
            )
        if max_tokens < 1 or bucket_size_multiplier < 1:
            raise ValueError(f"max_tokens ({max_tokens}) and bucket_size_multiplier must be positive")
        self.longest = np.maximum(self.src_lengths, self.tgt_lengths)
        self.packed_lengths = (
            self.longest if length_buckets is None else length_buckets.padded_lengths(self.longest)
        )
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
