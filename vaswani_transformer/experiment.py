"""The end-to-end job: corpora → joint BPE → training with the paper's recipe → final model → BLEU → examples.

`TrainOptions` holds every setting of the job under one name: its field, its command-line flag (`--max_steps`,
also `--max-steps`) and its key in a recipe file (`recipes/*.yaml`). The field defaults are the paper's base
model on WMT14 (§5); a recipe replaces those defaults for one job, and flags override the recipe.
"""

import contextlib
import difflib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Literal

import torch
import transformers
from datasets import Dataset
from filelock import FileLock, Timeout
from huggingface_hub import get_token
from huggingface_hub.errors import StrictDataclassError
from huggingface_hub.utils import validate_repo_id
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)
from transformers.integrations import is_tensorboard_available

from .checkpoints import average_checkpoints, whole_checkpoints
from .configuration_vaswani_transformer import PRESETS, VaswaniTransformerConfig
from .data import (
    TSV_SUFFIXES,
    FilterStats,
    LoadStats,
    load_parallel,
    load_tatoeba,
    read_text_lines,
    tokenize_parallel,
    train_test_split_fixed,
)
from .engines import TorchEngine
from .evaluation import (
    dev_metrics,
    load_for_decoding,
    translate_and_score,
    write_scores,
    write_text_atomically,
)
from .hub import push_to_hub
from .locations import is_local_path
from .modeling_vaswani_transformer import VaswaniTransformerForConditionalGeneration
from .monitoring import (
    HealthCheck,
    TrainingCollapsed,
    TrainingProgress,
    collapse_check_step,
    only_progress_lines,
    translation_symptom,
    unigram_loss,
)
from .plotting import plot_training_curve
from .prepared import (
    bpe_sample,
    build_once,
    content_digest,
    default_data_cache,
    prepared_folder,
    texts_for_bpe,
)
from .recipes import available_recipes, load_recipe
from .token_arrays import TokenizedPairs, write_tokenized
from .tokenization import load_tokenizer, train_bpe
from .training import (
    MIXED_PRECISIONS,
    TokenBudgetSeq2SeqTrainer,
    auto_precision_reason,
    bf16_available,
    build_trainer,
    mixed_precision_arguments,
    paper_training_arguments,
)
from .translate import BATCH_SIZE, translate

logger = logging.getLogger(__name__)

PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
FINAL_MODELS = ("average", "best", "last")
MAX_VOCAB_SIZE = 1_000_000  # 27x the paper's 37,000; far larger asks the BPE trainer for memory it aborts on
PATH_FIELDS = (
    "train_source",
    "train_target",
    "dev_source",
    "dev_target",
    "test_source",
    "test_target",
    "test_references_tokenized",
)
SANITY_SAMPLE = 100  # training sources decoded to check the final model when there is no dev set


class RunFolderError(ValueError):
    """--output_dir cannot take this run: another training holds it, it holds another run, or it is a file."""


class CorpusError(ValueError):
    """A corpus that cannot be used, found while loading it: before any training."""


