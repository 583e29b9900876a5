"""Evaluation: loading a saved model for decoding, BLEU (sacreBLEU and tokenised BLEU), and scoring a model's
translations into files beside it."""

import lazy_loader

# Each name is imported from its module on first use (PEP 562), so that importing one module of the package
# does not import them all.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "bleu": ["moses_tokenize", "sacre_bleu", "tokenized_bleu"],
        "loading": [
            "check_model_name",
            "check_saved_files",
            "check_vocabulary",
            "decoding_dtype",
            "load_for_decoding",
        ],
        "scoring": [
            "Engine",
            "evaluate_model",
            "evaluation_prefix",
            "score_translations",
            "score_with_tokenizer",
            "scores_file",
            "translate_and_score",
            "write_scores",
        ],
    },
)
