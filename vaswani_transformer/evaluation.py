"""Decoding with the model's generation config (the paper's §6.1 settings) and BLEU scoring."""

import copy
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors import SafetensorError, safe_open
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    EvalPrediction,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from .bleu import moses_tokenize, sacre_bleu, tokenized_bleu
from .locations import is_local_path
from .monitoring import translation_shares
from .precision import decoding_precision
from .quantization import INT8_DESCRIPTION, int8_linear_layers
from .tokenization import lowercases

if TYPE_CHECKING:  # engines.py builds on this module
    from .engines import Engine


def score_translations(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    target_lang: str,
    references_tokenized: Sequence[str] | None = None,
    tokenized_lowercase: bool = True,
    sacrebleu_lowercase: bool = False,
    split_compounds: bool = False,
) -> dict:
    """sacreBLEU on detokenised text, and tokenised BLEU comparable to published numbers.

    Tokenised BLEU is against `references_tokenized` when given (e.g. Multi30k's official lc.norm.tok files),
    otherwise against the references run through the same Moses pipeline as the hypotheses. A model trained on
    lowercased text is scored with `sacrebleu_lowercase` (signature `case:lc`): against cased references it
    would lose every capital letter.
    """
    hypotheses, references = list(hypotheses), list(references)
    if references_tokenized is None:
        references_tokenized = moses_tokenize(references, target_lang, lowercase=tokenized_lowercase)
    return {
        "sacrebleu": sacre_bleu(hypotheses, references, lowercase=sacrebleu_lowercase),
        "tokenized_bleu": tokenized_bleu(
            hypotheses,
            list(references_tokenized),
            lang=target_lang,
            lowercase=tokenized_lowercase,
            split_compounds=split_compounds,
        ),
        "num_sentences": len(hypotheses),
    }


def check_model_name(name: str | Path) -> str:
    """A model folder that exists, or a Hub id (`user/name`); a missing local path is an error, never a Hub call."""
    text = str(name)
    if not Path(text).expanduser().exists() and is_local_path(name):
        raise FileNotFoundError(
            f"{text}: no such model folder (give a trained model folder or a Hub id user/name)."
        )
    return str(Path(text).expanduser()) if Path(text).expanduser().exists() else text


def decoding_dtype(device: str) -> torch.dtype:
    """The weights' dtype for decoding: bfloat16 on a GPU that computes in it (twice the decoding speed, half the
    memory), float32 elsewhere (where `translate` computes in bfloat16 by autocast if the CPU computes it faster)."""
    return torch.bfloat16 if device.startswith("cuda") and torch.cuda.is_bf16_supported() else torch.float32


SAVE_AGAIN = "save the model and tokenizer again (save_pretrained) or copy the folder anew"


def _check_json_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing; a saved model folder holds it ({SAVE_AGAIN}).")
    try:
        json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is damaged, not valid JSON ({error}): {SAVE_AGAIN}.") from None


def _weight_files(folder: Path) -> list[Path]:
    """model.safetensors, or the shards its index names."""
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return [folder / "model.safetensors"]
    _check_json_file(index)
    return [folder / name for name in sorted(set(json.loads(index.read_bytes())["weight_map"].values()))]


def check_saved_files(folder: Path) -> None:
    """A model folder's configuration, tokenizer and weights are there and readable as what they are; else an
    error naming the damaged file, before anything loads (transformers' own errors name none, or mislead)."""
    for name in ("config.json", "tokenizer.json"):
        _check_json_file(folder / name)
    for weights in _weight_files(folder):
        if not weights.is_file():
            raise FileNotFoundError(f"{weights}: missing; a saved model folder holds it ({SAVE_AGAIN}).")
        try:
            with safe_open(weights, framework="pt") as tensors:
                tensors.keys()
        except SafetensorError as error:  # e.g. truncated by a full disk or an interrupted copy
            raise ValueError(f"{weights} is damaged ({error}): {SAVE_AGAIN}.") from None


