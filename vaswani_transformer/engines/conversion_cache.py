"""One cache for converted models (CTranslate2, ONNX): a folder per model content and conversion settings.

A conversion is named by a hash of what it is made from (`model_file_hashes`: the SHA-256 of each model file,
plus the converter's settings and versions), written under a temporary name and renamed when complete, so a
killed conversion never leaves a folder that a later call would use, and a retrained model gets a new one.
"""

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import constants, snapshot_download

from ..evaluation.loading import check_model_name
from ..files import sha256_file

CACHE_RECORD = "export.json"  # written last into a cached conversion: what it was made from
# The files a conversion reads: weights, configs, tokenizer (never executed or unpickled, only hashed).
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer*.json",
    "special_tokens_map.json",
    "*.model",
    "vocab*",
    "merges.txt",
)


def conversion_cache_dir(kind: str) -> Path:
    """Where converted models of one `kind` are cached: HF_HOME/vaswani_transformer/KIND."""
    return Path(constants.HF_HOME) / "vaswani_transformer" / kind


def model_folder(model: str | Path) -> Path:
    """A local folder with the model's files: the folder itself, or a Hub id's snapshot (the cache offline)."""
    name = check_model_name(model)
    if Path(name).is_dir():
        return Path(name)
    return Path(snapshot_download(name, allow_patterns=list(MODEL_FILES)))


def model_file_hashes(folder: Path) -> dict[str, str]:
    """The SHA-256 of each model file in `folder` (`MODEL_FILES`), by name: what a conversion is made from."""
    files = sorted({path for pattern in MODEL_FILES for path in folder.glob(pattern) if path.is_file()})
    return {path.name: sha256_file(path) for path in files}


def _is_complete(folder: Path, record: dict[str, Any], products: Sequence[str]) -> bool:
    """Whether `folder` is a finished conversion of `record` (its record file is written last)."""
    try:
        saved = json.loads((folder / CACHE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return saved == record and all((folder / product).is_file() for product in products)


def cached_conversion(
    record: dict[str, Any],
    convert: Callable[[Path], None],
    products: Sequence[str],
    root: Path,
) -> Path:
    """The folder under `root` named by a hash of `record`, made by `convert(folder)` on the first call and
    reused after (while it holds `products` and the same record).

    `convert` writes into a hidden temporary folder, which is renamed into place when complete; a folder under
    the final name that is not complete (say, copied in by hand and cut short) is replaced."""
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]
    final = root / key
    if _is_complete(final, record, products):
        return final
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=root))
    try:
        convert(staging)
        (staging / CACHE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        staging.chmod(0o755)  # mkdtemp makes it private; the cache folder is readable as any other
        move_into_place(staging, final, lambda path: _is_complete(path, record, products))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def move_into_place(staging: Path, final: Path, is_complete: Callable[[Path], bool]) -> None:
    """Rename the finished `staging` to `final`, replacing a folder there that `is_complete` rejects; if
    another process finished the same export first, keep its folder."""
    if final.exists() and not is_complete(final):
        discarded = Path(tempfile.mkdtemp(prefix=f".{final.name}.incomplete.", dir=final.parent))
        final.rename(discarded / "export")
        shutil.rmtree(discarded, ignore_errors=True)
    try:
        os.rename(staging, final)
    except OSError:
        if not is_complete(final):
            raise
