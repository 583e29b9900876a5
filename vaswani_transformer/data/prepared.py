"""Prepared training data, made once and shared by every run: the training corpus as read, the joint BPE and the
tokenised training pairs.

All are kept under a cache folder (`--data_cache`, default HF_HOME/vaswani_transformer/prepared). A corpus read
from files is kept as an Arrow file named by the files' paths, sizes, times and ends (`files_key`; a later run
maps it instead of reading the text). The BPE and the tokenised pairs have one subfolder per *content*: a digest
of the training pairs themselves (whatever file, TSV or Hub id they came from, after the held-out splits), with
the settings that shape the result. A new run folder, a new recipe file or another
process with the same pairs and settings reuses them; a changed byte of the corpus, vocabulary size or
lowercasing makes a new one. Each is built under a lock into a temporary folder, given a manifest of its files'
sizes and hashes, and renamed when complete, so a second process preparing the same data waits and reuses it, an
interrupted preparation leaves nothing that looks complete, and a damaged entry is found and rebuilt.
"""

import hashlib
import shutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
from datasets import Dataset
from datasets.table import MemoryMappedTable
from filelock import FileLock
from huggingface_hub import constants

from ..files.manifests import discard_damaged_entry, manifest_problem, write_manifest
from ..files.partials import partial_path, remove_stale_partials
from ..files.writing import WRITE_FAILURES, WriteError, describe_write_failure

PREPARED_FORMAT = "3"  # bump when what a prepared folder holds, or how it is made, changes
ARROW_BATCH = 10_000  # pairs per Arrow batch fed to the BPE trainer
DIGEST_BATCH = 100_000  # pairs per Arrow batch hashed
# read from each end of a corpus file to tell it from another of the same size and time
CONTENT_CHECK_BYTES = 1 << 20
SIDES = ("source", "target")


def default_data_cache() -> Path:
    """HF_HOME/vaswani_transformer/prepared (HF_HOME: the Hugging Face cache home, ~/.cache/huggingface)."""
    return Path(constants.HF_HOME) / "vaswani_transformer" / "prepared"


class TextDigest:
    """The content digest of pairs fed in order, chunk by chunk: per side, a SHA-256 of the texts' lengths and one
    of their bytes (Arrow offsets and data, no Python strings), combined. Each is a plain concatenation, so the
    digest is the same however the texts are cut into chunks. Fed while a corpus is read, it names the corpus
    without a second pass over its text."""

    def __init__(self) -> None:
        self._sides = {name: (hashlib.sha256(), hashlib.sha256()) for name in SIDES}

    def update(self, name: str, texts: pa.Array) -> None:
        text = texts.cast(pa.large_string())
        offsets = np.frombuffer(text.buffers()[1], dtype=np.int64)[text.offset : text.offset + len(text) + 1]
        data = text.buffers()[2]
        lengths, contents = self._sides[name]
        lengths.update(np.diff(offsets).tobytes())  # "ab","c" differs from "a","bc"
        contents.update(memoryview(data)[offsets[0] : offsets[-1]] if data is not None else b"")

    def hexdigest(self) -> str:
        parts = [
            f"{name}:{lengths.hexdigest()}:{contents.hexdigest()}\n"
            for name, (lengths, contents) in self._sides.items()
        ]
        return hashlib.sha256("".join(parts).encode()).hexdigest()


# Digests already known, by the fingerprint of the Dataset they name (`remember_digest`). Any change to a Dataset
# (a selection, a split) gives it a new fingerprint, so an entry never names other pairs.
_known_digests: dict[str, str] = {}


def remember_digest(pairs: Dataset, digest: str) -> None:
    """Record that `pairs` (this very Dataset) has content digest `digest`, computed as it was read."""
    _known_digests[pairs._fingerprint] = digest


def content_digest(pairs: Dataset) -> str:
    """The pairs' `TextDigest`: remembered from their reading, or read in Arrow batches (`arrow_batches`: a
    selection of a cached corpus is never copied whole nor left resident)."""
    if (known := _known_digests.get(pairs._fingerprint)) is not None:
        return known
    digest = TextDigest()
    for name in SIDES:
        for batch in arrow_batches(pairs, [name], DIGEST_BATCH):
            for chunk in batch.column(name).chunks:
                digest.update(name, chunk)
    return digest.hexdigest()