class JsonDict(dict):
    """A dict that can also be built from JSON text, so that it can be one command-line value."""

    def __init__(self, value: str | dict | None = None) -> None:
        super().__init__(json.loads(value) if isinstance(value, str) else (value or {}))


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class TrainOptions:
    """Every setting of the training job; the defaults are the paper's base model recipe (§5)."""

    recipe: str | None = field(
        default=None,
        metadata=_help(
            f"named recipe ({', '.join(available_recipes())}) or a YAML file; its values replace these defaults"
        ),
    )
    # --- data
    data_dir: Path = field(
        default=Path("../shared/data"), metadata=_help("replaces {data_dir} in the paths below")
    )
    train_source: str | None = field(
        default=None,
        metadata=_help("source text file (one sentence a line), TSV file or Hub id; none: embedded Tatoeba"),
    )
    train_target: str | None = field(default=None, metadata=_help("target text file, line-aligned"))
    hub_config: str | None = field(default=None, metadata=_help("configuration of a Hub dataset, e.g. de-en"))
    source_lang: str = field(default="en", metadata=_help("source language code"))
    target_lang: str = field(default="de", metadata=_help("target language code"))
    dev_source: str | None = field(default=None, metadata=_help("dev source file / TSV / Hub id"))
    dev_target: str | None = field(default=None, metadata=_help("dev target file"))
    dev_size: int = field(
        default=0, metadata=_help("without --dev_source: pairs held out of the training data as dev set")
    )
    max_dev_sentences: int | None = field(default=None, metadata=_help("use only the first N dev pairs"))
    test_source: str | None = field(default=None, metadata=_help("test source file / TSV / Hub id"))
    test_target: str | None = field(default=None, metadata=_help("test reference file"))
    test_references_tokenized: str | None = field(
        default=None, metadata=_help("tokenised references for tokenised BLEU (Multi30k lc.norm.tok)")
    )
    test_size: int = field(default=1000, metadata=_help("embedded Tatoeba: held-out test pairs"))
    max_test_sentences: int | None = field(default=None, metadata=_help("score only the first N test pairs"))
    # --- model and vocabulary
    preset: PresetName = field(default="base", metadata=_help("model size: a configuration of the paper"))
    dropout: float | None = field(default=None, metadata=_help("residual dropout P_drop (default: preset's)"))
    config_overrides: JsonDict = field(
        default_factory=JsonDict,
        metadata=_help('other config values as JSON, e.g. \'{"init_scheme": "xavier"}\''),
    )
    vocab_size: int = field(default=37000, metadata=_help("joint BPE vocabulary size"))
    lowercase: bool = field(default=False, metadata=_help("lowercase text before BPE (and score lowercased)"))
    max_length: int = field(default=256, metadata=_help("drop training pairs with a longer side (tokens)"))
    bpe_max_pairs: int = field(
        default=1_000_000,
        metadata=_help("train the joint BPE on at most this many training pairs, a seeded sample (0: all)"),
    )
    data_cache: Path | None = field(
        default=None,
        metadata=_help(
            "folder of prepared data (the training corpus as read from files, joint BPE, tokenised pairs), one "
            "subfolder per corpus and settings, reused by every run (default: HF_HOME/vaswani_transformer/prepared)"
        ),
    )
    # --- training (§5)
    output_dir: Path = field(default=Path("runs/train"), metadata=_help("run folder"))
    max_tokens: int = field(
        default=3125, metadata=_help("padded tokens per batch, side and process (paper: 25k over 8 GPUs)")
    )
    gradient_accumulation_steps: int = field(default=1, metadata=_help("batches per update"))
    mixed_precision: Literal[MIXED_PRECISIONS] = field(  # type: ignore[valid-type]
        default="auto",
        metadata=_help(
            "auto: the launcher's (accelerate launch --mixed_precision), else bf16 autocast where the device "
            "computes it faster (GPUs with bf16; CPUs with AVX512-BF16 or AMX whose bf16 products measure at least 1.5x float32's), else fp32; "
            "decided once per run and kept by --resume (training_precision.json)"
        ),
    )
    torch_compile: bool = field(
        default=False,
        metadata=_help(
            "compile the model with torch.compile (GPUs; the first batches of each shape compile)"
        ),
    )
    max_steps: int = field(default=100_000, metadata=_help("optimiser updates"))
    warmup_steps: int = field(default=4000, metadata=_help("warm-up steps of eq. (3)"))
    lr_scale: float = field(default=1.0, metadata=_help("multiplies eq. (3); 1 is the paper's learning rate"))
    save_steps: int = field(default=1000, metadata=_help("checkpoint interval"))
    average_last: int = field(default=5, metadata=_help("checkpoints averaged into the final model (§6.1)"))
    final_model: Literal[FINAL_MODELS] = field(  # type: ignore[valid-type]
        default="average",
        metadata=_help("average of the last checkpoints, the best dev-BLEU checkpoint, or the last weights"),
    )
    eval_steps: int = field(
        default=0, metadata=_help("decode the dev set greedily every N updates (0: never)")
    )
    logging_steps: int = field(default=100, metadata=_help("log (and check) the loss every N updates"))
    health_checks: bool = field(
        default=True, metadata=_help("stop on divergence or collapse (--no_health_checks trains on)")
    )
    seed: int = field(default=0, metadata=_help("seed for initialisation, batches and held-out splits"))
    resume: bool = field(default=False, metadata=_help("continue from the last checkpoint in --output_dir"))
    overwrite: bool = field(
        default=False, metadata=_help("delete an earlier run in --output_dir first (else it needs --resume)")
    )
    # --- evaluation (§6.1 settings come from the model's generation config)
    num_beams: int | None = field(
        default=None,
        metadata=_help("beam size; above 1 kept in the final model's generation config (default: 4, §6.1)"),
    )
    length_penalty: float | None = field(
        default=None,
        metadata=_help("GNMT α, kept in the final model's generation config (default: 0.6, §6.1)"),
    )
    eval_batch_size: int = field(default=BATCH_SIZE, metadata=_help("sentences per decoding batch"))
    split_compounds: bool = field(default=False, metadata=_help("WMT14 ##AT## compound splitting"))
    examples: list[str] = field(
        default_factory=lambda: ["I love you.", "Where is the train station?", "Tom is reading a book."],
        metadata=_help("sentences translated at the end"),
    )
    # --- sharing and logging
    push_to_hub: str | None = field(
        default=None, metadata=_help("Hub repo id (user/name): push the final model with its model card")
    )
    hub_private: bool = field(default=False, metadata=_help("with --push_to_hub: create the repo private"))
    report_to: list[str] = field(
        default_factory=list,
        metadata=_help("also log to these trackers, e.g. tensorboard (installed separately); default none"),
    )

    def __post_init__(self) -> None:
        self.output_dir, self.data_dir = Path(self.output_dir), Path(self.data_dir)
        self.config_overrides = JsonDict(self.config_overrides)
        for name in PATH_FIELDS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.replace("{data_dir}", str(self.data_dir)))
        self._check_numbers()
        self._check_combinations()
        self._check_config_overrides()

    @classmethod
    def from_recipe(cls, name: str, **overrides: Any) -> "TrainOptions":
        """The options of a named recipe (or YAML file), with `overrides` on top."""
        return cls(**{**load_recipe(name, allowed=option_names()), "recipe": name, **overrides})

    def _check_numbers(self) -> None:
        """Numbers are in range, with a message naming the flag."""
        at_least = {
            "vocab_size": 1,
            "max_length": 1,
            "max_tokens": 1,
            "gradient_accumulation_steps": 1,
            "max_steps": 1,
            "warmup_steps": 1,
            "save_steps": 1,
            "average_last": 1,
            "logging_steps": 1,
            "eval_batch_size": 1,
            "test_size": 1,
            "eval_steps": 0,
            "dev_size": 0,
        }
        for name, minimum in at_least.items():
            if getattr(self, name) < minimum:
                raise ValueError(f"--{name} must be at least {minimum}, got {getattr(self, name)}.")
        for name in ("num_beams", "max_test_sentences", "max_dev_sentences"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be at least 1 (or left out), got {getattr(self, name)}.")
        if not self.lr_scale > 0:
            raise ValueError(f"--lr_scale must be positive, got {self.lr_scale}.")
        if self.bpe_max_pairs < 0:
            raise ValueError(
                f"--bpe_max_pairs {self.bpe_max_pairs}: give a number of pairs, or 0 for all of them."
            )
        if not 0 <= self.seed < 2**32:  # numpy's seed range: known now, not after the vocabulary is written
            raise ValueError(f"--seed must be between 0 and {2**32 - 1}, got {self.seed}.")
        if self.vocab_size > MAX_VOCAB_SIZE:  # the BPE trainer aborts the process (Rust) at 10^9
            raise ValueError(
                f"--vocab_size must be at most {MAX_VOCAB_SIZE:,}, got {self.vocab_size:,} (the paper: 37,000)."
            )
        if self.max_tokens < self.max_length:  # a pair of max_length tokens would overflow every batch
            raise ValueError(
                f"--max_tokens {self.max_tokens} is below --max_length {self.max_length}: a kept pair may be "
                "longer than a whole batch's budget. Raise --max_tokens or lower --max_length."
            )

    def _check_combinations(self) -> None:
        """Settings that only make sense together."""
        if self.mixed_precision not in MIXED_PRECISIONS:
            raise ValueError(
                f"--mixed_precision must be one of {MIXED_PRECISIONS}, got {self.mixed_precision!r}."
            )
        if self.final_model not in FINAL_MODELS:
            raise ValueError(f"--final_model must be one of {FINAL_MODELS}, got {self.final_model!r}.")
        if self.preset not in PRESETS:
            raise ValueError(f"--preset must be one of {sorted(PRESETS)}, got {self.preset!r}.")
        if self.test_references_tokenized is not None and self.test_source is None:
            raise ValueError("--test_references_tokenized needs the --test_source it tokenises.")
        if self.resume and self.overwrite:
            raise ValueError("--resume continues the run in --output_dir, --overwrite deletes it: give one.")
        if self.dropout is not None and "dropout" in self.config_overrides:
            raise ValueError("dropout is given twice: as --dropout and in --config_overrides; keep one.")
        if self.train_source is not None and self.test_source is None:
            raise ValueError(
                "--test_source is required with --train_source (and --test_target for text pairs)."
            )
        if self.eval_steps and not self.has_dev_set:
            raise ValueError("--eval_steps needs a dev set: --dev_source/--dev_target, or --dev_size N.")
        if self.final_model == "best" and (not self.eval_steps or self.eval_steps % self.save_steps):
            raise ValueError(
                "--final_model best needs dev evaluations at checkpoint steps: --eval_steps a multiple of "
                f"--save_steps ({self.save_steps})."
            )

    @property
    def has_dev_set(self) -> bool:
        return self.dev_source is not None or self.dev_size > 0

    def averaging_shortfall(self) -> str | None:
        """A warning when the run writes fewer checkpoints than --average_last asks to average, else None."""
        checkpoints = math.ceil(self.max_steps / self.save_steps)  # the Trainer also saves at the last step
        if self.final_model != "average" or self.average_last <= checkpoints:
            return None
        return (
            f"warning: --average_last {self.average_last}, but the run writes {checkpoints} checkpoint(s) "
            f"(--max_steps {self.max_steps}, --save_steps {self.save_steps}): the final model averages those."
        )

    def _check_config_overrides(self) -> None:
        """--config_overrides names config keys (a typo is an error with a did-you-mean, never silently kept),
        and not the vocabulary size, which the job sets from its BPE (--vocab_size)."""
        known = {option.name for option in fields(VaswaniTransformerConfig)}
        known |= set(VaswaniTransformerConfig.attribute_map)
        for key in self.config_overrides:
            if key == "vocab_size":
                raise ValueError(
                    "--config_overrides cannot set vocab_size: the vocabulary is trained to --vocab_size and the "
                    "model takes its size from it. Use --vocab_size."
                )
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"--config_overrides: {key!r} is not a key of the model's config.{hint}")

    def model_config(self) -> VaswaniTransformerConfig:
        """The model's config: the preset with --dropout and --config_overrides (raises ValueError on bad values)."""
        overrides = dict(self.config_overrides)
        if self.dropout is not None:
            overrides["dropout"] = self.dropout
        try:
            return VaswaniTransformerConfig.from_preset(self.preset, vocab_size=self.vocab_size, **overrides)
        except (
            StrictDataclassError,
            TypeError,
        ) as error:  # a value of the wrong type: huggingface_hub's check
            raise ValueError(f"--config_overrides: {error}") from error


