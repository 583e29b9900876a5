"""Files and names on this machine: whether a name is a local path or a Hub id, outputs kept apart from inputs,
writes that never leave a partial file, content hashes, and cache entries that prove themselves (a manifest) before
reuse.

A name that means a local file or folder but does not exist is an error naming it, never a Hub request (which
would fail later, offline or with a 404 about a repository the user never meant).
"""

import ctypes
import errno
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FILE_EXTENSION = re.compile(r"\.[A-Za-z]{1,5}$")  # ".en", ".tsv", ".gz"; not the ".1-8B" of a Hub name


def is_local_path(name: str | Path) -> bool:
    """Whether `name` means a file or folder on this machine rather than a Hub id ("user/name"): a Path object; or
    a string that exists, starts with ".", "/" or "~", holds a backslash or more than one "/", ends in a file
    extension, or lies in a folder that exists here ("runs/x" when there is a runs/)."""
    if isinstance(name, Path):
        return True
    path = Path(name).expanduser()
    return (
        path.exists()
        or name.startswith((".", "/", "~"))
        or "\\" in name
        or name.count("/") > 1
        or FILE_EXTENSION.search(name) is not None
        or (path.parent != Path(".") and path.parent.is_dir())
    )


def check_input_file(path: Path) -> None:
    """An input file that is there and is a file: a folder is an IsADirectoryError and a missing path a
    FileNotFoundError, each naming the path (open() would say only "Is a directory" or "No such file")."""
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder: give a file inside it")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")


def check_apart(
    flag: str,
    output: str | Path,
    inputs: Mapping[str, str | Path | None],
    *,
    may_lie_inside: Collection[str] = (),
    may_contain: Collection[str] = (),
) -> None:
    """Refuse, before anything is written, an output that is, contains or lies inside one of a command's inputs:
    ValueError "--output_dir X is inside the model folder M (an input): choose a folder apart from it".

    `inputs` names each input ({"the model folder": path}; None for one not given or not on this machine). Paths
    are compared resolved, links followed, so that no other spelling of a path gets past. `may_lie_inside` and
    `may_contain` name the inputs a command is documented to write inside of (vaswani-average's RUN/averaged) or
    around (pictures written to a folder that holds the model folder)."""
    target = Path(output).expanduser().resolve()
    for name, path in inputs.items():
        if path is None:
            continue
        source = Path(path).expanduser().resolve()
        if target == source:
            relation = "is"
        elif target.is_relative_to(source) and name not in may_lie_inside:
            relation = "is inside"
        elif source.is_relative_to(target) and name not in may_contain:
            relation = "contains"
        else:
            continue
        raise ValueError(
            f"{flag} {output} {relation} {name} {path} (an input): choose a folder apart from it."
        )


def check_new_or_empty(output: Path, overwrite: bool, what: str) -> None:
    """An output folder that is new or empty, or whose files `overwrite` lets `what` replace (FileExistsError
    naming it otherwise). Check it holding the folder's claim (`claims.claimed_output`): no other writer can then
    fill it between this check and the writing."""
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"{output} is a file; choose a folder for {what}.")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{output} is not empty; choose another folder or pass overwrite=True (--overwrite)."
        )


def write_text_atomically(path: Path, text: str) -> None:
    """Write to a temporary name beside `path`, then rename: a failure leaves the earlier file whole."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


WRITE_FAILURES = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file size limit exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}


class WriteError(OSError):
    """A write that failed for a reason of the machine (full disk, read-only folder), said with the path and the
    fix; what was being written has been removed."""


def nearest_existing(path: Path) -> Path:
    """`path` if it exists, else its nearest parent that does (where it would be made)."""
    return next(candidate for candidate in (path, *path.parents) if candidate.exists())


def describe_write_failure(error: OSError, path: Path, choose: str) -> str:
    """What went wrong while writing `path`, with the free space there and the fix: "no space left on device while
    writing X (12 MB free there): free space or choose another --output"."""
    reason = WRITE_FAILURES.get(error.errno or 0, error.strerror or str(error))
    free_mb = shutil.disk_usage(nearest_existing(path)).free // 2**20
    return f"{reason} while writing {path} ({free_mb:,} MB free there): free space or choose another {choose}"


def partial_path(final: Path, hidden: bool = True) -> Path:
    """The temporary name a writer of `final` writes under: `.NAME.partial-HOST-PID` (a file keeps its suffix,
    `.STEM.partial-HOST-PID.SUFFIX`, for writers that go by it), so that `remove_stale_partials` can tell the
    leftovers of processes that died on this host from those of live writers."""
    final = Path(final)
    dot, (stem, suffix) = (
        ("." if hidden else ""),
        ((final.stem, final.suffix) if final.suffix else (final.name, "")),
    )
    return final.with_name(f"{dot}{stem}.partial-{socket.gethostname()}-{os.getpid()}{suffix}")


