"""The job's data: the corpora its options name, read and checked, and the training pairs prepared once.

`load_corpora` gives the training, dev and test pairs (given files, TSV files or Hub ids, or the embedded Tatoeba
corpus with fixed held-out splits); `prepare_training_data` gives the joint BPE vocabulary and the tokenised
training pairs from the data cache, making them there the first time (`data.prepared`). Every problem found
here is an error naming its flag, before any training.
"""

import contextlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import datasets
from datasets import Dataset
from transformers import PreTrainedTokenizerBase

from ..data.corpora import (
    TSV_SUFFIXES,
    LoadStats,
    load_parallel,
    load_tatoeba,
    train_test_split_fixed,
)
from ..data.prepared import (
    bpe_sample,
    content_digest,
    default_data_cache,
    prepared_entry,
    prepared_folder,
    texts_for_bpe,
)
from ..data.token_arrays import FilterStats, TokenizedPairs, write_tokenized
from ..data.tokenization import load_tokenizer, train_bpe
from ..files.paths import check_apart, check_cache_folder, is_local_path
from ..files.reading import read_text_lines
from ..files.writing import check_writable, folder_written_whole, write_failures_named
from .options import PATH_FIELDS, TrainOptions
from .run_folder import OPTIONS_FILE

logger = logging.getLogger(__name__)


class CorpusError(ValueError):
    """A corpus that cannot be used, found while loading it: before any training."""


@dataclass
class Corpora:
    """Training, dev (optional) and test pairs as "source"/"target" Datasets."""

    train: Dataset
    dev: Dataset | None
    test: Dataset
    test_references_tokenized: list[str] | None = None


def _check_text_pairs(options: TrainOptions) -> None:
    """A plain-text source file needs its target file (only TSV files and Hub datasets hold both sides)."""
    for side in ("train", "dev", "test"):
        source, target = getattr(options, f"{side}_source"), getattr(options, f"{side}_target")
        path = Path(source).expanduser() if source is not None else None
        if path is not None and target is None and path.is_file() and not source.endswith(TSV_SUFFIXES):
            raise ValueError(
                f"--{side}_source {source} is a text file: give its line-aligned --{side}_target too "
                f"(only {', '.join(TSV_SUFFIXES)} files hold both sides)."
            )


def check_data_inputs(options: TrainOptions) -> None:
    """What preparing the data needs: the corpus files and a data cache folder."""
    for name in PATH_FIELDS:
        value = getattr(options, name)
        if value is not None and is_local_path(value) and not Path(value).expanduser().exists():
            hint = " (recipe paths start at --data_dir)" if options.recipe else ""
            raise FileNotFoundError(f"--{name} {value}: no such file{hint}.")
        if value is not None and Path(value).expanduser().is_dir():
            raise ValueError(f"--{name} {value} is a folder: give the file inside it.")
    _check_text_pairs(options)
    _check_data_cache(options)
    check_apart("--data_cache", data_cache_folder(options), corpus_files(options))


def corpus_files(options: TrainOptions) -> dict[str, Path]:
    """The job's corpus files on this machine (not Hub datasets), by the name an error gives them."""
    return {
        f"the --{name} file": Path(value)
        for name in PATH_FIELDS
        if (value := getattr(options, name)) is not None and is_local_path(value)
    }


def _check_data_cache(options: TrainOptions) -> None:
    """The data cache is a folder, or can be made as one, and can be written (as can `datasets`' own cache when
    a corpus is a Hub dataset): a read-only or full place is found before any reading."""
    cache = data_cache_folder(options)
    check_cache_folder("--data_cache", cache)
    check_writable(cache, data_cache_flag(options))
    if any(_read_by_datasets(options, side) for side in ("train", "dev", "test")):
        check_writable(Path(datasets.config.HF_DATASETS_CACHE), DATASETS_CACHE_SETTING)


def data_cache_flag(options: TrainOptions) -> str:
    """How to choose another data cache, for messages: the flag, or (for the default) HF_HOME too."""
    return "--data_cache" if options.data_cache is not None else "--data_cache (or HF_HOME)"


DATASETS_CACHE_SETTING = "HF_HOME (or HF_DATASETS_CACHE)"  # where `datasets` caches Hub datasets


def _read_by_datasets(options: TrainOptions, side: str) -> bool:
    """Whether a corpus is a Hub dataset, which `datasets` reads through its own cache (a local folder is refused
    by `check_data_inputs`)."""
    source, target = getattr(options, f"{side}_source"), getattr(options, f"{side}_target")
    if source is None or target is not None or source.endswith(TSV_SUFFIXES):
        return False
    return not is_local_path(source)


def _written_while_loading(options: TrainOptions, side: str) -> tuple[Path, str]:
    """Where loading a corpus writes, and how to choose another place: `datasets`' cache for a Hub dataset,
    the data cache for files."""
    if _read_by_datasets(options, side):
        return Path(datasets.config.HF_DATASETS_CACHE), DATASETS_CACHE_SETTING
    return data_cache_folder(options), data_cache_flag(options)