def option_names() -> set[str]:
    """The names of all settings: fields of TrainOptions, flags of the train command, keys of recipes."""
    return {option.name for option in fields(TrainOptions)}


@dataclass
class TrainResult:
    """Where things were written and what was measured."""

    model_dir: Path
    scores: dict
    dev_scores: dict | None
    train_seconds: float
    example_translations: dict[str, str]
    hub_url: str | None = None


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


def check_inputs(options: TrainOptions) -> None:
    """Fail before any long work: missing local files, and a model config that cannot be built."""
    check_data_inputs(options)
    options.model_config()
    _check_sharing(options)
    if _is_main_process():  # other processes find the main process's files there
        _check_output_dir(options)


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
    _check_data_cache(data_cache_folder(options))


def _check_data_cache(cache: Path) -> None:
    """The data cache is a folder, or can be made as one: its nearest existing folder is writable."""
    if cache.exists() and not cache.is_dir():
        raise ValueError(f"--data_cache {cache} is a file: give a folder (it is made if missing).")
    existing = next(path for path in (cache, *cache.parents) if path.exists())
    if not existing.is_dir():
        raise ValueError(f"--data_cache {cache} cannot be made: {existing} is a file. Give a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(
            f"--data_cache {cache}: {existing} is not writable. Give a folder you can write (or set HF_HOME)."
        )


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


