"""Files and names on this machine: whether a name is a local path or a Hub id, outputs kept apart from inputs,
writes that never leave a partial file, and content hashes.

A name that means a local file or folder but does not exist is an error naming it, never a Hub request (which
would fail later, offline or with a 404 about a repository the user never meant).
"""

import errno
import hashlib
import os
import re
import shutil
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

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
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    free_mb = shutil.disk_usage(existing).free // 2**20
    return f"{reason} while writing {path} ({free_mb:,} MB free there): free space or choose another {choose}"


@contextmanager
def folder_written_whole(final: Path, choose: str) -> Iterator[Path]:
    """A temporary sibling of `final` to write into, moved into place when the block ends: renamed to `final` when
    there is none yet, else its files replace `final`'s of the same name one by one (files the writer does not
    write stay). On any failure, an interrupt included, the temporary is removed and `final` is as it was; an
    OSError of the machine becomes a WriteError naming `final` and `choose` (the flag that picks another place)."""
    temporary = final.with_name(f".{final.name}.partial-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    try:
        temporary.mkdir(parents=True)
        yield temporary
        if final.exists():
            for written in sorted(temporary.rglob("*")):
                if written.is_file():
                    target = final / written.relative_to(temporary)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(written, target)
        else:
            os.rename(temporary, final)
    except OSError as error:
        if isinstance(error, WriteError) or error.errno not in WRITE_FAILURES:
            raise
        raise WriteError(describe_write_failure(error, final, choose)) from error
    finally:
        shutil.rmtree(temporary, ignore_errors=True)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
