"""Parallel corpora as Datasets with "source"/"target" columns: text pairs, TSV files, Hub datasets and the embedded
Tatoeba corpus, with fixed held-out splits."""

import gzip
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from itertools import zip_longest
from pathlib import Path
from typing import BinaryIO

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict, DatasetInfo, Features, Translation, Value
from datasets.fingerprint import generate_random_fingerprint
from datasets.table import InMemoryTable, MemoryMappedTable, Table

from ..files.paths import is_local_path
from ..files.reading import LINE_ENDING_HEAD, check_text_head
from .prepared import SIDES, TextDigest, build_once, files_key, prepared_folder, remember_digest

PAIR_FEATURES = Features({"source": Value("string"), "target": Value("string")})
TSV_SUFFIXES = (".tsv", ".txt", ".tsv.gz", ".txt.gz")
TATOEBA_DIR = Path(__file__).parent / "embedded" / "tatoeba_en_de"
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
    first_malformed_line: int | None = None  # where to look first (1 = the first line)

    def summary(self) -> str:
        """One line for logs."""
        where = f" (the first on line {self.first_malformed_line:,})" if self.first_malformed_line else ""
        return (
            f"{self.origin}: read {self.read:,} pairs, kept {self.kept:,}; skipped "
            f"{self.skipped_empty:,} empty, {self.skipped_malformed:,} malformed{where}, "
            f"{self.skipped_undecodable:,} undecodable"
        )


def _require_file(path: Path, expected: str) -> None:
    """Raise FileNotFoundError naming `path` and what it should have held."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (expected {expected})")


def _open_binary(path: Path) -> BinaryIO:
    """Open a plain or gzip-compressed file for reading bytes."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")


def _check_file_line_endings(path: Path) -> None:
    """`check_text_head` on a corpus file's first bytes (decompressed), before it is read or cached."""
    with _open_binary(path) as file:
        check_text_head(file.read(LINE_ENDING_HEAD), str(path))


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
    for path in (source_path, target_path):
        _check_file_line_endings(path)

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
    """Load a tab-separated file (UTF-8, optionally .gz); bad lines are skipped and counted. A line must have
    exactly the fields up to the last column read (source<TAB>target: two): one with more or fewer is malformed,
    not a pair whose extra field is dropped unseen. With a `cache` folder, read once into it and mapped from there
    (`_load_files`)."""
    path = Path(path)
    _require_file(path, "a tab-separated file with source and target columns")
    _check_file_line_endings(path)
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
                if len(fields) != needed:
                    stats.skipped_malformed += 1
                    stats.first_malformed_line = stats.first_malformed_line or stats.read
                    continue
                source, target = fields[source_column].strip(), fields[target_column].strip()
                if not source or not target:
                    stats.skipped_empty += 1
                    continue
                pairs.add(source, target)
        stats.kept = pairs.kept
        return stats

    # "exact fields": reads made when a line could have more fields than it used are not reused
    return _load_files([path], read, cache, "tsv", "exact fields", source_column, target_column)


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