# The precision a run trains in, decided once at its start (`run_precision`)
PRECISION_FILE = "training_precision.json"
# What a run writes at the top of its --output_dir: the only entries --overwrite may delete (with the temporary
# name `write_text_atomically` gives the record, should a run be killed while writing it).
RUN_FILES = ("train_options.json", PRECISION_FILE, f".{PRECISION_FILE}.tmp")
# runs/: TensorBoard's logs (--report_to); tokenized/: the tokenised pairs of runs before the data cache
RUN_FOLDERS = ("tokenizer", "tokenized", "final", "runs")
RUN_FOLDER_PATTERNS = ("checkpoint-*", "incomplete-checkpoint-*")
# The lock a training holds on its folder: never deleted (a new file would let a second training lock it while
# the first still holds the old one), never counted as the folder's content.
LOCK_FILE = ".vaswani-train.lock"


@contextlib.contextmanager
def holding_run_folder(folder: Path) -> Iterator[None]:
    """Hold `folder` for this run, so that a second training there stops (RunFolderError) before it checks or
    writes anything. An OS lock (flock through `filelock`) that dies with its process: a killed run leaves
    nothing to clean up. Only the main process locks; a folder this made for a run that failed is removed."""
    if not _is_main_process():
        yield
        return
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"--output_dir {folder} is a file: give a folder (new, empty, or a run's).")
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunFolderError(
            f"--output_dir {folder} is in use by another training (it holds {folder / LOCK_FILE}): wait for it "
            "to finish, or choose another --output_dir."
        ) from None
    try:
        yield
    except BaseException:
        if created and [path.name for path in folder.iterdir()] == [LOCK_FILE]:
            (folder / LOCK_FILE).unlink()  # while still held: no other run can be waiting for this new folder
            folder.rmdir()
        raise
    finally:
        lock.release()


def _is_run_folder(folder: Path) -> bool:
    """Whether a folder holds (part of) a run of this job: options, vocabulary or checkpoints."""
    return (
        (folder / "train_options.json").is_file()
        or (folder / "tokenizer").is_dir()
        or any(folder.glob("checkpoint-*"))
    )


def _written_by_a_run(path: Path) -> bool:
    if path.is_symlink():  # a link may lead out of the folder: never the run's own
        return False
    if path.is_file():
        return path.name in RUN_FILES
    return path.is_dir() and (
        path.name in RUN_FOLDERS or any(fnmatch(path.name, pattern) for pattern in RUN_FOLDER_PATTERNS)
    )


def _not_written_by_a_run(folder: Path) -> list[str]:
    """The names in a run folder that no run writes (the user's own files, for one)."""
    return sorted(path.name for path in _content(folder) if not _written_by_a_run(path))


