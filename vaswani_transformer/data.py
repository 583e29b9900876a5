"""Parallel corpora as Datasets with "source"/"target" columns, tokenisation and token-budget batching."""

import gzip
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, BinaryIO

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, DatasetInfo, Features, List, Translation, Value
from datasets.fingerprint import generate_random_fingerprint
from datasets.table import InMemoryTable, MemoryMappedTable, Table
from torch.utils.data import Sampler
from transformers import PreTrainedTokenizerBase

from .locations import is_local_path
from .prepared import SIDES, TextDigest, build_once, files_key, prepared_folder, remember_digest

PAIR_FEATURES = Features({"source": Value("string"), "target": Value("string")})
TOKENIZED_FEATURES = Features(
    {
        "input_ids": List(Value("int32")),
        "attention_mask": List(Value("int8")),
        "labels": List(Value("int32")),
        "src_len": Value("int32"),
        "tgt_len": Value("int32"),
    }
)
TSV_SUFFIXES = (".tsv", ".txt", ".tsv.gz", ".txt.gz")
TATOEBA_DIR = Path(__file__).parent / "corpora" / "tatoeba_en_de"
TATOEBA_FILE = TATOEBA_DIR / "deu.txt.gz"


@dataclass
class LoadStats:
    """What a loader read from a corpus, what it kept, and why it skipped the rest."""

    origin: str
    read: int = 0
    kept: int = 0
    skipped_empty: int = 0
    skipped_malformed: int = 0
    skipped_undecodable: int = 0

    def summary(self) -> str:
        """One line for logs."""
        return (
            f"{self.origin}: read {self.read:,} pairs, kept {self.kept:,}; skipped "
            f"{self.skipped_empty:,} empty, {self.skipped_malformed:,} malformed, "
            f"{self.skipped_undecodable:,} undecodable"
        )


@dataclass
class FilterStats:
    """How many tokenised pairs `tokenize_parallel` (or `token_arrays.write_tokenized`) kept and why it removed
    the others."""

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


def split_lines(text: str) -> list[str]:
    r"""Lines of a text, split at "\n" only (as the corpus loaders split): a U+2028 or form feed inside a
    sentence stays in it, a final newline ends the last line, "\r\n" endings lose their "\r"."""
    return [line.removesuffix("\r") for line in text.removesuffix("\n").split("\n")] if text else []


def decode_text(raw: bytes, name: str) -> str:
    """UTF-8 text (a leading BOM dropped); other bytes are a ValueError naming `name`, the line and the fix."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise ValueError(
            f"{name} is not UTF-8 text (byte 0x{raw[error.start]:02x} on line {line:,}): convert it first, "
            "e.g. with `iconv -f latin1 -t utf-8`."
        ) from None


def read_text_lines(path: str | Path) -> list[str]:
    """Lines of a UTF-8 text file, split as `split_lines` does; not UTF-8: a ValueError naming the file."""
    return split_lines(decode_text(Path(path).read_bytes(), str(path)))


def _require_file(path: Path, expected: str) -> None:
    """Raise FileNotFoundError naming `path` and what it should have held."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (expected {expected})")


