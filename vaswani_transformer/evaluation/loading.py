"""Loading a saved model for decoding: the folder's files checked first, the tokenizer checked against the model.

`load_for_decoding` is how every command and the training job load a model (a folder or a Hub id), the way a
user loads it with the Auto classes; a damaged or mismatched folder is an error naming the file and the fix.
"""

from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..auto import register_auto_classes
from ..data.tokenization import tokenizer_fingerprint
from ..files.paths import is_local_path
from ..files.reading import read_json
from ..trust import check_remote_code, load_failure
from .verification import SAVE_AGAIN, readable_file, verify_model_folder, weight_files, weight_shapes


def check_model_name(name: str | Path) -> str:
    """A model folder that exists, or a Hub id (`user/name`); a missing local path is an error, never a Hub call,
    and so is a file (a model's weights given for its folder)."""
    text = str(name)
    if Path(text).expanduser().is_file():
        raise NotADirectoryError(
            f"{text} is a file: give the folder that holds it (a saved model is a folder)."
        )
    if not Path(text).expanduser().exists() and is_local_path(name):
        raise FileNotFoundError(
            f"{text}: no such model folder (give a trained model folder or a Hub id user/name)."
        )
    return str(Path(text).expanduser()) if Path(text).expanduser().exists() else text


def decoding_dtype(device: str) -> torch.dtype:
    """The weights' dtype for decoding: bfloat16 on a GPU that computes in it (twice the decoding speed, half the
    memory), float32 elsewhere (where `translate` computes in bfloat16 by autocast if the CPU computes it faster)."""
    return torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32


# A saved tokenizer's own files: this package's (the tokenizers library's one JSON file), or those of the FSMT
# tokenizer (Moses and BPE: source and target vocabularies and the merges) that converted published models keep.
TOKENIZER_FILES = ("tokenizer.json",)
FSMT_TOKENIZER_FILES = ("vocab-src.json", "vocab-tgt.json", "merges.txt")


def tokenizer_files(folder: Path) -> tuple[str, ...]:
    """The tokenizer files a saved model folder holds: FSMT's where it has any of them, else tokenizer.json."""
    if any((folder / name).exists() for name in FSMT_TOKENIZER_FILES):
        return FSMT_TOKENIZER_FILES
    return TOKENIZER_FILES


def _check_saved_file(path: Path) -> None:
    """The file is there, and a JSON file parses as an object (tokenizer.json, vocabularies, the config)."""
    readable_file(path)
    if path.suffix == ".json" and not isinstance(read_json(path, SAVE_AGAIN), dict):
        raise ValueError(f"{path} is not a JSON object: {SAVE_AGAIN}.")


def check_saved_files(folder: Path) -> None:
    """A model folder's configuration, tokenizer and weights are there and readable as what they are; else an
    error naming the damaged file, before anything loads (transformers' own errors name none, or mislead)."""
    for name in ("config.json", *tokenizer_files(folder)):
        _check_saved_file(folder / name)
    weight_shapes(weight_files(folder))


def load_for_decoding(
    model_dir: str | Path,
    *,
    device: str | None = None,
    dtype: torch.dtype | None = None,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model (folder or Hub id) and its tokenizer, loaded the way a user loads them, in eval mode.

    By default the model goes to the GPU when there is one, in `decoding_dtype` (bfloat16 there, else float32).
    A folder that asks to run code of its own is refused unless `trust_remote_code` (`trust.check_remote_code`);
    a local folder's files are checked first (`check_saved_files`); weights that do not fit the configuration
    (an edited config.json) are a ValueError naming both files.
    """
    name = check_model_name(model_dir)
    # JSON and safetensors headers only, no code: a config of another model type is named as that, not as code
    # to trust
    if Path(name).is_dir():
        check_saved_files(Path(name))
        verify_model_folder(Path(name))
    check_remote_code(name, trust_remote_code)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    register_auto_classes()  # this package's classes for its folders: none of a folder's code runs
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(
            name, dtype=dtype or decoding_dtype(device), trust_remote_code=trust_remote_code
        )
    except OSError as error:  # a Hub id not found, not reachable or not cached offline
        raise load_failure(name, error) from None
    except RuntimeError as error:
        if "mismatched_sizes" not in str(error):
            raise
        raise ValueError(
            f"{name}: the weights in model.safetensors do not have the shapes config.json describes (was "
            f"config.json edited?): {SAVE_AGAIN}."
        ) from None
    tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=trust_remote_code)
    check_vocabulary(model, tokenizer, name)
    return model.to(device).eval(), tokenizer


def check_vocabulary(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> None:
    """The tokenizer must be the model's own: a larger one crashes in the embedding, a smaller one (another
    run's) translates into garbage, and one of the same size whose ids mean other words (another corpus's BPE,
    swapped ids, another normalizer) is told apart by the fingerprint the model's config records."""
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(
            f"{name}: the tokenizer has {len(tokenizer):,} tokens but the model's vocabulary has "
            f"{model.config.vocab_size:,}: they come from different runs. Save and load the model and its "
            "tokenizer from the same folder."
        )
    recorded = getattr(model.config, "tokenizer_fingerprint", None)
    if recorded is not None and tokenizer_fingerprint(tokenizer) != recorded:
        raise ValueError(
            f"{name}: tokenizer.json is not the tokenizer this model was trained with (its vocabulary, merges or "
            f"normalizer differ from the one config.json's tokenizer_fingerprint records, {recorded}): its ids "
            "would mean other words to the model. Copy the model's own tokenizer.json back, or the folder anew."
        )