def _content(folder: Path) -> list[Path]:
    """What a folder holds, but for a training's lock."""
    return [path for path in folder.iterdir() if path.name != LOCK_FILE]


def _delete_earlier_run(folder: Path) -> None:
    """--overwrite: delete what a run wrote in `folder`, and nothing else (`_check_output_dir` refused the rest)."""
    logger.info(f"--overwrite: deleting the earlier run in {folder}")
    for path in sorted(_content(folder)):
        if not _written_by_a_run(path):
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def _check_output_dir(options: TrainOptions) -> None:
    """A run folder belongs to one run: an earlier run's checkpoints must never be averaged into this one."""
    folder = options.output_dir
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"--output_dir {folder} is a file: give a folder (new, empty, or a run's).")
    if options.resume or not folder.is_dir() or not _content(folder):
        return
    if not _is_run_folder(folder):
        raise RunFolderError(
            f"--output_dir {folder} is not empty and holds no run: choose a new or empty folder."
        )
    if not options.overwrite:
        raise RunFolderError(
            f"--output_dir {folder} already holds a run. Continue it with --resume, delete it first with "
            "--overwrite, or choose a new --output_dir."
        )
    if others := _not_written_by_a_run(folder):
        raise RunFolderError(
            f"--output_dir {folder} holds a run and files no run writes ({', '.join(others)}): --overwrite "
            "deletes only a run's own files. Move those elsewhere, or choose a new --output_dir."
        )


def _check_sharing(options: TrainOptions) -> None:
    """A push needs a valid repo id and a token, a tracker must be installed: known before training starts."""
    if options.push_to_hub is not None:
        try:
            validate_repo_id(options.push_to_hub)
        except ValueError as error:  # the Hub's own rule, named with its flag
            raise ValueError(f"--push_to_hub {options.push_to_hub!r}: {error}") from None
        if get_token() is None:
            raise ValueError(
                f"--push_to_hub {options.push_to_hub} needs a Hub token: run `hf auth login` or set HF_TOKEN."
            )
    if "tensorboard" in options.report_to and not is_tensorboard_available():
        raise ValueError("--report_to tensorboard needs TensorBoard: pip install tensorboard.")


def _log_loaded(stats: LoadStats, split: str) -> None:
    logger.info(f"{split}: {stats.summary()}")


def _load_pairs(
    options: TrainOptions, source: str, target: str | None, split: str
) -> tuple[Dataset, LoadStats]:
    """One corpus, its load summary logged; a corpus that cannot be read as pairs or has no usable pair is an
    error naming its flag."""
    flag = {"train": "train_source", "validation": "dev_source", "test": "test_source"}[split]
    try:
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

    Other processes (and `--resume`) load the run folder's, so every rank shares one vocabulary.
    """
    tokenizer_dir = options.output_dir / "tokenizer"
    if for_run and tokenizer_dir.is_dir() and (options.resume or not is_main_process):
        return load_tokenizer(str(tokenizer_dir))
    settings = (corpus_digest, options.vocab_size, options.lowercase, options.bpe_max_pairs, options.seed)
    prepared = prepared_folder(data_cache_folder(options), "bpe", *settings)
    if prepared.is_dir():
        logger.info(f"joint BPE: reused {prepared}")
    build_once(prepared, lambda folder: _train_bpe_into(folder, options, train))
    tokenizer = load_tokenizer(str(prepared))
    if for_run:
        tokenizer.save_pretrained(tokenizer_dir)
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
    if prepared.is_dir():
        logger.info(f"tokenised pairs: reused {prepared}")
    build_once(prepared, lambda folder: _tokenize_into(folder, options, train, tokenizer))
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


def _advice(options: TrainOptions, config: VaswaniTransformerConfig, peak_lr: float) -> str:
    """What to change after a failed run, in the job's own flags."""
    switch = (
        " or switch --config_overrides init_scheme 'xavier' to 'normal',"
        if config.init_scheme == "xavier"
        else ""
    )
    return (
        f"Lower the peak learning rate (--lr_scale {options.lr_scale:g} gives {peak_lr:.2e}), lengthen "
        f"--warmup_steps ({options.warmup_steps}),{switch} then rerun with a new --output_dir. "
        "--no_health_checks trains on regardless."
    )


def _training_arguments(options: TrainOptions, config: VaswaniTransformerConfig) -> Seq2SeqTrainingArguments:
    """The paper's recipe with this job's batch, schedule, checkpoint and dev-decoding settings."""
    return paper_training_arguments(
        options.output_dir,
        config.d_model,
        max_steps=options.max_steps,
        warmup_steps=options.warmup_steps,
        lr_scale=options.lr_scale,
        save_steps=options.save_steps,
        save_total_limit=options.average_last,
        eval_steps=options.eval_steps,
        logging_steps=min(options.logging_steps, options.max_steps),  # a short run still logs its loss
        seed=options.seed,
        mixed_precision=options.mixed_precision,
        torch_compile=options.torch_compile,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        per_device_eval_batch_size=options.eval_batch_size,
        report_to=options.report_to or "none",
    )


