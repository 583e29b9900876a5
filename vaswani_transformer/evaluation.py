"""Decoding with the paper's settings (§6.1) and BLEU scoring of a saved model."""

import json
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .bleu import moses_tokenize, sacre_bleu, tokenized_bleu
from .translate import translate

# §6.1: beam search with a beam size of 4 and length penalty α = 0.6; output limit = input length + 50
# (the model's `max_length_offset`).
PAPER_NUM_BEAMS = 4
PAPER_LENGTH_PENALTY = 0.6


def score_translations(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    target_lang: str,
    references_tokenized: Sequence[str] | None = None,
    tokenized_lowercase: bool = True,
    split_compounds: bool = False,
) -> dict:
    """sacreBLEU on detokenised text, and tokenised BLEU comparable to published numbers.

    Tokenised BLEU is against `references_tokenized` when given (e.g. Multi30k's official lc.norm.tok files),
    otherwise against the references run through the same Moses pipeline as the hypotheses.
    """
    hypotheses, references = list(hypotheses), list(references)
    if references_tokenized is None:
        references_tokenized = moses_tokenize(references, target_lang, lowercase=tokenized_lowercase)
    return {
        "sacrebleu": sacre_bleu(hypotheses, references),
        "tokenized_bleu": tokenized_bleu(
            hypotheses,
            list(references_tokenized),
            lang=target_lang,
            lowercase=tokenized_lowercase,
            split_compounds=split_compounds,
        ),
        "num_sentences": len(hypotheses),
    }


def load_for_decoding(model_dir: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A saved model (on the GPU when there is one) and its tokenizer, loaded the way a user loads them."""
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    if torch.cuda.is_available():
        model = model.to("cuda")
    return model, AutoTokenizer.from_pretrained(model_dir)


def evaluate_model(
    model_dir: str | Path,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    target_lang: str,
    references_tokenized: Sequence[str] | None = None,
    tokenized_lowercase: bool = True,
    split_compounds: bool = False,
    batch_size: int = 128,
    num_beams: int = PAPER_NUM_BEAMS,
    length_penalty: float = PAPER_LENGTH_PENALTY,
    show_progress: bool = False,
) -> dict:
    """Translate `sources` with a saved model, score them, and write hypotheses.txt and scores.json beside it."""
    model_dir = Path(model_dir)
    model, tokenizer = load_for_decoding(model_dir)
    hypotheses = translate(
        sources,
        model,
        tokenizer,
        batch_size=batch_size,
        show_progress=show_progress,
        num_beams=num_beams,
        # length_penalty only applies to beam search; transformers warns when it is given for greedy decoding
        **({"length_penalty": length_penalty} if num_beams > 1 else {}),
    )
    scores = score_translations(
        hypotheses,
        references,
        target_lang=target_lang,
        references_tokenized=references_tokenized,
        tokenized_lowercase=tokenized_lowercase,
        split_compounds=split_compounds,
    )
    scores["decoding"] = {
        "num_beams": num_beams,
        "length_penalty": length_penalty,
        "length_penalty_type": model.config.length_penalty_type,
        "max_length_offset": model.config.max_length_offset,
    }
    (model_dir / "hypotheses.txt").write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    (model_dir / "scores.json").write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    return scores
