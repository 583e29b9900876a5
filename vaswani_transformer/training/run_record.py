"""What a run's record (train_options.json) holds beside its settings, and what --resume checks it against before
anything is written: the corpora's content, the run's own vocabulary (`tokenizer/`) and the model config of the
checkpoint it continues from.

At the start of every session the record gets `corpus_sha256`, the SHA-256 of each corpus file the run reads (by
the setting that names it; the embedded Tatoeba corpus too), and `vocabulary`, the --vocab_size the run's
vocabulary was trained to and the tokens it has. A file changed under the same name, a vocabulary replaced or a
setting edited by hand in the record is then a contradiction that --resume names, instead of a run that mixes
two corpora or records settings it was not made with. Hub datasets are named by their id alone. A record without
these entries was edited, and is refused (docs/run-folders.md, "The run's record is its contract").
"""

import functools
import json
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from ..data.corpora import TATOEBA_FILE
from ..data.tokenization import load_tokenizer
from ..files.manifests import sha256_file
from ..files.paths import is_local_path
from ..modeling.configuration_vaswani_transformer import PRESETS
from .options import PATH_FIELDS, TrainOptions
from .run_folder import OPTIONS_FILE, RunFolderError, write_options

CORPUS_SHA256 = "corpus_sha256"  # in train_options.json: each corpus file's SHA-256, by the setting naming it
VOCABULARY = "vocabulary"  # in train_options.json: {"vocab_size": what it was trained to, "tokens": its size}
EMBEDDED_CORPUS = "embedded_tatoeba"  # the key of the embedded corpus (no --train_source) in CORPUS_SHA256
# The config keys a run's settings give (--preset, --dropout; --config_overrides adds its own): the others keep
# their defaults, which another version of the package may change without the run's record changing.
SET_BY_THE_SETTINGS = {key for preset in PRESETS.values() for key in preset} | {"dropout"}


def corpus_files(options: TrainOptions) -> dict[str, Path]:
    """The files whose content the run reads as its corpora, by the setting that names them."""
    files = {
        name: Path(value).expanduser()
        for name in PATH_FIELDS
        if (value := getattr(options, name)) is not None and is_local_path(value)
    }
    if options.train_source is None:
        files[EMBEDDED_CORPUS] = TATOEBA_FILE
    return files


def corpus_fingerprint(options: TrainOptions) -> dict[str, str]:
    """The SHA-256 of each corpus file's bytes, by the setting that names it."""
    return {name: _file_sha256(path) for name, path in corpus_files(options).items()}


