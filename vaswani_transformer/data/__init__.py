"""Training data: reading corpora, the prepared-data cache, the joint BPE, tokenised pairs and §5.1 batches.

- `corpora`: text pairs, TSV files, Hub datasets and the embedded Tatoeba corpus as "source"/"target" Datasets;
- `prepared`: the cache of data prepared once (corpora as read, BPE, tokenised pairs), named by content;
- `tokenization`: the joint BPE vocabulary (§5.1) as a fast tokenizer;
- `token_arrays`: the one tokenisation path, flat token arrays and padded batches;
- `batching`: token-budget batches of sentences of similar length.
"""

import lazy_loader

# Each name is imported from its module on first use (PEP 562), so that importing one module of the package
# does not import them all.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "batching": ["TokenBudgetBatchSampler"],
        "corpora": [
            "LoadStats",
            "PAIR_FEATURES",
            "TATOEBA_DIR",
            "TATOEBA_FILE",
            "TSV_SUFFIXES",
            "load_hub",
            "load_parallel",
            "load_tatoeba",
            "load_text_pair",
            "load_tsv",
            "train_test_split_fixed",
            "translation_to_parallel",
        ],
        "token_arrays": [
            "FilterStats",
            "TOKENIZED_FEATURES",
            "TokenizedPairs",
            "dropped_pairs",
            "tokenize_pairs",
            "tokenize_parallel",
        ],
        "tokenization": ["load_tokenizer", "lowercases", "train_bpe"],
    },
)