def _open_binary(path: Path) -> BinaryIO:
    """Open a plain or gzip-compressed file for reading bytes."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def _decode(raw: bytes) -> str | None:
    """A line as text without its line ending, or None if it is not UTF-8."""
    try:
        return raw.decode("utf-8-sig").rstrip("\r\n")
    except UnicodeDecodeError:
        return None


PAIRS_PER_CHUNK = 100_000
PAIRS_FILE = "pairs.arrow"  # a corpus read into the data cache (`_load_files`); its load counts and digest
READ_RECORD_FILE = "read.json"


class _PairChunks:
    """Kept pairs gathered into Arrow chunks of PAIRS_PER_CHUNK as they are read: a corpus never exists as one
    list of Python strings. Reading a million pairs (0.3 GB of text) peaked 2.1 GB above the interpreter's memory
    through lists and `Dataset.from_dict`, 0.4 GB this way. Given `arrow_file`, each chunk is written there as it
    fills (an Arrow stream, as `datasets` caches) and the pairs are then mapped from it, not kept in memory."""

    def __init__(self, arrow_file: Path | None = None) -> None:
        self.kept = 0
        self._pending: tuple[list[str], list[str]] = ([], [])
        self._chunks: tuple[list[pa.Array], list[pa.Array]] = ([], [])
        self._arrow_file = arrow_file
        self.digest = TextDigest()  # the pairs' content digest, fed as they are read
        schema = PAIR_FEATURES.arrow_schema
        self._writer = pa.ipc.new_stream(str(arrow_file), schema) if arrow_file is not None else None

    def add(self, source: str, target: str) -> None:
        self._pending[0].append(source)
        self._pending[1].append(target)
        self.kept += 1
        if len(self._pending[0]) == PAIRS_PER_CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self._pending[0] and (self._chunks[0] or self._writer is not None):
            return  # nothing new, and a chunk already holds the type (a stream has its schema)
        arrays = [pa.array(texts, type=pa.string()) for texts in self._pending]
        for texts in self._pending:
            texts.clear()
        for name, array in zip(SIDES, arrays, strict=True):
            self.digest.update(name, array)
        if self._writer is not None:
            self._writer.write_batch(pa.record_batch(arrays, schema=PAIR_FEATURES.arrow_schema))
            return
        for chunks, array in zip(self._chunks, arrays, strict=True):
            chunks.append(array)

    def dataset(self) -> Dataset:
        """The pairs as a Dataset over the chunks themselves (no copy), or mapped from `arrow_file`. Its
        fingerprint is random: `datasets` would otherwise hash the whole table by pickling it (1.1 GB more per
        million pairs); the job names corpora by their own content digest (`prepared.content_digest`)."""
        self._flush()
        if self._writer is not None:
            self._writer.close()
            return _mapped_pairs(self._arrow_file, self.digest.hexdigest())
        columns = {
            name: pa.chunked_array(chunks, type=pa.string())
            for name, chunks in zip(SIDES, self._chunks, strict=True)
        }
        return _pairs_dataset(InMemoryTable(pa.table(columns)), self.digest.hexdigest())


def _pairs_dataset(table: Table, digest: str) -> Dataset:
    pairs = Dataset(
        table, info=DatasetInfo(features=PAIR_FEATURES), fingerprint=generate_random_fingerprint()
    )
    remember_digest(pairs, digest)
    return pairs


def _mapped_pairs(arrow_file: Path, digest: str) -> Dataset:
    """Pairs that `_PairChunks` wrote to `arrow_file`, memory-mapped: the text stays in the page cache, shared by
    the processes that map it, rather than in each process's own memory."""
    return _pairs_dataset(MemoryMappedTable.from_file(str(arrow_file)), digest)


def _load_files(
    paths: Sequence[Path], read: Callable[[_PairChunks], LoadStats], cache: Path | None, *settings: object
) -> tuple[Dataset, LoadStats]:
    """The pairs `read` gathers from `paths`: into memory, or (given a `cache` folder) once into an Arrow file
    there, named by the files' paths, sizes, times and ends (`prepared.files_key`) and the reader's `settings`;
    a later load of the same unchanged files maps that file without reading them."""
    if cache is None:
        pairs = _PairChunks()
        stats = read(pairs)
        return pairs.dataset(), stats

    def read_into(folder: Path) -> None:
        folder.mkdir(parents=True)
        pairs = _PairChunks(folder / PAIRS_FILE)
        stats = read(pairs)
        pairs.dataset()  # writes the last chunk and closes the file
        record = {"stats": asdict(stats), "content_digest": pairs.digest.hexdigest()}
        (folder / READ_RECORD_FILE).write_text(json.dumps(record))

    folder = build_once(prepared_folder(cache, "text", files_key(paths), *settings), read_into)
    record = json.loads((folder / READ_RECORD_FILE).read_text())
    return _mapped_pairs(folder / PAIRS_FILE, record["content_digest"]), LoadStats(**record["stats"])


def _aligned_lines(source_path: Path, target_path: Path) -> Iterator[tuple[bytes, bytes]]:
    """Yield raw line pairs; raise ValueError at the end if the two files have different line counts."""
    n_source = n_target = 0
    with _open_binary(source_path) as source_file, _open_binary(target_path) as target_file:
        for raw_source, raw_target in zip_longest(source_file, target_file):
            n_source += raw_source is not None
            n_target += raw_target is not None
            if raw_source is not None and raw_target is not None:
                yield raw_source, raw_target
    if n_source != n_target:
        raise ValueError(
            f"line counts differ: {source_path} has {n_source:,} lines, {target_path} has {n_target:,} lines "
            "(a text pair must be line-aligned)"
        )


def load_text_pair(
    source_path: str | Path, target_path: str | Path, cache: Path | None = None
) -> tuple[Dataset, LoadStats]:
    """Load two line-aligned plain-text files (UTF-8, optionally .gz), one sentence per line. With a `cache`
    folder, read once into it and mapped from there (`_load_files`)."""
    source_path, target_path = Path(source_path), Path(target_path)
    _require_file(source_path, "the source side of a line-aligned text pair")
    _require_file(target_path, "the target side of a line-aligned text pair")

    def read(pairs: _PairChunks) -> LoadStats:
        stats = LoadStats(origin=f"{source_path} + {target_path}")
        for raw_source, raw_target in _aligned_lines(source_path, target_path):
            stats.read += 1
            source, target = _decode(raw_source), _decode(raw_target)
            if source is None or target is None:
                stats.skipped_undecodable += 1
            elif not source.strip() or not target.strip():
                stats.skipped_empty += 1
            else:
                pairs.add(source.strip(), target.strip())
        stats.kept = pairs.kept
        return stats

    return _load_files([source_path, target_path], read, cache, "text pair")


