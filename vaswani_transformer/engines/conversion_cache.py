"""One cache for converted models (CTranslate2, ONNX): a folder per model content and conversion settings.

A conversion is named by a hash of what it is made from (`model_file_hashes`: the SHA-256 of each model file,
plus the converter's settings and versions), written under a temporary name, given a manifest of its files'
sizes and hashes and renamed when complete, so a killed conversion never leaves a folder that a later call would
use, a damaged one is converted anew, and a retrained model gets a new one.
"""

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock
from huggingface_hub import constants, snapshot_download

from ..evaluation.loading import check_model_name
from ..files.manifests import discard_damaged_entry, manifest_problem, sha256_file, write_manifest
from ..files.partials import remove_stale_partials
from ..files.writing import WriteError, describe_write_failure, folder_written_whole
from ..trust import check_remote_code, load_failure

logger = logging.getLogger(__name__)

CACHE_RECORD = "export.json"  # in a cached conversion: what it was made from
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


def model_folder(model: str | Path, trust_remote_code: bool = False) -> Path:
    """A local folder with the model's files: the folder itself, or a Hub id's snapshot (the cache offline); one
    whose files ask to run code of its own is refused unless `trust_remote_code` (`trust.check_remote_code`)."""
    name = check_model_name(model)
    if Path(name).is_dir():
        folder = Path(name)
    else:
        try:
            folder = Path(snapshot_download(name, allow_patterns=list(MODEL_FILES)))
        except OSError as error:  # not found, not reachable, not in the cache offline
            raise load_failure(name, error) from None
    check_remote_code(folder, trust_remote_code)
    return folder


def model_file_hashes(folder: Path) -> dict[str, str]:
    """The SHA-256 of each model file in `folder` (`MODEL_FILES`), by name: what a conversion is made from."""
    files = sorted({path for pattern in MODEL_FILES for path in folder.glob(pattern) if path.is_file()})
    return {path.name: sha256_file(path) for path in files}


def _entry_problem(
    folder: Path, record: dict[str, Any], products: Sequence[str], verify_hashes: bool
) -> str | None:
    """What keeps `folder` from being a whole conversion of `record`, naming the file; None when it is one.
    Its manifest (`files.manifest_problem`), written last, proves its files; the record says what it was made
    from."""
    if (problem := manifest_problem(folder, verify_hashes)) is not None:
        return problem
    missing = [product for product in products if not (folder / product).is_file()]
    if missing:
        return f"{folder} has no {', '.join(missing)}"
    try:
        saved = json.loads((folder / CACHE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{folder / CACHE_RECORD} cannot be read ({error})"
    return None if saved == record else f"{folder / CACHE_RECORD} records another conversion"


def cached_conversion(
    record: dict[str, Any],
    convert: Callable[[Path], None],
    products: Sequence[str],
    root: Path,
    choose: str,
    verify_hashes: bool = False,
) -> Path:
    """The folder under `root` named by a hash of `record`, made by `convert(folder)` on the first call and
    reused after, while it proves itself whole (`_entry_problem`; `verify_hashes`: every file's content, not
    only the small ones'). A damaged one is converted anew with a warning naming the file.

    `convert` writes into a hidden temporary folder (`files.folder_written_whole`), given its record and
    manifest last and renamed into place under a lock, so that two processes convert once and a failed or
    killed conversion leaves nothing under the final name; those that processes which died left are removed.
    A write the machine refuses is a WriteError naming the path and `choose` (the cache's flag)."""
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]
    final = root / key
    remove_stale_partials(root)
    if final.is_dir() and _entry_problem(final, record, products, verify_hashes) is None:
        return final
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise WriteError(describe_write_failure(error, root, choose)) from error
    with FileLock(root / f"{key}.lock"):
        if final.exists() or final.is_symlink():
            problem = _entry_problem(final, record, products, verify_hashes)
            if problem is None:  # another process converted it while this one waited
                return final
            discard_damaged_entry(final, problem, choose)
        # the one line a command says about it: a conversion takes seconds to minutes, once
        engine = choose.removeprefix("--").removesuffix("_cache")
        logger.warning(
            f"converting the model for {engine}, once: cached in {final} (another folder: {choose})"
        )
        with folder_written_whole(final, choose) as staging:
            convert(staging)
            (staging / CACHE_RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            write_manifest(staging)
    return final