def files_key(paths: Sequence[Path]) -> str:
    """What names a corpus read from files without reading them: each file's resolved path, size and modification
    time, and (the content check) its first and last CONTENT_CHECK_BYTES. A file touched or copied gets a new key;
    one rewritten in place to the same size, within the same nanosecond, differing only in its middle does not
    (as for make and rsync)."""
    parts = []
    for path in paths:
        info = path.stat()
        with path.open("rb") as file:
            head = file.read(CONTENT_CHECK_BYTES)
            file.seek(max(info.st_size - CONTENT_CHECK_BYTES, 0))
            tail = file.read()
        ends = hashlib.sha256(head + tail).hexdigest()
        parts.append(f"{path.resolve()}|{info.st_size}|{info.st_mtime_ns}|{ends}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def prepared_folder(cache: Path, kind: str, *settings: object) -> Path:
    """cache/KIND-KEY, KEY a digest of the format and the settings (the first of which is the content digest)."""
    key = hashlib.sha256("\n".join([PREPARED_FORMAT, kind, *map(str, settings)]).encode()).hexdigest()[:20]
    return cache / f"{kind}-{key}"


def build_once(folder: Path, build: Callable[[Path], None], verify_hashes: bool = False) -> Path:
    """`folder`, built by `build(temporary folder)` unless a whole one exists (`prepared_entry`)."""
    return prepared_entry(folder, build, verify_hashes)[0]


def prepared_entry(
    folder: Path, build: Callable[[Path], None], verify_hashes: bool = False
) -> tuple[Path, bool]:
    """`folder` and whether it was reused: reused when its manifest proves it whole (`files.manifest_problem`;
    `verify_hashes`: every file's content, not only the small ones'), else built by `build(temporary folder)`
    under a lock beside it, its manifest written last, and renamed into place (a failed or interrupted build
    leaves no folder behind; a full disk is a WriteError naming the path). A damaged entry is rebuilt with a
    warning naming the file; temporary folders of processes that died are removed first."""
    remove_stale_partials(folder.parent)
    if folder.is_dir() and manifest_problem(folder, verify_hashes) is None:
        return folder, True
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{folder}.lock"):
        if folder.exists() or folder.is_symlink():
            problem = manifest_problem(folder, verify_hashes)
            if problem is None:  # another process built it while this one waited
                return folder, True
            discard_damaged_entry(folder, problem, "--data_cache")
        partial = partial_path(folder, hidden=False)
        shutil.rmtree(partial, ignore_errors=True)
        try:
            build(partial)
            write_manifest(partial)
            partial.rename(folder)
        except OSError as error:
            if isinstance(error, WriteError) or error.errno not in WRITE_FAILURES:
                raise
            raise WriteError(describe_write_failure(error, folder, "--data_cache")) from error
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return folder, False


def bpe_sample(pairs: Dataset, max_pairs: int, seed: int) -> Dataset:
    """At most `max_pairs` of the pairs (0: all), a seeded sample kept in corpus order. A joint BPE of tens of
    thousands of merges is settled by a million pairs; the paper's 4.5M pairs only make it slower to train."""
    if max_pairs <= 0 or len(pairs) <= max_pairs:
        return pairs
    chosen = np.random.default_rng(seed).choice(len(pairs), size=max_pairs, replace=False)
    return pairs.select(np.sort(chosen))


def texts_for_bpe(pairs: Dataset) -> Iterator[str]:
    """Every source sentence, then every target sentence, read in Arrow batches (`arrow_batches`)."""
    for column in SIDES:
        for batch in arrow_batches(pairs, [column], ARROW_BATCH):
            yield from batch.column(column).to_pylist()


def arrow_batches(pairs: Dataset, columns: Sequence[str], batch_size: int) -> Iterator[pa.Table]:
    """`columns` of `pairs` in order, at most `batch_size` rows at a time.

    When the pairs are rows of one Arrow file in file order (a corpus read into the data cache, or an in-order
    selection of it such as `bpe_sample`'s), the file is read with plain reads, a record batch at a time: read
    through the memory mapping, every page would stay resident in this process until the mapping goes (1.3 GB
    of the paper's 4.5M pairs, counted in its peak RSS although the kernel may reclaim it). Other selections are
    taken from their table a batch at a time."""
    source = _file_rows(pairs)
    if source is not None:
        for table in _file_batches(*source, columns):
            for start in range(0, table.num_rows, batch_size):
                yield table.slice(start, batch_size)
        return
    indices = pairs._indices  # datasets' row selection, if any (it has no public accessor)
    if indices is None:
        yield from pairs.select_columns(list(columns)).with_format("arrow").iter(batch_size=batch_size)
        return
    # One Arrow `take` per batch: datasets' own iteration gathers a selection one slice per row, a batch of
    # one-row chunks that then costs a Python call per row (`content_digest` hashes chunk by chunk).
    table, rows = pairs.data.table.select(list(columns)), indices.column(0)
    for start in range(0, len(rows), batch_size):
        yield table.take(rows.slice(start, batch_size))


def _file_rows(pairs: Dataset) -> tuple[str, np.ndarray | None] | None:
    """The Arrow file holding `pairs` and their rows in it (None: all), when they are rows of one whole file in
    file order; None otherwise."""
    table = pairs.data
    if not isinstance(table, MemoryMappedTable):
        return None
    # Operations datasets replays on the mapped file: only new schema metadata (which every Dataset adds) leaves
    # the file's rows and columns as they are.
    if any(operation[0] != "replace_schema_metadata" for operation in table.replays):
        return None
    indices = pairs._indices  # datasets' row selection, if any (it has no public accessor)
    if indices is None:
        return table.path, None
    rows = indices.column(0).to_numpy().astype(np.int64)  # stored unsigned: differences must not wrap
    return (table.path, rows) if bool(np.all(np.diff(rows) > 0)) else None


def _file_batches(path: str, rows: np.ndarray | None, columns: Sequence[str]) -> Iterator[pa.Table]:
    """The file's record batches (only `rows`, ascending, if given), with `columns`."""
    offset = 0
    with pa.OSFile(path) as file:
        for batch in pa.ipc.open_stream(file):
            count = batch.num_rows
            if rows is not None:
                low, high = np.searchsorted(rows, [offset, offset + count])
                batch = batch.take(pa.array(rows[low:high] - offset))
            offset += count
            yield pa.Table.from_batches([batch]).select(list(columns))