def load_tsv(
    path: str | Path, source_column: int = 0, target_column: int = 1, cache: Path | None = None
) -> tuple[Dataset, LoadStats]:
    """Load a tab-separated file (UTF-8, optionally .gz); bad lines are skipped and counted. With a `cache`
    folder, read once into it and mapped from there (`_load_files`)."""
    path = Path(path)
    _require_file(path, "a tab-separated file with source and target columns")
    needed = max(source_column, target_column) + 1

    def read(pairs: _PairChunks) -> LoadStats:
        stats = LoadStats(origin=str(path))
        with _open_binary(path) as file:
            for raw in file:
                stats.read += 1
                line = _decode(raw)
                if line is None:
                    stats.skipped_undecodable += 1
                    continue
                if not line.strip():
                    stats.skipped_empty += 1
                    continue
                fields = line.split("\t")
                if len(fields) < needed:
                    stats.skipped_malformed += 1
                    continue
                source, target = fields[source_column].strip(), fields[target_column].strip()
                if not source or not target:
                    stats.skipped_empty += 1
                    continue
                pairs.add(source, target)
        stats.kept = pairs.kept
        return stats

    return _load_files([path], read, cache, "tsv", source_column, target_column)


def _languages(feature: object) -> list[str]:
    """The language codes of a `translation` column's feature."""
    if isinstance(feature, Translation):
        return list(feature.languages)
    return list(feature) if isinstance(feature, dict) else []


def _strip_pairs(sources: list[str | None], targets: list[str | None]) -> dict[str, list[str]]:
    """Whitespace-trimmed source and target texts (missing ones become empty)."""
    return {"source": [(s or "").strip() for s in sources], "target": [(t or "").strip() for t in targets]}


def _both_nonempty(sources: list[str], targets: list[str]) -> list[bool]:
    """True for pairs with text on both sides."""
    return [bool(s and t) for s, t in zip(sources, targets, strict=True)]


def translation_to_parallel(ds: Dataset, source_lang: str, target_lang: str) -> tuple[Dataset, LoadStats]:
    """Turn a dataset with a `translation` column of {lang: text} dicts into "source"/"target" columns."""
    if "translation" not in ds.column_names:
        raise ValueError(
            f"expected a 'translation' column of {{lang: text}} dicts, found columns {ds.column_names}"
        )
    languages = _languages(ds.features["translation"])
    for lang in (source_lang, target_lang):
        if lang not in languages:
            raise ValueError(f"language {lang!r} not in the translation column (it has {languages})")
    flat = ds.select_columns(["translation"]).flatten()
    pairs = flat.map(
        _strip_pairs,
        batched=True,
        input_columns=[f"translation.{source_lang}", f"translation.{target_lang}"],
        remove_columns=flat.column_names,
        features=PAIR_FEATURES,
    )
    kept = pairs.filter(_both_nonempty, batched=True, input_columns=["source", "target"])
    stats = LoadStats(origin=f"translation {source_lang}-{target_lang}", read=len(ds), kept=len(kept))
    stats.skipped_empty = stats.read - stats.kept
    return kept, stats


def load_hub(
    dataset_id: str, config_name: str | None, split: str, source_lang: str, target_lang: str
) -> tuple[Dataset, LoadStats]:
    """Load one split of a Hub translation dataset (e.g. "wmt/wmt14", "de-en") as "source"/"target"."""
    try:
        ds = datasets.load_dataset(dataset_id, config_name, split=split)
    except (ConnectionError, FileNotFoundError, datasets.exceptions.DatasetNotFoundError) as error:
        raise FileNotFoundError(
            f"{dataset_id}: no such local file or folder, and the Hub did not provide it as a dataset ({error})"
        ) from error
    converted, stats = translation_to_parallel(ds, source_lang, target_lang)
    stats.origin = f"{dataset_id}[{config_name}, {split}] {source_lang}-{target_lang}"
    return converted, stats