def _log_loaded(stats: LoadStats, split: str) -> None:
    logger.info(f"{split}: {stats.summary()}")


def _load_pairs(
    options: TrainOptions, source: str, target: str | None, split: str
) -> tuple[Dataset, LoadStats]:
    """One corpus, its load summary logged; a corpus that cannot be read as pairs or has no usable pair is an
    error naming its flag."""
    flag = {"train": "train_source", "validation": "dev_source", "test": "test_source"}[split]
    try:
        with write_failures_named(*_written_while_loading(options, flag.removesuffix("_source"))):
            pairs, stats = load_parallel(
                source,
                target,
                source_lang=options.source_lang,
                target_lang=options.target_lang,
                split=split,
                hub_config=options.hub_config,
                cache=data_cache_folder(options) if split == "train" else None,  # the big one, read once
            )
    except ValueError as error:  # e.g. a text pair whose line counts differ
        raise CorpusError(f"--{flag} {source}: {error}") from None
    _log_loaded(stats, split)
    if len(pairs) == 0:
        raise CorpusError(
            f"--{flag} {source}: no usable pairs ({stats.summary()}). Expected a source file with a line-aligned "
            "target file, or a TSV file of source<TAB>target lines."
        )
    return pairs, stats


def _tokenized_references(path: str, test: LoadStats) -> list[str]:
    """The tokenised test references, which must line up with the test pairs as read."""
    try:
        references = read_text_lines(path)
    except ValueError as error:  # not UTF-8
        raise CorpusError(f"--test_references_tokenized: {error}") from None
    if len(references) != test.read:
        raise CorpusError(
            f"--test_references_tokenized {path} has {len(references):,} lines but the test set has "
            f"{test.read:,}: they must be line-aligned."
        )
    if test.kept != test.read:
        raise CorpusError(
            f"{test.summary()}: with test pairs skipped, --test_references_tokenized {path} no longer lines up. "
            "Remove the bad lines from the test files and the tokenised references alike."
        )
    return references


def _first(pairs: Dataset, count: int | None) -> Dataset:
    """The first `count` pairs (all when `count` is None)."""
    return pairs if count is None else pairs.select(range(min(len(pairs), count)))


def load_corpora(options: TrainOptions) -> Corpora:
    """The job's pairs: given files / Hub ids, or the embedded Tatoeba corpus with fixed held-out splits."""
    references = None
    if options.train_source is None:
        pairs, stats = load_tatoeba()
        _log_loaded(stats, "embedded Tatoeba")
        split = train_test_split_fixed(pairs, options.test_size, seed=options.seed)
        train, test = split["train"], split["test"]
    else:
        train = _load_pairs(options, options.train_source, options.train_target, "train")[0]
        test, test_stats = _load_pairs(options, options.test_source, options.test_target, "test")
        if options.test_references_tokenized is not None:
            references = _tokenized_references(options.test_references_tokenized, test_stats)
    dev = None
    if options.dev_source is not None:
        dev = _load_pairs(options, options.dev_source, options.dev_target, "validation")[0]
    elif options.dev_size:
        if options.dev_size >= len(train):
            raise CorpusError(
                f"--dev_size {options.dev_size} leaves no training pairs ({len(train):,} loaded)."
            )
        split = train_test_split_fixed(train, options.dev_size, seed=options.seed)
        if len(split["test"]) == 0:
            raise CorpusError(
                f"--dev_size {options.dev_size} holds out no pairs: a source sentence's pairs stay in one split (so "
                f"that dev measures unseen sentences), and each of the corpus's {len(set(train['source'])):,} "
                f"distinct source sentence(s) has more than {options.dev_size} pairs. Give a larger --dev_size, a "
                "dev set of its own (--dev_source/--dev_target), or --dev_size 0."
            )
        train, dev = split["train"], split["test"]
    test = _first(test, options.max_test_sentences)
    dev = _first(dev, options.max_dev_sentences) if dev is not None else None
    logger.info(
        f"pairs: {len(train):,} train, {len(dev) if dev is not None else 0:,} dev, {len(test):,} test"
    )
    return Corpora(train, dev, test, references[: len(test)] if references is not None else None)


