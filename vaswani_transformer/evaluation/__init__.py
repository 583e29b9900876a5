"""Evaluation: loading a saved model for decoding, BLEU (sacreBLEU and tokenised BLEU), and scoring a model's
translations into files beside it."""

from .bleu import moses_tokenize, sacre_bleu, tokenized_bleu
from .loading import check_model_name, check_saved_files, check_vocabulary, decoding_dtype, load_for_decoding
from .scoring import (
    Engine,
    evaluate_model,
    evaluation_prefix,
    score_translations,
    score_with_tokenizer,
    scores_file,
    translate_and_score,
    write_scores,
)

__all__ = [
    "Engine",
    "check_model_name",
    "check_saved_files",
    "check_vocabulary",
    "decoding_dtype",
    "evaluate_model",
    "evaluation_prefix",
    "load_for_decoding",
    "moses_tokenize",
    "sacre_bleu",
    "score_translations",
    "score_with_tokenizer",
    "scores_file",
    "tokenized_bleu",
    "translate_and_score",
    "write_scores",
]
