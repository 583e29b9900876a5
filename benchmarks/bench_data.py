"""Preparing a large corpus for training: per-phase seconds and peak memory, first time and from the cache.

Builds N En–De pairs of news-like length from the embedded Tatoeba corpus (seeded: four random Tatoeba pairs
joined into one line, ~29 words), then starts training as the job does, up to its first padded batch (read,
content digest, joint BPE on a `--bpe_max_pairs` sample, tokenising into memory-mapped token files, the first
epoch's batches), each time in a new interpreter so that each reports its own peak memory: into an empty data
cache, again as a new run folder would (cache hit), and as two processes of a distributed run at once. The peer,
in the same run: the joint BPE trained on every pair, as before the sample.

    python benchmarks/bench_data.py --pairs 1000000
"""

import argparse
import logging
import multiprocessing
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np

from vaswani_transformer.data import TokenBudgetBatchSampler, load_tatoeba, load_text_pair
from vaswani_transformer.data.prepared import texts_for_bpe
from vaswani_transformer.data.token_arrays import PaddedPairBatches
from vaswani_transformer.data.tokenization import train_bpe
from vaswani_transformer.training import TrainOptions, data_cache_folder, prepare_training_data

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


def memory_gb() -> dict[str, float]:
    """This process's peak resident memory, and what is resident now: private (anonymous) and mapped from files
    (shared between processes that map the same file)."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    kilobytes = {name: int(status[name].split()[0]) for name in ("VmHWM", "RssAnon", "RssFile")}
    return {name: value / 1e6 for name, value in kilobytes.items()}


class PrivatePeak:
    """The highest private (anonymous) resident memory seen while it runs, sampled every 20 ms: the kernel keeps
    the peak of all resident memory only, which counts the mapped corpus's pages as well."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, memory_gb()["RssAnon"])

    def __enter__(self) -> "PrivatePeak":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, memory_gb()["RssAnon"])


def disk_gb(cache: Path) -> dict[str, float]:
    """The data cache's size on disk per kind of prepared folder (text, bpe, tokenized)."""
    sizes: dict[str, float] = {}
    for folder in (path for path in cache.iterdir() if path.is_dir()):
        kind = folder.name.split("-")[0]
        files = (path.stat().st_size for path in folder.rglob("*") if path.is_file())
        sizes[f"{kind} GB"] = sizes.get(f"{kind} GB", 0.0) + sum(files) / 1e9
    return sizes


def start_training(options: TrainOptions) -> dict[str, float]:
    """What a run does before its first update, timed: read the corpus (or map it, read before), prepare it (or
    find it prepared), map the token files, build the first epoch's batches and pad the first batch."""
    logging.basicConfig(level=logging.INFO, format="      %(message)s")  # the preparation's own phase times
    with PrivatePeak() as private:
        started = time.perf_counter()
        train = load_text_pair(options.train_source, options.train_target, data_cache_folder(options))[0]
        read = time.perf_counter()
        tokenizer, pairs, _ = prepare_training_data(options, train)
        del train  # what the job keeps of the text: nothing
        prepared = time.perf_counter()
        batches = PaddedPairBatches(pairs, tokenizer.pad_token_id)
        sampler = TokenBudgetBatchSampler(pairs.source_lengths, pairs.target_lengths, 25_000, seed=0)
        batches.__getitems__(next(iter(sampler)))
        first_batch = time.perf_counter()
    return {
        "read s": read - started,
        "prepare s": prepared - read,
        "to first batch s": first_batch - started,
        **memory_gb(),
        "private peak": private.peak,
    }


def in_fresh_processes(work: Callable[[TrainOptions], T], options: list[TrainOptions]) -> list[T]:
    """`work(options)` for each of `options`, at the same time, each in a new interpreter (its own peak memory)."""
    with ProcessPoolExecutor(len(options), mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(work, options))


def bpe_on_every_pair(options: TrainOptions) -> dict[str, float]:
    """The peer: the joint BPE trained on every pair, as before the sample."""
    train = load_text_pair(options.train_source, options.train_target)[0]
    started = time.perf_counter()
    train_bpe(texts_for_bpe(train), options.vocab_size)
    return {"BPE s": time.perf_counter() - started, **memory_gb()}


def show(label: str, figures: dict[str, float]) -> None:
    print(
        f"  {label:<30} " + "  ".join(f"{name} {value:7.2f}" for name, value in figures.items()), flush=True
    )


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
    parser.add_argument("--no_peer", action="store_true", help="skip the peer (BPE on every pair)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as scratch:
        root = Path(scratch)
        source, target = build_corpus(root, args.pairs, seed=0)
        size = (source.stat().st_size + target.stat().st_size) / 1e6
        print(f"{args.pairs:,} pairs, {size:,.0f} MB of text; joint BPE {args.vocab_size:,}")
        print(
            "memory in GB: VmHWM peak resident, RssAnon private and RssFile mapped from files (shared) at the "
            "first batch, private peak"
        )

        def run(name: str) -> TrainOptions:
            return TrainOptions(
                train_source=str(source), train_target=str(target), test_source=str(source),
                test_target=str(target), vocab_size=args.vocab_size,
                bpe_max_pairs=args.bpe_max_pairs, data_cache=root / "cache", output_dir=root / name,
            )  # fmt: skip

        first = in_fresh_processes(start_training, [run("first")])[0]
        show("first run (empty cache)", first)
        show("data cache on disk", disk_gb(root / "cache"))
        hit = in_fresh_processes(start_training, [run("second")])[0]
        show("new run folder (cache hit)", hit)
        for rank, figures in enumerate(in_fresh_processes(start_training, [run("rank0"), run("rank1")])):
            show(f"2 processes at once: {rank}", figures)
        print(
            f"first preparation {first['to first batch s']:.1f} s, to the first batch from the cache "
            f"{hit['to first batch s']:.1f} s ({first['to first batch s'] / hit['to first batch s']:.0f}x)"
        )
        if not args.no_peer:
            peer = in_fresh_processes(bpe_on_every_pair, [run("peer")])[0]
            show("peer: BPE on every pair", peer)
            print(f"BPE on every pair {peer['BPE s']:.1f} s")


if __name__ == "__main__":
    main()
