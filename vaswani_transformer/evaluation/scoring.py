"""BLEU of a model's translations: translate with an engine, score against references, write the files.

`translate_and_score` and `evaluate_model` take any engine (`engines.load_engine`: PyTorch, ONNX Runtime,
CTranslate2) through the one interface engines implement (`decoding.engine.Engine`), and translate in buffers (`streaming`); the scores record
the engine's decoding settings.
"""

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from ..claims import claimed_output
from ..data.tokenization import lowercases
from ..decoding.engine import Engine
from ..files.partials import remove_stale_partials
from ..files.writing import check_writable, file_written_whole
from .bleu import moses_tokenize, sacre_bleu, tokenized_bleu
from .streaming import translate_in_buffers


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


def translate_and_score(
    engine: Engine,
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
    loaded model: its decoding settings with overrides, in its precision) buffer by buffer
    (`streaming.translate_in_buffers`: blank sources stay blank) and score them against references
    (`score_with_tokenizer`), with the engine's decoding record as scores["decoding"]."""
    buffers = translate_in_buffers(
        sources,
        engine,
        batch_size=batch_size,
        total=len(sources),
        show_progress=show_progress,
        **generate_overrides,
    )
    hypotheses = [hypothesis for buffer in buffers for hypothesis in buffer]
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


# How to choose another place for an evaluation's files.
EVALUATION_PLACE = "--output_dir"


def write_scores(
    folder: Path, hypotheses: Sequence[str], scores: dict, *, name: str = "", choose: str = EVALUATION_PLACE
) -> Path:
    """Write `{name}hypotheses.txt` and `{name}scores.json` into `folder`, both in full before either replaces an
    earlier one (a full disk or read-only folder: a WriteError naming the file and `choose`, the flag that picks
    another place, with neither written); returns the scores file."""
    path = folder / f"{name}scores.json"
    with file_written_whole(path, choose) as scores_file:
        scores_file.write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
        with file_written_whole(folder / f"{name}hypotheses.txt", choose) as hypotheses_file:
            hypotheses_file.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
        # the hypotheses are in place now; the scores, which stand for the evaluation, follow
    return path


# An evaluation's name is part of a file name in its --output_dir, never a path out of it: ASCII only (a name
# that stays one file name on every file system and in every shell), and never "." or ".." (its first character).
EVALUATION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def evaluation_prefix(name: str) -> str:
    """The file-name prefix of a named evaluation: "wmt13" -> "wmt13_" (hypotheses.txt, scores.json after it).
    Raises ValueError for a name that is not a plain file-name part ("../x", "/abs", "sub/dir", "..", "ü")."""
    if name and not EVALUATION_NAME.fullmatch(name):
        raise ValueError(
            f"--name {name!r}: start with an ASCII letter or digit, then use only ASCII letters, digits, '.', '_' "
            "and '-' (a name, not a path): the evaluation's files always go into --output_dir."
        )
    return f"{name}_" if name else ""


def scores_file(output_dir: str | Path, name: str = "", *, overwrite: bool = False) -> Path:
    """The scores file an evaluation named `name` writes into `output_dir` (`{name}_scores.json`).

    One from an earlier evaluation is replaced only with `overwrite`, and the folder must take files (a read-only
    or full one is a WriteError): call this before loading or decoding anything.
    """
    prefix = evaluation_prefix(name)
    path = Path(output_dir) / f"{prefix}scores.json"
    if path.exists() and not overwrite:
        raise FileExistsError(
            f"{path} holds an earlier evaluation's scores; name this one (--name, e.g. --name wmt13: "
            f"{prefix or 'wmt13_'}scores.json) or replace it (--overwrite)."
        )
    check_writable(path, EVALUATION_PLACE)
    return path


def evaluate_model(
    engine: Engine,
    output_dir: str | Path,
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
    """Translate `sources` with `engine` (`engines.load_engine` of a model), score them, and write hypotheses.txt
    and scores.json (with the engine's decoding record) into `output_dir` (made if missing).

    With a `name`, the files are `{name}_hypotheses.txt` and `{name}_scores.json`, so that scores on several test
    sets sit side by side; earlier files are replaced only with `overwrite` (`scores_file`, checked
    before decoding, holding the scores file's claim: a second evaluation of the same name stops, naming this
    one, `claims.claimed_output`). `generate_overrides` change the model's decoding (num_beams, length_penalty).
    """
    prefix, folder = evaluation_prefix(name), Path(output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with claimed_output(folder / f"{prefix}scores.json", EVALUATION_PLACE, other="--name"):
        scores_file(folder, name, overwrite=overwrite)
        remove_stale_partials(folder, f"{prefix}hypotheses.txt")
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
        write_scores(folder, hypotheses, scores, name=prefix)
    return scores
