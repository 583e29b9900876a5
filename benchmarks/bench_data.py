"""Preparing a large corpus for training: per-phase seconds and peak memory, first time and from the cache.

Builds N En–De pairs of news-like length from the embedded Tatoeba corpus (seeded: four random Tatoeba pairs
joined into one line, ~29 words), then runs the job's preparation (`experiment.prepare_training_data`: read, content
digest, joint BPE on a `--bpe_max_pairs` sample, tokenising) twice: into an empty data cache, and again as a new
run folder would (cache hit). The peer, in the same run: the joint BPE trained on every pair, as before the sample.

    python benchmarks/bench_data.py --pairs 1000000
"""

import argparse
import logging
import resource
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from vaswani_transformer.data import load_tatoeba, load_text_pair
from vaswani_transformer.experiment import TrainOptions, prepare_training_data
from vaswani_transformer.prepared import texts_for_bpe
from vaswani_transformer.tokenization import train_bpe

SENTENCES_PER_LINE = 4
T = TypeVar("T")


def build_corpus(folder: Path, pairs: int, seed: int) -> tuple[Path, Path]:
    """`pairs` lines of SENTENCES_PER_LINE random Tatoeba pairs each, source and target files."""
    tatoeba = load_tatoeba()[0]
    sources, targets = np.array(tatoeba["source"], dtype=object), np.array(tatoeba["target"], dtype=object)
    picks = np.random.default_rng(seed).integers(0, len(sources), size=(pairs, SENTENCES_PER_LINE))
    paths = folder / "train.en", folder / "train.de"
    for path, texts in zip(paths, (sources, targets), strict=True):
        with path.open("w", encoding="utf-8") as file:
            for start in range(0, pairs, 100_000):
                rows = texts[picks[start : start + 100_000]]
                file.write("".join(" ".join(row) + "\n" for row in rows))
    return paths


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def timed(label: str, results: dict[str, float], work: Callable[[], T]) -> T:
    started = time.perf_counter()
    value = work()
    results[label] = time.perf_counter() - started
    print(f"  {label:<34} {results[label]:8.1f} s   peak RSS {peak_rss_gb():5.2f} GB", flush=True)
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pairs", type=int, default=200_000, help="corpus size in pairs (200,000)")
    parser.add_argument("--vocab_size", type=int, default=37_000, help="joint BPE size (the paper's 37,000)")
    parser.add_argument(
        "--bpe_max_pairs", type=int, default=1_000_000, help="the job's BPE sample (1,000,000)"
    )
    parser.add_argument(
        "--workdir", type=Path, help="folder for the corpus and cache (default: a temporary one)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="      %(message)s")  # the preparation's own phase times
    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
        root = Path(scratch)
        source, target = build_corpus(root, args.pairs, seed=0)
        size = (source.stat().st_size + target.stat().st_size) / 1e6
        print(f"{args.pairs:,} pairs, {size:,.0f} MB of text; joint BPE {args.vocab_size:,}")
        results: dict[str, float] = {}
        train = timed("read", results, lambda: load_text_pair(source, target)[0])
        for run in ("first run (empty cache)", "new run folder (cache hit)"):
            print(run)
            options = TrainOptions(
                train_source=str(source), train_target=str(target), test_source=str(source),
                test_target=str(target), vocab_size=args.vocab_size,
                bpe_max_pairs=args.bpe_max_pairs, data_cache=root / "cache", output_dir=root / run.split()[0],
            )  # fmt: skip
            timed(
                f"prepare: {run.split()[0]}",
                results,
                lambda options=options: prepare_training_data(options, train),
            )
        print("peer: the joint BPE on every pair (before the sample)")
        timed("BPE, all pairs", results, lambda: train_bpe(texts_for_bpe(train), args.vocab_size))
        print(
            f"first preparation {results['prepare: first']:.1f} s, from the cache {results['prepare: new']:.1f} s "
            f"({results['prepare: first'] / results['prepare: new']:.0f}x)"
        )


if __name__ == "__main__":
    main()