def _trainer_for(
    options: TrainOptions,
    args: Seq2SeqTrainingArguments,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Dataset,
    dev: Dataset | None,
    floor: float,
    advice: str,
) -> TokenBudgetSeq2SeqTrainer:
    """The paper's recipe on Seq2SeqTrainer, with dev decoding, the health check and the progress lines."""
    callbacks: list[TrainerCallback] = [TrainingProgress()]
    if options.health_checks:
        check_from = collapse_check_step(options.warmup_steps)
        logger.info(
            f"health check: the loss must be below {floor:.3f} (unigram floor) from step {check_from} on"
        )
        callbacks.append(HealthCheck(floor, check_from, advice))
    return build_trainer(
        model,
        tokenizer,
        train,
        args,
        options.max_tokens,
        eval_dataset=dev,
        compute_metrics=dev_metrics(tokenizer) if dev is not None else None,
        callbacks=callbacks,
    )


def _resume_point(options: TrainOptions, is_main_process: bool) -> str | None:
    """With --resume, the last checkpoint whose save finished; ones a killed save left are reported and set
    aside as `incomplete-checkpoint-<step>` (so neither resuming nor averaging nor rotation sees them)."""
    if not options.resume or not options.output_dir.is_dir():
        return None
    whole, incomplete = whole_checkpoints(options.output_dir)
    for checkpoint, problem in incomplete.items():
        logger.warning(f"warning: skipping an incomplete checkpoint: {problem}")
        if is_main_process:
            aside = checkpoint.with_name(f"incomplete-{checkpoint.name}")
            shutil.rmtree(aside, ignore_errors=True)
            checkpoint.rename(aside)
    if not whole:
        logger.info("--resume: no complete checkpoint yet, training from the start")
        return None
    logger.info(f"--resume: continuing from {whole[-1].name}")
    return str(whole[-1])


def _final_model_dir(options: TrainOptions, trainer: TokenBudgetSeq2SeqTrainer) -> Path:
    """The final model: the average of the last checkpoints (§6.1), the best dev checkpoint, or the last weights."""
    final_dir = options.output_dir / "final"
    checkpoints = whole_checkpoints(options.output_dir)[0]
    best = trainer.state.best_model_checkpoint
    if options.final_model == "best" and best is not None:
        logger.info(f"final model: {best} (best greedy dev BLEU {trainer.state.best_metric:.2f})")
        return average_checkpoints([Path(best)], final_dir)
    if options.final_model == "average" and options.average_last > 1 and len(checkpoints) >= 2:
        chosen = checkpoints[-options.average_last :]
        logger.info(f"final model: average of {', '.join(path.name for path in chosen)}")
        return average_checkpoints(chosen, final_dir)
    logger.info(f"final model: the weights after step {trainer.state.global_step}")
    trainer.save_model(str(final_dir))
    return final_dir


def _check_final_model(options: TrainOptions, translations: list[str], advice: str) -> None:
    """Refuse to report scores of a model that translates every sentence the same way (or into nothing)."""
    judged = options.health_checks and options.max_steps >= collapse_check_step(options.warmup_steps)
    symptom = translation_symptom(translations)
    if judged and symptom:
        raise TrainingCollapsed(
            f"The final model has collapsed: {symptom}; no scores are reported. " + advice
        )
    if symptom:
        why = (
            "as --no_health_checks asks"
            if not options.health_checks
            else f"{options.max_steps} steps are too few to judge (the check starts at step "
            f"{collapse_check_step(options.warmup_steps)})"
        )
        logger.warning(f"warning: the final model looks collapsed ({symptom}); scoring it anyway: {why}")


def keep_decoding_settings(options: TrainOptions, model_dir: Path) -> None:
    """Write the run's beam settings (--length_penalty, e.g. a recipe's α tuned on dev, and a --num_beams above 1)
    into the final model's generation config, so the saved model decodes as its scores were measured. --num_beams 1
    scores greedily without taking the beam from the model (a greedy config cannot hold beam settings)."""
    overrides: dict[str, Any] = {}
    if options.length_penalty is not None:
        overrides["length_penalty"] = options.length_penalty
    if options.num_beams is not None and options.num_beams > 1:
        overrides["num_beams"] = options.num_beams
    if overrides:
        generation_config = GenerationConfig.from_pretrained(model_dir)
        generation_config.update(**overrides)
        generation_config.save_pretrained(model_dir)


def _score(
    options: TrainOptions,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Dataset,
    references_tokenized: list[str] | None = None,
) -> tuple[list[str], dict]:
    return translate_and_score(
        TorchEngine(model, tokenizer),
        list(pairs["source"]),
        list(pairs["target"]),
        target_lang=options.target_lang,
        references_tokenized=references_tokenized,
        split_compounds=options.split_compounds,
        batch_size=options.eval_batch_size,
        show_progress=True,
        # --num_beams 1 is not in the model's config (keep_decoding_settings); the rest is
        **({} if options.num_beams is None else {"num_beams": options.num_beams}),
    )