def _file_sha256(path: Path) -> str:
    status = path.stat()  # the same file, unchanged, is hashed once per process (checked twice before a run)
    return _sha256_of(path.resolve(), status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


@functools.lru_cache(maxsize=64)
def _sha256_of(path: Path, *identity: int) -> str:
    return sha256_file(path)


def record_run(options: TrainOptions, tokenizer: PreTrainedTokenizerBase) -> None:
    """Write the run's record at the start of a session: its settings, its corpora's fingerprint and its
    vocabulary (`tokenizer`, the run folder's)."""
    inputs = {
        CORPUS_SHA256: corpus_fingerprint(options),
        VOCABULARY: {"vocab_size": options.vocab_size, "tokens": len(tokenizer)},
    }
    write_options(options, options.output_dir, inputs)


def check_run_inputs(options: TrainOptions, record: dict[str, Any], checkpoint: Path | None) -> None:
    """--resume: the corpora, the run's vocabulary and `checkpoint`'s model config (the one it continues from)
    agree with the record, or a RunFolderError naming the file and what differs."""
    folder = options.output_dir
    if missing := [key for key in (CORPUS_SHA256, VOCABULARY) if key not in record]:
        raise RunFolderError(
            f"--resume: {folder / OPTIONS_FILE} holds no {' or '.join(missing)} (every run's record does; this one "
            "was edited), so the run's corpora and vocabulary cannot be checked against it. Restore it from a "
            "copy, or start a new run with --overwrite or in another --output_dir."
        )
    _check_corpora(options, record[CORPUS_SHA256], folder / OPTIONS_FILE)
    tokens = _check_vocabulary(options, record[VOCABULARY], folder)
    if checkpoint is not None:
        _check_model_config(options, checkpoint / "config.json", tokens)


def _check_corpora(options: TrainOptions, recorded: dict[str, str], record: Path) -> None:
    files = corpus_files(options)
    for name, path in files.items():
        if name in recorded and _file_sha256(path) != recorded[name]:
            what = "the embedded Tatoeba corpus" if name == EMBEDDED_CORPUS else f"--{name} {path}"
            raise RunFolderError(
                f"--resume: {what} is not the corpus the run was made with (its content's SHA-256 differs from "
                f"the one {record} records under {CORPUS_SHA256}): the run would mix two corpora. Restore the "
                "file, or train a new run on it with --overwrite or in another --output_dir."
            )


def _check_vocabulary(options: TrainOptions, recorded: dict[str, int], folder: Path) -> int | None:
    """The run's vocabulary loads and agrees with the record; its size (None when the run has none yet)."""
    if not (folder / "tokenizer").is_dir():
        return None
    tokenizer = _run_tokenizer(folder / "tokenizer")
    tokens, record = len(tokenizer), folder / OPTIONS_FILE
    made = (recorded.get("vocab_size"), recorded.get("tokens"))
    if made != (options.vocab_size, tokens):
        raise RunFolderError(
            f"--resume: {record} says vocab_size {options.vocab_size}, but the run's vocabulary "
            f"({folder / 'tokenizer'}, {tokens} tokens) was trained to --vocab_size {made[0]} "
            f"and had {made[1]} tokens ({VOCABULARY} there). A run continues with the settings and "
            "vocabulary it was made with: restore them, or train a new run with --overwrite or in another "
            "--output_dir."
        )
    # a vocabulary exceeds the size it was trained to only when the corpus's characters do: then it has no merges
    if tokens > options.vocab_size and _learnt_merges(tokenizer):
        raise RunFolderError(
            f"--resume: {record} says vocab_size {options.vocab_size}, but the run's vocabulary "
            f"({folder / 'tokenizer'}) has {tokens} tokens, merges among them: it was trained to another size. "
            "Restore the record's vocab_size, or train a new run with --overwrite or in another --output_dir."
        )
    return tokens


def _run_tokenizer(folder: Path) -> PreTrainedTokenizerBase:
    try:
        return load_tokenizer(str(folder))
    except Exception as error:  # tokenizers' parse errors are plain Exceptions
        raise RunFolderError(
            f"--resume: the run's vocabulary {folder / 'tokenizer.json'} is damaged ({_first_line(error)}). Each "
            "checkpoint-N holds the same files: copy its tokenizer.json and tokenizer_config.json into "
            f"{folder}, or train a new run with --overwrite or in another --output_dir."
        ) from None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _learnt_merges(tokenizer: PreTrainedTokenizerBase) -> bool:
    model = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    return bool(model.get("merges"))


def _check_model_config(options: TrainOptions, saved: Path, tokens: int | None) -> None:
    """Each value of the checkpoint's config.json that the record's settings give is the one they give, and its
    vocab_size is the vocabulary's size."""
    model = json.loads(saved.read_text(encoding="utf-8"))  # whole: `checkpoints.resume_problem` checked it
    expected = json.loads(options.model_config().to_json_string(use_diff=False))
    expected["vocab_size"] = tokens
    compared = (SET_BY_THE_SETTINGS | set(options.config_overrides) | {"vocab_size"}) & set(model)
    if tokens is None:  # no vocabulary yet: nothing to compare the size with
        compared.discard("vocab_size")
    differences = [
        f"{key} {json.dumps(model.get(key))} (the record's settings give {json.dumps(expected.get(key))})"
        for key in sorted(compared)
        if model.get(key) != expected.get(key)
    ]
    if differences:
        raise RunFolderError(
            f"--resume: {saved} is not the model {options.output_dir / OPTIONS_FILE} describes: "
            f"{'; '.join(differences)}. A run continues with the settings it was made with: restore the record "
            "(preset, config_overrides, dropout, vocab_size), or train a new run with --overwrite or in another "
            "--output_dir."
        )
