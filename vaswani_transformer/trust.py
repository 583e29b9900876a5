"""The loading gate: no model folder's code runs unless the user asked, and nothing asks on standard input.

transformers runs Python files of a model folder (or Hub repo) where one of its JSON files names them in an
`auto_map` (`"AutoTokenizer": ["evil.EvilTok", null]` in tokenizer_config.json), and unless it is told
`trust_remote_code` it asks "Do you wish to run the custom code? [y/N]" on standard output and reads the answer
from standard input, which for `vaswani-translate` is the text to translate. So every load in this package passes
`trust_remote_code` explicitly (False unless the user passed --trust_remote_code; Python: `trust_remote_code=True`),
and `check_remote_code` refuses a folder whose files ask for code before anything is loaded, naming the file and the
flag (docs/errors.md, "Code in a model folder").

This package's own saved folders carry an `auto_map` in config.json naming their copies of the model's code, for
users without the package: transformers takes those classes from the package, which registers them for its
`model_type` (`vaswani_transformer.register_auto_classes`), never from the folder, so these entries ask for nothing.
"""

from pathlib import Path
from typing import Any

import huggingface_hub
from transformers.tokenization_utils_base import TOKENIZER_CONFIG_FILE
from transformers.utils import (
    CONFIG_NAME,
    FEATURE_EXTRACTOR_NAME,
    PROCESSOR_NAME,
    VIDEO_PROCESSOR_NAME,
    cached_file,
)

from .files.paths import is_local_path
from .files.reading import read_json

TRUST_FLAG = "--trust_remote_code"
TRUST_HELP = (
    "let the model folder run Python code of its own where its files ask for it (an auto_map naming a .py file "
    "of the folder in tokenizer_config.json or config.json). Without it such a folder is refused before "
    "anything loads; this package's own folders need no code of theirs. Only for a folder whose code you have "
    "read and trust: that code runs with your rights"
)
# The JSON files whose `auto_map` transformers' Auto classes follow into a folder's code.
CODE_NAMING_FILES = (
    CONFIG_NAME,
    TOKENIZER_CONFIG_FILE,
    FEATURE_EXTRACTOR_NAME,
    PROCESSOR_NAME,
    VIDEO_PROCESSOR_NAME,
)
# The Auto classes the package registers for its model_type: in config.json, transformers serves them from the
# package and ignores the folder's copies.
PACKAGE_AUTO_CLASSES = ("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM")
COPY_AGAIN = "copy the model folder anew from where it came, or save it again (save_pretrained)"


def code_references(file_name: str, content: Any) -> list[str]:
    """The `auto_map` entries of a loaded JSON file that would run code of the folder ("AutoTokenizer:
    evil.EvilTok"); empty when it asks for none."""
    from .modeling.configuration_vaswani_transformer import VaswaniTransformerConfig  # torch: not for --help

    auto_map = content.get("auto_map") if isinstance(content, dict) else None
    if auto_map is None:
        return []
    entries = auto_map if isinstance(auto_map, dict) else {"AutoTokenizer": auto_map}  # the legacy list form
    ours = file_name == CONFIG_NAME and content.get("model_type") == VaswaniTransformerConfig.model_type
    found = []
    for auto_class, reference in entries.items():
        if ours and auto_class in PACKAGE_AUTO_CLASSES:
            continue
        references = reference if isinstance(reference, list | tuple) else [reference]
        found += [f"{auto_class}: {item}" for item in references if item is not None]
    return found


def _located(name: str, file_name: str) -> Path | None:
    """`file_name` of a local folder or of a Hub repo (downloaded as from_pretrained would, or from the cache
    offline); None where it has none or it cannot be had (loading then says why)."""
    if Path(name).is_dir():
        path = Path(name) / file_name
        return path if path.is_file() else None
    try:
        where = cached_file(
            name,
            file_name,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
        )
    except OSError:
        return None
    return None if where is None else Path(where)


def check_remote_code(
    name: str | Path, trust_remote_code: bool = False, *, allowed_by: str | None = TRUST_FLAG
) -> None:
    """Refuse a model folder or Hub repo whose files ask to run code of its own (`code_references`), unless
    `trust_remote_code`: a ValueError naming the file and `allowed_by`, the flag that allows it (None: a command
    that never runs a folder's code, such as vaswani-push), before anything is loaded. A file that is not JSON is
    a ValueError naming it (transformers would say only "'utf-8' codec can't decode")."""
    name = str(name)
    for file_name in CODE_NAMING_FILES:
        path = _located(name, file_name)
        if path is None:
            continue
        shown = path if is_local_path(name) else f"{name}: {file_name}"
        references = code_references(file_name, read_json(path, COPY_AGAIN))
        if references and not trust_remote_code:
            raise ValueError(
                f"{shown} asks to run code of the model folder ({'; '.join(references)}); nothing was loaded. "
                + _allow(allowed_by)
            )


def _allow(flag: str | None) -> str:
    """How to go on with a folder that asks to run its code."""
    if flag is None:
        return (
            "This command runs no model folder's code: use a folder that needs none (remove that auto_map entry "
            "if the folder works without it)."
        )
    return (
        f"Pass {flag} (Python: trust_remote_code=True) only if you have read that code and trust it, or use a "
        "model folder that needs no code of its own."
    )


def offline_problem(name: str) -> str | None:
    """Why a Hub id could not be loaded when HF_HUB_OFFLINE is set, with the fix (transformers' own text says
    "check your internet connection"); None online or for a local path."""
    if not huggingface_hub.is_offline_mode() or is_local_path(name):
        return None
    return (
        f"{name}: not in this machine's Hub cache, and HF_HUB_OFFLINE is set (offline mode: nothing is "
        f"downloaded). Unset HF_HUB_OFFLINE to download it, download it first (hf download {name}), or give a "
        "local model folder."
    )


def load_failure(name: str, error: OSError) -> OSError:
    """transformers' OSError for a model it could not load (a Hub id not found, not reachable or not in the cache
    offline), as one naming `name` and, offline, the fix (`offline_problem`)."""
    return OSError(offline_problem(name) or f"{name}: cannot load this model ({error})")
