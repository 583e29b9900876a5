"""Content hashes, and cache entries that prove themselves before reuse: a manifest of each file's size and
SHA-256, written last, without which an entry is unfinished and never trusted."""

import hashlib
import json
import logging
import shutil
from pathlib import Path

from .writing import write_text_atomically

MANIFEST = "manifest.json"  # written last into a cache entry: each file's size and SHA-256
# Files up to this size are hashed at every reuse (a few tenths of a second at most); larger ones are checked by
# size, and by content only when asked (`--verify_cache`).
HASH_ALWAYS_BYTES = 64 << 20

logger = logging.getLogger(__name__)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path) -> None:
    """Record the size and SHA-256 of every file under `folder` in its MANIFEST, written last and atomically:
    an entry without one is unfinished and never trusted."""
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
        return f"{manifest} is missing (an unfinished entry)"
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