def prepare_training_data(
    options: TrainOptions,
    train: Dataset,
    is_main_process: bool = True,
    in_turn: Callable[[str], contextlib.AbstractContextManager] | None = None,
    for_run: bool = True,
) -> tuple[PreTrainedTokenizerBase, TokenizedPairs, FilterStats]:
    """The joint BPE vocabulary, the tokenised training pairs and what filtering dropped: from the data cache, or
    made into it (`prepared`). `in_turn(step)` orders the processes of a distributed run (main process first).
    For a run (`for_run`), the vocabulary is also the run folder's (`--output_dir`/tokenizer)."""
    in_turn = in_turn or (lambda step: contextlib.nullcontext())
    corpus_digest = content_digest(train)  # names the prepared data in the cache
    # what the cache's builds write is removed when they fail (`prepared.build_once`); here it is said where
    with write_failures_named(data_cache_folder(options), data_cache_flag(options)):
        with in_turn("joint BPE vocabulary"):
            tokenizer = _tokenizer_for(options, train, is_main_process, corpus_digest, for_run)
        with in_turn("tokenising"):
            tokenized, filter_stats = _tokenized_training_set(options, train, tokenizer, corpus_digest)
    return tokenizer, tokenized, filter_stats


def data_cache_folder(options: TrainOptions) -> Path:
    """--data_cache, or its default (HF_HOME/vaswani_transformer/prepared)."""
    return options.data_cache if options.data_cache is not None else default_data_cache()


def _tokenizer_for(
    options: TrainOptions, train: Dataset, is_main_process: bool, corpus_digest: str, for_run: bool = True
) -> PreTrainedTokenizerBase:
    """The joint BPE vocabulary of both sides of the training pairs (`bpe_sample` of them), trained once per
    corpus content and settings into the data cache, and (`for_run`) copied into the run folder by the main
    process.

    Other processes (and `--resume` of a run with its record) load the run folder's, so every rank shares one
    vocabulary.
    """
    tokenizer_dir = options.output_dir / "tokenizer"
    # a run resumes with its vocabulary once its record (checked against these options) says what made it
    recorded = options.resume and (options.output_dir / OPTIONS_FILE).is_file()
    if for_run and tokenizer_dir.is_dir() and (recorded or not is_main_process):
        return load_tokenizer(str(tokenizer_dir))
    settings = (corpus_digest, options.vocab_size, options.lowercase, options.bpe_max_pairs, options.seed)
    prepared = prepared_folder(data_cache_folder(options), "bpe", *settings)
    build = partial(_train_bpe_into, options=options, train=train)
    if prepared_entry(prepared, build, options.verify_cache)[1]:
        logger.info(f"joint BPE: reused {prepared}")
    tokenizer = load_tokenizer(str(prepared))
    if for_run:
        with folder_written_whole(tokenizer_dir, "--output_dir") as temporary:
            tokenizer.save_pretrained(temporary)
    if len(tokenizer) > options.vocab_size:
        logger.warning(
            f"warning: --vocab_size {options.vocab_size:,} is below the corpus's characters and special tokens: "
            f"the vocabulary has {len(tokenizer):,} tokens, none of them merges."
        )
    elif len(tokenizer) < options.vocab_size:
        logger.warning(
            f"warning: the corpus gave {len(tokenizer):,} tokens, fewer than --vocab_size {options.vocab_size:,} "
            "(no more pairs occur twice): the model's vocabulary has that size."
        )
    return tokenizer


def _train_bpe_into(folder: Path, options: TrainOptions, train: Dataset) -> None:
    started = time.perf_counter()
    sample = bpe_sample(train, options.bpe_max_pairs, options.seed)
    tokenizer = train_bpe(texts_for_bpe(sample), options.vocab_size, lowercase=options.lowercase)
    tokenizer.save_pretrained(folder)
    logger.info(
        f"joint BPE: {len(tokenizer):,} tokens from {len(sample):,} of {len(train):,} pairs in "
        f"{time.perf_counter() - started:.1f} s"
    )


def _tokenized_training_set(
    options: TrainOptions, train: Dataset, tokenizer: PreTrainedTokenizerBase, corpus_digest: str
) -> tuple[TokenizedPairs, FilterStats]:
    """The pairs tokenised once per corpus content, vocabulary and length limit into the data cache
    (`token_arrays.write_tokenized`), memory-mapped from there."""
    settings = (corpus_digest, tokenizer.backend_tokenizer.to_str(), options.max_length)
    prepared = prepared_folder(data_cache_folder(options), "tokenized", *settings)
    build = partial(_tokenize_into, options=options, train=train, tokenizer=tokenizer)
    if prepared_entry(prepared, build, options.verify_cache)[1]:
        logger.info(f"tokenised pairs: reused {prepared}")
    stats = FilterStats(**json.loads((prepared / "filter_stats.json").read_text()))
    return TokenizedPairs.load(prepared), stats


def _tokenize_into(
    folder: Path, options: TrainOptions, train: Dataset, tokenizer: PreTrainedTokenizerBase
) -> None:
    started = time.perf_counter()
    stats = write_tokenized(train, tokenizer, folder, options.max_length)
    logger.info(f"tokenised {len(train):,} pairs in {time.perf_counter() - started:.1f} s")
    if stats.kept == 0:
        raise CorpusError(f"no training pair is left ({stats.summary()}): raise --max_length.")
    (folder / "filter_stats.json").write_text(json.dumps(asdict(stats)))