def evaluate_final_model(
    options: TrainOptions, model_dir: Path, corpora: Corpora, advice: str
) -> tuple[dict, dict | None, dict[str, str]]:
    """Load the final model once: check it has not collapsed, score dev and test, translate the examples."""
    model, tokenizer = load_for_decoding(model_dir)
    dev_scores = None
    if corpora.dev is not None:
        dev_hypotheses, dev_scores = _score(options, model, tokenizer, corpora.dev)
        logger.info(
            f"dev: sacreBLEU {dev_scores['sacrebleu']['score']:.2f} (final model, {len(corpora.dev)} pairs)"
        )
        _check_final_model(options, dev_hypotheses, advice)
        write_scores(model_dir, dev_hypotheses, dev_scores, name="dev_")
    else:
        sample = list(corpora.train["source"][:SANITY_SAMPLE])
        _check_final_model(options, translate(sample, model, tokenizer, num_beams=1), advice)
    hypotheses, scores = _score(options, model, tokenizer, corpora.test, corpora.test_references_tokenized)
    write_scores(model_dir, hypotheses, scores)
    examples = list(options.examples)
    translations = dict(zip(examples, translate(examples, model, tokenizer), strict=True))
    return scores, dev_scores, translations


def _push_final_model(options: TrainOptions, model_dir: Path) -> str | None:
    """Push the final model; when the upload fails (network, permissions), say how to retry and return None:
    the trained and scored model stays where it is."""
    try:
        url = push_to_hub(model_dir, options.push_to_hub, private=options.hub_private)
    except OSError as error:  # huggingface_hub's HTTP errors are OSErrors
        logger.error(
            f"error: pushing to {options.push_to_hub} failed: {error}\nThe model is saved in {model_dir}; retry "
            f"with: vaswani-push {model_dir} --repo_id {options.push_to_hub}"
        )
        return None
    logger.info(f"pushed to the Hub: {url}")
    return url


def _precision_name(args: Seq2SeqTrainingArguments) -> str:
    """How the run trains, named alike whoever chose it: "bf16 autocast", "fp16 autocast" or "fp32"."""
    if args.bf16 or args.fp16:
        name = "bf16" if args.bf16 else "fp16"
    else:  # the launcher's choice, which the Trainer's Accelerator reads from the environment
        name = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
    return "fp32" if name == "no" else f"{name} autocast"


@dataclass(frozen=True)
class RunPrecision:
    """The precision a run trains in ("no", "fp16", "bf16", or "auto": the launcher's) and who chose it, why."""

    mixed_precision: str
    chosen_by: str


def _decide_precision(options: TrainOptions) -> RunPrecision:
    """The flag's precision, else the launcher's (accelerate launch --mixed_precision), else this machine's."""
    if options.mixed_precision != "auto":
        return RunPrecision(options.mixed_precision, f"--mixed_precision {options.mixed_precision}")
    if "ACCELERATE_MIXED_PRECISION" in os.environ:
        return RunPrecision("auto", "auto: the launcher's (accelerate launch --mixed_precision)")
    return RunPrecision("bf16" if bf16_available() else "no", f"auto: {auto_precision_reason()}")


def run_precision(
    options: TrainOptions, is_main_process: bool, in_turn: Callable[[str], contextlib.AbstractContextManager]
) -> RunPrecision:
    """The precision this run trains in, decided once by the main process and kept in the run folder
    (PRECISION_FILE), where every process of a distributed run reads it and `--resume` under "auto" finds it.

    "auto" measures the CPU (`precision.cpu_bf16_is_faster`), and on an Intel Xeon with AMX that figure varies
    between processes across the line (benchmarks/RESULTS.md): decided in each process, ranks or a resumed run
    could train in another precision than the run began in. A precision named by flag or launcher is kept too.
    """
    record = options.output_dir / PRECISION_FILE
    with in_turn("deciding the training precision"):
        if is_main_process:
            kept = _kept_precision(record) if options.resume and options.mixed_precision == "auto" else None
            decided = kept or _decide_precision(options)
            write_text_atomically(record, json.dumps(asdict(decided), indent=2) + "\n")
            if kept is not None:
                logger.info(
                    f"--resume: training in the run's precision, {kept.mixed_precision} ({kept.chosen_by})"
                )
            return decided
    return _read_precision(record)  # the other processes, once the main one has written it


