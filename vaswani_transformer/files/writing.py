"""Writes that never leave a partial file or folder (a temporary name, renamed into place as a whole), and the
machine's refusals (a full disk, a read-only folder) said with the path, the free space there and the fix."""

import ctypes
import errno
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .partials import partial_path
from .paths import nearest_existing


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


def describe_write_failure(error: OSError, path: Path, choose: str) -> str:
    """What went wrong while writing `path`, with the free space there and the fix: "no space left on device while
    writing X (12 MB free there): free space or choose another --output"."""
    reason = WRITE_FAILURES.get(error.errno or 0, error.strerror or str(error))
    free_mb = shutil.disk_usage(nearest_existing(path)).free // 2**20
    return f"{reason} while writing {path} ({free_mb:,} MB free there): free space or choose another {choose}"


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
