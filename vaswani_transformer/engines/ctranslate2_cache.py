"""The CTranslate2 export of a model, converted once per content into the conversion cache (`conversion_cache`).

`cached_export` converts a model once per content: into a cache folder named by a hash of its weights, config,
tokenizer and generation config, the quantization and this package's export format, written under a temporary
name and renamed, so a killed conversion never leaves a folder that a later call would use; its manifest of
sizes and hashes proves it whole before each reuse.
"""

from pathlib import Path
from typing import Any

from .conversion_cache import cached_conversion, conversion_cache_dir, model_file_hashes, model_folder
from .ctranslate2_export import EXPORT_FORMAT, import_ctranslate2, to_ctranslate2


def default_cache_dir() -> Path:
    """Where `cached_export` keeps conversions: HF_HOME/vaswani_transformer/ctranslate2."""
    return conversion_cache_dir("ctranslate2")


def export_record(folder: Path, quantization: str | None, max_positions: int) -> dict[str, Any]:
    """What an export of `folder` depends on: the SHA-256 of each model file, the conversion's settings,
    this package's export format and the CTranslate2 version that writes model.bin."""
    return {
        "files": model_file_hashes(folder),
        "quantization": quantization or "float32",
        "max_positions": max_positions,
        "export_format": EXPORT_FORMAT,
        "ctranslate2": import_ctranslate2().__version__,
    }


def cached_export(
    model: str | Path,
    *,
    quantization: str | None = None,
    cache_dir: str | Path | None = None,
    max_positions: int = 1024,
    verify_cache: bool = False,
    trust_remote_code: bool = False,
) -> Path:
    """The CTranslate2 export of `model` (folder or Hub id), converted on the first call and reused after.

    The export lives in `cache_dir` (default: `default_cache_dir()`) under a hash of `export_record`: a
    retrained model, another quantization or a new export format gets a new folder, and a damaged one is
    converted anew (`cached_conversion`; `verify_cache`: every file's content checked, not only the small
    ones'). Returns the export's folder.
    """
    folder = model_folder(model, trust_remote_code)
    return cached_conversion(
        export_record(folder, quantization, max_positions),
        lambda staging: to_ctranslate2(
            folder,
            staging,
            quantization=quantization,
            max_positions=max_positions,
            choose="--ctranslate2_cache",
            trust_remote_code=trust_remote_code,
        ),
        ["model.bin"],
        Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        "--ctranslate2_cache",
        verify_cache,
    )
