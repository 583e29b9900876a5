"""Training data: reading corpora, the prepared-data cache, the joint BPE, tokenised pairs and §5.1 batches.

- `corpora`: text pairs, TSV files, Hub datasets and the embedded Tatoeba corpus as "source"/"target" Datasets;
- `prepared`: the cache of data prepared once (corpora as read, BPE, tokenised pairs), named by content;
- `tokenization`: the joint BPE vocabulary (§5.1) as a fast tokenizer;
- `token_arrays`: the one tokenisation path, flat token arrays and padded batches;
- `batching`: token-budget batches of sentences of similar length.
"""

from .batching import TokenBudgetBatchSampler
from .corpora import (
    PAIR_FEATURES,
    TATOEBA_DIR,
    TATOEBA_FILE,
    TSV_SUFFIXES,
    LoadStats,
    load_hub,
    load_parallel,
    load_tatoeba,
    load_text_pair,
    load_tsv,
    train_test_split_fixed,
    translation_to_parallel,
)
from .token_arrays import (
    TOKENIZED_FEATURES,
    FilterStats,
    TokenizedPairs,
    dropped_pairs,
    tokenize_pairs,
    tokenize_parallel,
)
from .tokenization import load_tokenizer, lowercases, train_bpe

__all__ = [
    "PAIR_FEATURES",
    "TATOEBA_DIR",
    "TATOEBA_FILE",
    "TOKENIZED_FEATURES",
    "TSV_SUFFIXES",
    "FilterStats",
    "LoadStats",
    "TokenBudgetBatchSampler",
    "TokenizedPairs",
    "dropped_pairs",
    "load_hub",
    "load_parallel",
    "load_tatoeba",
    "load_text_pair",
    "load_tokenizer",
    "load_tsv",
    "lowercases",
    "tokenize_pairs",
    "tokenize_parallel",
    "train_bpe",
    "train_test_split_fixed",
    "translation_to_parallel",
]