@contextmanager
def folder_written_whole(final: Path, choose: str) -> Iterator[Path]:
    """A temporary sibling of `final` (`partial_path`) to write into, moved into place as a whole when the block
    ends: renamed to `final` when there is none yet; else `final`'s files that the writer did not write are
    linked into it (they stay) and the two folders are exchanged (`replace_folder`), so that no reader ever sees
    a folder half replaced. On any failure, an interrupt included, the temporary is removed and `final` is as it
    was; the machine's refusal (`write_failures_named`, Rust-backed writers' included) becomes a WriteError naming
    `final` and `choose` (the flag that picks another place)."""
    temporary = partial_path(final)
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        with write_failures_named(final, choose):
            temporary.mkdir(parents=True)
            yield temporary
            if final.exists():
                _keep_unwritten(final, temporary)
                replace_folder(temporary, final)
            else:
                os.rename(temporary, final)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def _keep_unwritten(final: Path, temporary: Path) -> None:
    """Hard-link (or copy) into `temporary` what `final` holds and `temporary` does not: files a writer replaces
    are those of the same name, the others stay."""
    for path in sorted(final.rglob("*")):
        target = temporary / path.relative_to(final)
        if target.exists() or target.is_symlink() or not target.parent.is_dir():
            continue
        if path.is_symlink():
            target.symlink_to(os.readlink(path))
        elif path.is_dir():
            target.mkdir()
        else:
            try:
                os.link(path, target)
            except OSError:  # a file system without hard links
                shutil.copy2(path, target)


_RENAME_EXCHANGE = 2  # renameat2's flag: swap two names atomically (Linux 3.15)
_AT_FDCWD = -100


def replace_folder(new: Path, final: Path) -> None:
    """Put the folder `new` in place of the folder `final` at once (renameat2's RENAME_EXCHANGE, after which
    `new` holds the earlier folder, removed here); where the system cannot exchange names, `final` is moved
    aside and `new` renamed in, the earlier folder put back should that fail."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is not None:
        if renameat2(_AT_FDCWD, os.fsencode(new), _AT_FDCWD, os.fsencode(final), _RENAME_EXCHANGE) == 0:
            shutil.rmtree(new, ignore_errors=True)
            return
        if (code := ctypes.get_errno()) not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise OSError(code, os.strerror(code), str(final))
    aside = partial_path(final.with_name(f"{final.name}.replaced"))
    os.rename(final, aside)
    try:
        os.rename(new, final)
    except BaseException:
        os.rename(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# --- cache entries that prove themselves before reuse

MANIFEST = "manifest.json"  # written last into a cache entry: each file's size and SHA-256
# Files up to this size are hashed at every reuse (a few tenths of a second at most); larger ones are checked by
# size, and by content only when asked (`--verify_cache`).
HASH_ALWAYS_BYTES = 64 << 20
# `partial_path`'s names (HOST- is missing from those of older versions): NAME, HOST, PID and a file's SUFFIX
PARTIAL_NAME = re.compile(
    r"\.?(?P<name>.+)\.partial-(?:(?P<host>.+)-)?(?P<pid>\d+)(?P<suffix>\.[A-Za-z0-9]+)?"
)

logger = logging.getLogger(__name__)


def write_manifest(folder: Path) -> None:
    """Record the size and SHA-256 of every file under `folder` in its MANIFEST, written last and atomically:
    an entry without one is unfinished (or made by an older version) and never trusted."""
    files = {
        str(path.relative_to(folder)): {"bytes": path.stat().st_size, "sha256": sha256_file(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    write_text_atomically(folder / MANIFEST, json.dumps({"files": files}, indent=1) + "\n")


def manifest_problem(folder: Path, verify_hashes: bool) -> str | None:
    """What is wrong with the cache entry `folder` against its MANIFEST, naming the file; None when it is whole.
    Every file's size is checked, and its content (SHA-256) when it is at most HASH_ALWAYS_BYTES or
    `verify_hashes` asks for all."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return f"{manifest} is missing (an unfinished entry, or one made by an older version)"
    try:
        listed = json.loads(manifest.read_text(encoding="utf-8"))["files"]
        recorded = {name: (int(entry["bytes"]), str(entry["sha256"])) for name, entry in listed.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # JSON, or not the manifest's shape
        return f"{manifest} is damaged ({error})"
    for name, (size, digest) in recorded.items():
        path = folder / name
        if not path.is_file():
            return f"{path} is missing"
        if (actual := path.stat().st_size) != size:
            return f"{path} has {actual:,} bytes where {size:,} were written"
        if (verify_hashes or size <= HASH_ALWAYS_BYTES) and sha256_file(path) != digest:
            return f"{path} is damaged (its SHA-256 is not the one recorded)"
    return None


class CacheError(ValueError):
    """A damaged cache entry that cannot be rebuilt, said with the file and the fix."""


def discard_damaged_entry(folder: Path, problem: str, choose: str) -> None:
    """Remove the cache entry `folder` that `problem` says is damaged, with a warning, so that it is rebuilt; one
    that cannot be removed is a CacheError naming it and `choose` (the flag that picks another cache)."""
    try:
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
        else:
            folder.unlink()
    except OSError as error:
        raise CacheError(
            f"{problem}, and {folder} cannot be removed ({error.strerror}): remove it by hand or choose another "
            f"{choose}."
        ) from error
    logger.warning(f"warning: {problem}: rebuilding {folder}")


def process_is_alive(pid: int) -> bool:
    """Whether process `pid` runs on this host (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        pass
    return True


def remove_stale_partials(folder: Path, final_name: str | None = None) -> None:
    """Remove what writers that are no longer alive left in `folder` under a temporary name (`partial_path`: a
    kill -9, a power cut), only those of `final_name` if given; those of live processes, or of another host
    (whose processes cannot be asked), are being written and stay."""
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        match = PARTIAL_NAME.fullmatch(path.name)
        if match is None or match["host"] not in (None, socket.gethostname()):
            continue
        if final_name is not None and match["name"] + (match["suffix"] or "") != final_name:
            continue
        if not process_is_alive(int(match["pid"])):
            logger.info(f"removing {path}, left by a process that has ended")
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def check_cache_folder(flag: str, cache: Path) -> None:
    """A cache flag's folder exists as a folder, or can be made: no file at it or above it (ValueError naming the
    flag)."""
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"{flag} {cache} is a file: give a folder (it is made if missing).")
    existing = nearest_existing(cache)
    if not existing.is_dir():
        raise ValueError(f"{flag} {cache} cannot be made: {existing} is a file. Give a folder.")


def read_json(path: Path, fix: str) -> Any:
    """The JSON in `path`; one that is missing or not JSON is an error naming it and `fix`."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing; {fix}.") from None
    except ValueError as error:  # not UTF-8, not JSON, empty
        raise ValueError(f"{path} is damaged, not valid JSON ({error}): {fix}.") from None


