r"""Prepare a training corpus once, before any training: read it, train the joint BPE and tokenise the pairs into
the data cache (--data_cache, default HF_HOME/vaswani_transformer/prepared), where every later `vaswani-train`
with the same data and settings finds them, in any run folder, on any process sharing the cache.

Takes vaswani-train's flags and recipes; those of the data count (the corpus, splits, --vocab_size, --lowercase,
--bpe_max_pairs, --max_length, --seed), the others are accepted and change nothing here. Nothing is written to
--output_dir.

    vaswani-prepare --recipe multi30k
    vaswani-prepare --train_source train.en --train_target train.de --test_source test.en --test_target test.de

Exit status: 0 when prepared (or found prepared), 2 for bad options or inputs, or a data cache that cannot be
written (read-only, or full: what was half-written is removed, and the message names the path).
"""

import sys
from collections.abc import Sequence

from ..files.writing import WriteError
from .command import log_to_stderr
from .train import parse_options


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, read, prepare, say where; returns the exit status."""
    log_to_stderr()
    try:
        options = parse_options(argv, prog="vaswani-prepare", description=__doc__)
    except (ValueError, FileNotFoundError, WriteError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    from ..training.job_data import check_data_inputs, data_cache_folder, load_corpora, prepare_training_data

    try:
        check_data_inputs(options)
        corpora = load_corpora(options)
        tokenizer, tokenized, stats = prepare_training_data(options, corpora.train, for_run=False)
    except (ValueError, FileNotFoundError, WriteError) as error:  # CorpusError, CacheError are ValueErrors
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(
        f"prepared in {data_cache_folder(options)}: joint BPE of {len(tokenizer):,} tokens; {stats.summary()}"
    )
    return 0
