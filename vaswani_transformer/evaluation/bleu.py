"""BLEU scoring: detokenised sacreBLEU, and tokenised BLEU comparable to published Multi30k / WMT14 scores."""

import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sacremoses import MosesPunctNormalizer, MosesTokenizer

if TYPE_CHECKING:
    import evaluate

SACREBLEU_METRIC_PATH: str = str(
    Path(__file__).resolve().parent / "metrics" / "sacrebleu_offline" / "sacrebleu_offline.py"
)

_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")


def load_bleu_metric(**load_kwargs: Any) -> "evaluate.EvaluationModule":
    """The packaged sacreBLEU `evaluate` metric (loads offline); kwargs go to `evaluate.load`."""
    import evaluate  # deferred: importing evaluate takes seconds (it pulls in transformers pipelines)

    return evaluate.load(SACREBLEU_METRIC_PATH, **load_kwargs)


@functools.cache
def _bleu_metric() -> "evaluate.EvaluationModule":
    """The packaged metric, loaded once per process; it keeps what it scores in memory (by default `evaluate`
    writes every prediction to an Arrow file in HF_HOME first: a full or read-only HF_HOME would end an
    evaluation after all its decoding)."""
    return load_bleu_metric(keep_in_memory=True)


def _check_parallel(hypotheses: list[str], references: list[str]) -> None:
    """Raise if hypotheses and references are not line-aligned, or there is nothing to score (BLEU of no
    sentences is undefined; sacreBLEU would fail on it with an IndexError)."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("no sentences to score: BLEU needs at least one hypothesis and its reference")


def _corpus_bleu(hypotheses: list[str], references: list[str], **bleu_options: Any) -> dict:
    """sacreBLEU corpus score of single-reference hypotheses through the packaged `evaluate` metric."""
    _check_parallel(hypotheses, references)
    return _bleu_metric().compute(predictions=hypotheses, references=references, **bleu_options)


def sacre_bleu(hypotheses: list[str], references: list[str], *, lowercase: bool = False) -> dict:
    """Detokenised sacreBLEU (13a tokenizer, exp smoothing) of hypotheses against one reference each."""
    return _corpus_bleu(hypotheses, references, tokenize="13a", lowercase=lowercase)


def moses_tokenize(lines: list[str], lang: str, *, lowercase: bool = True) -> list[str]:
    """Multi30k's official preprocessing: lowercase, Moses normalize-punctuation, Moses tokenizer."""
    normalizer = MosesPunctNormalizer(lang=lang)
    tokenizer = MosesTokenizer(lang=lang)
    cased = [line.lower() for line in lines] if lowercase else lines
    # "\n" mirrors Perl's line input, which normalize-punctuation's end-of-sentence rule matches against.
    return [tokenizer.tokenize(normalizer.normalize(line + "\n"), return_str=True) for line in cased]


def split_compound_hyphens(line: str) -> str:
    """The "##AT##" compound splitting of tensor2tensor's get_ende_bleu.sh: a-b -> a ##AT##-##AT## b."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", line)


def tokenized_bleu(
    hypotheses: list[str],
    references_tokenized: list[str],
    *,
    lang: str,
    hypotheses_tokenized: bool = False,
    lowercase: bool = True,
    split_compounds: bool = False,
) -> dict:
    """multi-bleu.perl BLEU (no smoothing) on Moses-tokenised text (lowercase: Multi30k; cased: WMT14)."""
    if not hypotheses_tokenized:
        hypotheses = moses_tokenize(hypotheses, lang, lowercase=lowercase)
    if split_compounds:
        hypotheses = [split_compound_hyphens(line) for line in hypotheses]
        references_tokenized = [split_compound_hyphens(line) for line in references_tokenized]
    options = {"tokenize": "none", "force": True, "lowercase": lowercase, "smooth_method": "none"}
    return _corpus_bleu(hypotheses, references_tokenized, **options)
