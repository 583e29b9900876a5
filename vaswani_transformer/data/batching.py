"""§5.1 batches: "sentence pairs were batched together by approximate sequence length", about 25,000 source and
25,000 target tokens each (here `max_tokens` per side and process)."""

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from datasets import Dataset
from torch.utils.data import Sampler


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
    except for a single example longer than `max_tokens`, which gets a batch of its own. With `shuffle`, each
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
        ends = _pack(self.longest[order], self.max_tokens)
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
