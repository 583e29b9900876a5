"""sacreBLEU as a self-contained `evaluate` metric that loads from a local path, with no Hub access."""

import datasets
import evaluate
from sacrebleu.metrics import BLEU

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    month = oct,
    year = "2018",
    address = "Belgium, Brussels",
    publisher = "Association for Computational Linguistics",
    url = "https://www.aclweb.org/anthology/W18-6319",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus-level BLEU computed by sacreBLEU, returned with its sufficient statistics and the sacreBLEU signature
(e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0") that makes the score reproducible.
Equivalent to the Hub's "sacrebleu" metric, but shipped inside this package so `evaluate.load` works offline.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): system outputs, one string per segment.
    references (`list` of `list` of `str`, or `list` of `str`): references per prediction; every prediction
        must have the same number of references. A plain string counts as a single reference.
    tokenize (`str`): sacreBLEU tokenizer: "13a" (default, mteval-v13a), "intl", "char", "zh", "ja-mecab",
        or "none" for text that is already tokenized.
    lowercase (`bool`): case-insensitive BLEU. Defaults to `False`.
    smooth_method (`str`): "exp" (default), "none", "floor" or "add-k".
    smooth_value (`float`, optional): value for "floor" (default 0.1) or "add-k" (default 1).
    force (`bool`): silence sacreBLEU's warning about already-tokenized input. Defaults to `False`.
    use_effective_order (`bool`): ignore n-gram orders with no matches (for sentence-level use).

Returns:
    score, counts, totals, precisions, bp, sys_len, ref_len (as in sacreBLEU's BLEUScore), and
    signature (`str`): sacreBLEU's signature for these settings.

Examples:
    >>> bleu = evaluate.load("path/to/sacrebleu_offline")
    >>> result = bleu.compute(predictions=["hello there general kenobi"], references=["hello there general kenobi"])
    >>> round(result["score"], 1)
    100.0
"""


def _references_by_stream(references: list[list[str]] | list[str]) -> list[list[str]]:
    """Reference streams (one list per reference position) as sacreBLEU expects them."""
    per_prediction = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    references_per_prediction = len(per_prediction[0]) if per_prediction else 1
    if any(len(refs) != references_per_prediction for refs in per_prediction):
        raise ValueError("sacreBLEU requires the same number of references for each prediction")
    return [[refs[i] for refs in per_prediction] for i in range(references_per_prediction)]


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SacrebleuOffline(evaluate.Metric):
    """Corpus BLEU and signature from sacreBLEU."""

    def _info(self) -> evaluate.MetricInfo:
        """Metric description and the two accepted input formats."""
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            homepage="https://github.com/mjpost/sacreBLEU",
            inputs_description=_KWARGS_DESCRIPTION,
            features=[
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Sequence(
                            datasets.Value("string", id="sequence"), id="references"
                        ),
                    }
                ),
                datasets.Features(
                    {
                        "predictions": datasets.Value("string", id="sequence"),
                        "references": datasets.Value("string", id="sequence"),
                    }
                ),
            ],
            codebase_urls=["https://github.com/mjpost/sacreBLEU"],
            reference_urls=["https://github.com/mjpost/sacreBLEU", "https://aclanthology.org/W18-6319"],
        )

    def _compute(
        self,
        predictions: list[str],
        references: list[list[str]] | list[str],
        tokenize: str = "13a",
        lowercase: bool = False,
        smooth_method: str = "exp",
        smooth_value: float | None = None,
        force: bool = False,
        use_effective_order: bool = False,
    ) -> dict:
        """Corpus BLEU of the predictions against the references, with sacreBLEU's signature."""
        bleu = BLEU(
            lowercase=lowercase,
            force=force,
            tokenize=tokenize,
            smooth_method=smooth_method,
            smooth_value=smooth_value,
            effective_order=use_effective_order,
        )
        output = bleu.corpus_score(predictions, _references_by_stream(references))
        return {
            "score": output.score,
            "counts": output.counts,
            "totals": output.totals,
            "precisions": output.precisions,
            "bp": output.bp,
            "sys_len": output.sys_len,
            "ref_len": output.ref_len,
            "signature": str(bleu.get_signature()),
        }