def _read_precision(record: Path) -> RunPrecision:
    """The record's precision; RunFolderError if it names none (only a hand edit can do that: it is written whole)."""
    try:
        kept = RunPrecision(**json.loads(record.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as error:  # not JSON (ValueError), not the two fields (TypeError)
        problem = f"cannot be read ({error})"
    else:
        if kept.mixed_precision in MIXED_PRECISIONS:
            return kept
        problem = f"names an unknown precision, {kept.mixed_precision!r}"
    raise RunFolderError(
        f"{record} {problem}. Name the precision with --mixed_precision {{bf16,fp16,no}}, or delete the file to "
        "let --resume decide again."
    )


def _kept_precision(record: Path) -> RunPrecision | None:
    """The precision a run folder's record names, if it names one (not the launcher's, which is asked again)."""
    if not record.is_file():  # a run from before the record, or one killed before it was written
        return None
    kept = _read_precision(record)
    return kept if kept.mixed_precision != "auto" else None


def _write_training_run(
    trainer: TokenBudgetSeq2SeqTrainer, train_seconds: float, folder: Path, precision: RunPrecision
) -> None:
    """How the model was trained (steps, time, hardware, precision and why, versions), for its model card."""
    args = trainer.args
    if torch.cuda.is_available():
        hardware = f"{args.world_size} × {torch.cuda.get_device_name()}"
    else:
        hardware = f"{args.world_size} × CPU process ({torch.get_num_threads()} threads)"
    run = {
        "steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1),
        "hardware": hardware,
        "mixed_precision": {"no": "fp32"}.get(
            trainer.accelerator.mixed_precision, trainer.accelerator.mixed_precision
        ),
        "mixed_precision_chosen_by": precision.chosen_by,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    (folder / "training_run.json").write_text(json.dumps(run, indent=2) + "\n", encoding="utf-8")


def _write_options(options: TrainOptions, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps(asdict(options), default=str, indent=2) + "\n"
    (folder / "train_options.json").write_text(text, encoding="utf-8")


def train_and_evaluate(options: TrainOptions) -> TrainResult | None:
    """Load data, train BPE, train the model with the paper's recipe, pick the final model, decode, score.

    Under `torchrun` / `accelerate launch` every process trains on its shard of the token batches; only the
    main process trains the vocabulary, builds the final model, evaluates and returns a result (others: None).
    Raises `monitoring.TrainingFailure` when training diverges or collapses, and RunFolderError when another
    training holds --output_dir (`holding_run_folder`).
    """
    with holding_run_folder(options.output_dir):
        return _train_and_evaluate(options)


def _train_and_evaluate(options: TrainOptions) -> TrainResult | None:
    check_inputs(options)  # again, now that the folder is this run's: a run may have finished there meanwhile
    config = options.model_config()
    args = _training_arguments(options, config)
    advice = _advice(options, config, args.learning_rate)
    is_main_process = args.process_index == 0
    if is_main_process and (shortfall := options.averaging_shortfall()):
        logger.warning(shortfall)
    corpora = load_corpora(options)  # read and checked before --overwrite deletes anything
    if options.overwrite and is_main_process and options.output_dir.is_dir():
        _delete_earlier_run(options.output_dir)

    def in_turn(step: str) -> contextlib.AbstractContextManager:
        # local=False: on several machines, one process (on a shared --output_dir) writes what all of them read
        return args.main_process_first(local=False, desc=step)

    tokenizer, tokenized, filter_stats = prepare_training_data(
        options, corpora.train, is_main_process, in_turn
    )
    # recorded once the folder holds the run's vocabulary: a run that fails before leaves no record behind
    precision = run_precision(options, is_main_process, in_turn)
    args = replace(args, **mixed_precision_arguments(precision.mixed_precision))
    logger.info(filter_stats.summary())
    dev = None
    if corpora.dev is not None:
        dev = tokenize_parallel(corpora.dev, tokenizer, max_length=options.max_length)[0]
    config.vocab_size = len(tokenizer)
    torch.manual_seed(options.seed)
    model = VaswaniTransformerForConditionalGeneration(config)
    logger.info(
        f"model: preset {options.preset}, {model.num_parameters():,} parameters, init {config.init_scheme}; "
        f"peak learning rate {args.learning_rate:.2e} at step {options.warmup_steps}; "
        f"{_precision_name(args)} ({precision.chosen_by})"
    )
    if is_main_process:
        _write_options(options, options.output_dir)
    floor = unigram_loss(tokenized.target_counts(len(tokenizer)), config.label_smoothing)
    trainer = _trainer_for(options, args, model, tokenizer, tokenized, dev, floor, advice)
    started = time.perf_counter()
    with only_progress_lines():
        trainer.train(resume_from_checkpoint=_resume_point(options, is_main_process))
    train_seconds = time.perf_counter() - started
    if not is_main_process:
        return None
    model_dir = _final_model_dir(options, trainer)
    tokenizer.save_pretrained(model_dir)
    _write_options(options, model_dir)
    _write_training_run(trainer, train_seconds, model_dir, precision)
    keep_decoding_settings(options, model_dir)
    plot_training_curve(trainer.state.log_history, model_dir / "training_curve.png", unigram_floor=floor)
    scores, dev_scores, examples = evaluate_final_model(options, model_dir, corpora, advice)
    hub_url = _push_final_model(options, model_dir) if options.push_to_hub is not None else None
    return TrainResult(model_dir, scores, dev_scores, train_seconds, examples, hub_url)