def load_for_decoding(
    model_dir: str | Path, *, device: str | None = None, dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model (folder or Hub id) and its tokenizer, loaded the way a user loads them, in eval mode.

    By default the model goes to the GPU when there is one, in `decoding_dtype` (bfloat16 there, else float32).
    A local folder's files are checked first (`check_saved_files`); weights that do not fit the configuration
    (an edited config.json) are a ValueError naming both files.
    """
    name = check_model_name(model_dir)
    if Path(name).is_dir():
        check_saved_files(Path(name))
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(name, dtype=dtype or decoding_dtype(device))
    except (
        OSError
    ) as error:  # a Hub id not found, not reachable or not cached offline: transformers' text names none
        raise OSError(f"{name}: cannot load this model ({error})") from None
    except RuntimeError as error:
        if "mismatched_sizes" not in str(error):
            raise
        raise ValueError(
            f"{name}: the weights in model.safetensors do not have the shapes config.json describes (was "
            f"config.json edited?): {SAVE_AGAIN}."
        ) from None
    tokenizer = AutoTokenizer.from_pretrained(name)
    check_vocabulary(model, tokenizer, name)
    return model.to(device).eval(), tokenizer


def check_vocabulary(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str) -> None:
    """The tokenizer must be the model's own: a larger one crashes in the embedding, a smaller one (another
    run's) translates into garbage."""
    if len(tokenizer) != model.config.vocab_size:
        raise ValueError(
            f"{name}: the tokenizer has {len(tokenizer):,} tokens but the model's vocabulary has "
            f"{model.config.vocab_size:,}: they come from different runs. Save and load the model and its "
            "tokenizer from the same folder."
        )


def decoding_settings(
    model: PreTrainedModel, dtype: torch.dtype | None = None, **overrides: Any
) -> dict[str, Any]:
    """What `translate` will use: the model's generation config with `overrides`, the precision it computes
    in (`dtype`, else `precision.decoding_precision`'s choice) and its int8 layers if any
    (`quantization.quantize_int8`), as recorded in scores.json."""
    config = copy.deepcopy(model.generation_config)
    config.update(**overrides)
    settings: dict[str, Any] = {
        "engine": "torch",
        "quantization": INT8_DESCRIPTION if int8_linear_layers(model) else "none",
        "num_beams": config.num_beams or 1,
        "do_sample": bool(config.do_sample),
    }
    precision = decoding_precision(model.dtype, model.device, dtype, width=model.config.d_model)
    settings["dtype"] = str(precision).removeprefix("torch.")
    if precision != model.dtype:
        settings["dtype"] += f" (autocast over {str(model.dtype).removeprefix('torch.')} weights)"
    if settings["num_beams"] > 1:  # the length penalty and early stopping only act in beam search
        settings["length_penalty"] = config.length_penalty
        settings["length_penalty_type"] = getattr(model.config, "length_penalty_type", "hf")
        settings["early_stopping"] = config.early_stopping
    if config.max_new_tokens is not None:
        settings["max_new_tokens"] = config.max_new_tokens
    elif config.max_length is not None:
        settings["max_length"] = config.max_length
    elif hasattr(model.config, "max_length_offset"):
        settings["max_new_tokens"] = f"longest source in the batch + {model.config.max_length_offset}"
    return settings


def translate_and_score(
    engine: "Engine",
    sources: Sequence[str],
    references: Sequence[str],
    *,
    target_lang: str,
    references_tokenized: Sequence[str] | None = None,
    split_compounds: bool = False,
    batch_size: int | None = None,
    show_progress: bool = False,
    **generate_overrides: Any,
) -> tuple[list[str], dict]:
    """Translate `sources` with `engine` (an `engines.load_engine` engine, or `engines.TorchEngine` around a
    loaded model: its decoding settings with overrides, in its precision) and score them against references
    (`score_with_tokenizer`), with the engine's decoding record as scores["decoding"]."""
    hypotheses = engine.translate(
        sources, batch_size=batch_size, show_progress=show_progress, **generate_overrides
    )
    scores = score_with_tokenizer(
        hypotheses,
        references,
        engine.tokenizer,
        target_lang=target_lang,
        references_tokenized=references_tokenized,
        split_compounds=split_compounds,
    )
    scores["decoding"] = engine.decoding_settings(**generate_overrides)
    return hypotheses, scores


def score_with_tokenizer(
    hypotheses: Sequence[str],
    references: Sequence[str],
    tokenizer: PreTrainedTokenizerBase,
    *,
    target_lang: str,
    references_tokenized: Sequence[str] | None = None,
    split_compounds: bool = False,
) -> dict:
    """`score_translations` with the casing of the model's tokenizer.

    Both BLEU scores are case-sensitive, as published WMT results are, unless the tokenizer lowercases (as for
    Multi30k, whose published scores are lowercased): then both are lowercased.
    """
    lowercase = lowercases(tokenizer)
    return score_translations(
        hypotheses,
        references,
        target_lang=target_lang,
        references_tokenized=references_tokenized,
        tokenized_lowercase=lowercase,
        sacrebleu_lowercase=lowercase,
        split_compounds=split_compounds,
    )


def write_text_atomically(path: Path, text: str) -> None:
    """Write to a temporary name beside `path`, then rename: a failure leaves the earlier file whole."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_scores(folder: Path, hypotheses: Sequence[str], scores: dict, *, name: str = "") -> Path:
    """Write `{name}hypotheses.txt` and `{name}scores.json` into `folder`; returns the scores file."""
    write_text_atomically(folder / f"{name}hypotheses.txt", "\n".join(hypotheses) + "\n")
    path = folder / f"{name}scores.json"
    write_text_atomically(path, json.dumps(scores, indent=2) + "\n")
    return path


# An evaluation's name is part of a file name in the model folder, never a path out of it.
EVALUATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def evaluation_prefix(name: str) -> str:
    """The file-name prefix of a named evaluation: "wmt13" -> "wmt13_" (hypotheses.txt, scores.json after it).
    Raises ValueError for a name that is not a plain file-name part ("../x", "/abs", "sub/dir")."""
    if name and not EVALUATION_NAME.fullmatch(name):
        raise ValueError(
            f"--name {name!r}: use letters, digits, '.', '_' and '-' only (a name, not a path): the evaluation's "
            "files always go into the model folder."
        )
    return f"{name}_" if name else ""


def scores_file(model_dir: str | Path, name: str = "", *, overwrite: bool = False) -> Path:
    """The scores file an evaluation named `name` writes into `model_dir` (`{name}_scores.json`).

    One from an earlier evaluation (the training job's scores.json is the one the model card reports) is
    replaced only with `overwrite`: call this before loading or decoding anything.
    """
    prefix = evaluation_prefix(name)
    path = Path(model_dir) / f"{prefix}scores.json"
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} holds an earlier evaluation's scores; name this one (--name, e.g. --name wmt13: "
            f"{prefix or 'wmt13_'}scores.json) or replace it (--overwrite)."
        )
    return path


def evaluate_model(
    engine: "Engine",
    model_dir: str | Path,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    target_lang: str,
    name: str = "",
    overwrite: bool = False,
    show_progress: bool = False,
    batch_size: int | None = None,
    references_tokenized: Sequence[str] | None = None,
    split_compounds: bool = False,
    **generate_overrides: Any,
) -> dict:
    """Translate `sources` with `engine` (`engines.load_engine` of the model in `model_dir`), score them, and
    write hypotheses.txt and scores.json (with the engine's decoding record) beside the model.

    With a `name`, the files are `{name}_hypotheses.txt` and `{name}_scores.json`, so that scores on another test
    set sit beside the training job's; earlier files are replaced only with `overwrite` (`scores_file`, checked
    before decoding). `generate_overrides` change the model's decoding (num_beams, length_penalty).
    """
    scores_file(model_dir, name, overwrite=overwrite)
    hypotheses, scores = translate_and_score(
        engine,
        sources,
        references,
        target_lang=target_lang,
        references_tokenized=references_tokenized,
        split_compounds=split_compounds,
        batch_size=batch_size,
        show_progress=show_progress,
        **generate_overrides,
    )
    write_scores(Path(model_dir), hypotheses, scores, name=evaluation_prefix(name))
    return scores


def dev_metrics(tokenizer: PreTrainedTokenizerBase) -> Callable[[EvalPrediction], dict[str, float]]:
    """`compute_metrics` for greedy dev decoding during training: BLEU, and the shares of degenerate and of
    distinct translations (what `monitoring.HealthCheck` reads).

    References are the decoded labels (the tokenizer's normalised text), so this tracks progress; the reported
    scores come from `translate_and_score` on raw references.
    """
    lowercase = lowercases(tokenizer)

    def decode(ids: Any) -> list[str]:
        ids = ids.copy()
        ids[ids < 0] = tokenizer.pad_token_id
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        hypotheses, references = decode(prediction.predictions), decode(prediction.label_ids)
        degenerate, distinct = translation_shares(hypotheses)
        return {
            "bleu": sacre_bleu(hypotheses, references, lowercase=lowercase)["score"],
            "degenerate": degenerate,
            "distinct": distinct,
        }

    return compute