def load_parallel(
    source: str,
    target: str | None = None,
    *,
    source_lang: str = "en",
    target_lang: str = "de",
    split: str = "train",
    hub_config: str | None = None,
    cache: Path | None = None,
) -> tuple[Dataset, LoadStats]:
    """Load a text pair (source + target files), a TSV file, or a Hub dataset (id or local dataset folder). Files
    are read once into a `cache` folder when given (`_load_files`); `datasets` caches Hub datasets itself."""
    if target is not None:
        return load_text_pair(source, target, cache)
    path = Path(source)
    if source.endswith(TSV_SUFFIXES) or path.is_file():
        return load_tsv(path, cache=cache)
    if path.is_dir() or not is_local_path(source):
        return load_hub(source, hub_config, split, source_lang, target_lang)
    raise FileNotFoundError(
        f"{source}: no such file, and not a Hub dataset id (expected a TSV file, a source file with a target "
        "file, or a Hub id such as 'wmt/wmt14')"
    )


def load_tatoeba() -> tuple[Dataset, LoadStats]:
    """The embedded Tatoeba English-German pairs: English source, German target."""
    return load_tsv(TATOEBA_FILE)


def _column(ds: Dataset, name: str) -> pa.ChunkedArray:
    """One column as Arrow data, in the dataset's row order (fast: no Python objects per row)."""
    return ds.with_format("arrow")[name]


def _group_ids(texts: pa.ChunkedArray) -> np.ndarray:
    """An integer id per text, equal for equal texts."""
    return pc.dictionary_encode(texts).combine_chunks().indices.to_numpy(zero_copy_only=False)


def _pick_groups(sizes: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """A boolean mask of groups, visited in random order, whose sizes add up to `total` (or just under)."""
    chosen = np.zeros(len(sizes), dtype=bool)
    remaining = total
    for group in rng.permutation(len(sizes)):
        if sizes[group] <= remaining:
            chosen[group] = True
            remaining -= sizes[group]
            if remaining == 0:
                break
    return chosen


def train_test_split_fixed(ds: Dataset, test_size: int, seed: int = 0) -> DatasetDict:
    """Deterministically hold out `test_size` pairs; pairs sharing a source sentence share a split."""
    if not 0 < test_size < len(ds):
        raise ValueError(f"test_size must be between 1 and {len(ds) - 1}, got {test_size}")
    groups = _group_ids(_column(ds, "source"))
    in_test = _pick_groups(np.bincount(groups), test_size, np.random.default_rng(seed))[groups]
    return DatasetDict(train=ds.select(np.flatnonzero(~in_test)), test=ds.select(np.flatnonzero(in_test)))


def _tokenize_batch(
    sources: list[str], targets: list[str], tokenizer: PreTrainedTokenizerBase
) -> dict[str, list[list[int]] | list[int]]:
    """Token ids of a batch of pairs plus their lengths (special tokens included)."""
    encoded = tokenizer(sources, text_target=targets, truncation=False)
    return {
        "input_ids": encoded["input_ids"],
        "attention_mask": encoded["attention_mask"],
        "labels": encoded["labels"],
        "src_len": [len(ids) for ids in encoded["input_ids"]],
        "tgt_len": [len(ids) for ids in encoded["labels"]],
    }


def dropped_pairs(
    src_len: np.ndarray, tgt_len: np.ndarray, n_special: int, max_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """Which pairs training drops, by their lengths in tokens: those with a side of special tokens only (empty),
    and the others with a side longer than `max_length`."""
    empty = (src_len <= n_special) | (tgt_len <= n_special)
    return empty, ~empty & ((src_len > max_length) | (tgt_len > max_length))


def tokenize_parallel(
    ds: Dataset, tokenizer: PreTrainedTokenizerBase, max_length: int = 256, num_proc: int | None = None
) -> tuple[Dataset, FilterStats]:
    """Tokenise pairs into input_ids, attention_mask, labels, src_len, tgt_len; drop empty and long ones."""
    tokenized = ds.map(
        _tokenize_batch,
        batched=True,
        input_columns=["source", "target"],
        fn_kwargs={"tokenizer": tokenizer},
        remove_columns=ds.column_names,
        features=TOKENIZED_FEATURES,
        keep_in_memory=True,  # never a cache file beside a mapped corpus (dev pairs are few)
        num_proc=num_proc,
        desc="Tokenising",
    )
    src_len, tgt_len = _column(tokenized, "src_len").to_numpy(), _column(tokenized, "tgt_len").to_numpy()
    empty, too_long = dropped_pairs(src_len, tgt_len, tokenizer.num_special_tokens_to_add(), max_length)
    keep = ~(empty | too_long)
    stats = FilterStats(
        total=len(tokenized),
        kept=int(keep.sum()),
        removed_empty=int(empty.sum()),
        removed_too_long=int(too_long.sum()),
        max_length=max_length,
    )
    return (tokenized if keep.all() else tokenized.select(np.flatnonzero(keep))), stats


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
        src_lengths, tgt_lengths = _column(ds, "src_len").to_numpy(), _column(ds, "tgt_len").to_numpy()
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