def read_text_lines(path: Path, fix: str) -> list[str]:
    """A UTF-8 text file's lines split at line ends only, as Python's readlines() (which fairseq, subword-nmt and
    FSMTTokenizer use) splits them: str.splitlines() would also split at characters a BPE piece may hold (U+2028,
    U+0085). A file that is not UTF-8 is an error naming it, where and `fix`."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise ValueError(
            f"{path} is not UTF-8 text ({error.reason} at byte {error.start:,}): {fix}."
        ) from None
    return lines[:-1] if lines[-1] == "" else lines


# Rust-backed writers (safetensors, tokenizers) raise their own exceptions, with the OS error only in the text.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def machine_write_failure(error: BaseException) -> OSError | None:
    """The machine's refusal behind `error` (one of WRITE_FAILURES: a full disk, a read-only folder), as an
    OSError, also when a Rust-backed writer raised it as its own exception; None for any other error."""
    if isinstance(error, WriteError):
        return None  # already said with its path
    if isinstance(error, OSError):
        return error if error.errno in WRITE_FAILURES else None
    match = _RUST_OS_ERROR.search(str(error))
    if match is None or int(match.group(1)) not in WRITE_FAILURES:
        return None
    return OSError(int(match.group(1)), os.strerror(int(match.group(1))))


@contextmanager
def write_failures_named(path: Path, choose: str) -> Iterator[None]:
    """A machine's write failure inside the block (`machine_write_failure`) becomes a WriteError naming `path`,
    its free space and `choose`, the flag that picks another place; other errors pass unchanged."""
    try:
        yield
    except Exception as error:
        failure = machine_write_failure(error)
        if failure is None:
            raise
        raise WriteError(describe_write_failure(failure, Path(path), choose)) from error


@contextmanager
def file_written_whole(final: Path, choose: str) -> Iterator[Path]:
    """A temporary name beside `final` (same suffix, so writers that go by it still can) to write into, renamed
    to `final` when the block ends; on any failure, an interrupt included, the temporary is removed and `final`
    is as it was, and a machine's write failure becomes a WriteError naming `final` and `choose`."""
    final = Path(final)
    temporary = partial_path(final)
    try:
        with write_failures_named(final, choose):
            yield temporary
            os.replace(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)


def check_writable(path: Path, choose: str) -> None:
    """Raise WriteError unless a file can be written where `path` is, or would be made (its nearest existing
    folder): a byte is written to a nameless temporary file there, so that a read-only, unwritable or full place
    is found before any long work, whoever runs it (root passes permission checks such as `os.access`, but not a
    read-only mount). A file to be replaced is written beside; a path under a file is left to the caller's own
    check."""
    path = Path(path)
    existing = nearest_existing(path)
    if existing == path and path.is_file():
        existing = path.parent
    if not existing.is_dir():
        return
    with write_failures_named(path, choose), tempfile.TemporaryFile(dir=existing) as probe:
        probe.write(b"\0")
        probe.flush()
