"""Files and names on this machine: whether a name is a local path or a Hub id, writes that never leave a
partial file, and content hashes.

A name that means a local file or folder but does not exist is an error naming it, never a Hub request (which
would fail later, offline or with a 404 about a repository the user never meant).
"""

import hashlib
import os
import re
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


def write_text_atomically(path: Path, text: str) -> None:
    """Write to a temporary name beside `path`, then rename: a failure leaves the earlier file whole."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
