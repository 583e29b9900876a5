"""Every setting of the training job under one name: a `TrainOptions` field, a flag of the train command
(`--max_steps`, also `--max-steps`) and a key of the recipe files.

The values come from the recipe files only: recipes/defaults.yaml gives every field its default, a recipe
(`TrainOptions.from_recipe`, `vaswani-train --recipe`) replaces some, flags replace them again. This module holds
what each setting means and which values and combinations are allowed, checked before anything runs.
"""

import copy
import difflib
import hashlib
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import Field, asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from huggingface_hub.errors import StrictDataclassError

from ..files.manifests import HASH_ALWAYS_BYTES
from ..modeling.presets_vaswani_transformer import PRESETS
from ..values import check_finite, check_length_penalty
from .languages import SPLITS, corpus_languages
from .recipes import (
    STEPS_BELOW,
    available_recipes,
    by_steps_rows,
    cuda_settings,
    load_recipe,
    row_for,
    row_settings,
    setting_defaults,
)

if TYPE_CHECKING:  # imported where used: the train command's options and --help build without torch
    from ..modeling.configuration_vaswani_transformer import VaswaniTransformerConfig

PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
FINAL_MODELS = ("average", "best", "last")
MIXED_PRECISIONS = (
    "auto",
    "no",
    "fp16",
    "bf16",
)  # the Trainer's, and "auto": decided by the launcher or the machine
MAX_VOCAB_SIZE = 1_000_000  # 27x the paper's 37,000; far larger asks the BPE trainer for memory it aborts on
# Eq. (3) rises linearly for --warmup_steps W, so a run that ends at step M < W peaks at M/W of the schedule's peak.
# Below 1/10,000 of it nothing trains (Adam moves a weight by about the learning rate per step); a trial of any
# recipe (W at most 4,000, M at least 1) stays above it (docs/training.md, "Learning rate and initialisation").
MAX_WARMUP_PER_STEP = 10_000
DEFAULT_RECIPE = "tatoeba"  # what `vaswani-train` runs without --recipe: the main job
PATH_FIELDS = (
    "train_source",
    "train_target",
    "dev_source",
    "dev_target",
    "test_source",
    "test_target",
    "test_references_tokenized",
)
# Config keys that are settings of their own, so that each has one way to be set: not in --config_overrides.
OWN_SETTINGS = {
    "vocab_size": "the vocabulary is trained to --vocab_size and the model takes its size from it",
    "dropout": "residual dropout is the setting --dropout (recipe key `dropout`)",
}
DEFAULTS = setting_defaults()
# A run's train_options.json is its contract: --resume continues it only with the same value of every setting that
# shapes the model, the data or the schedule. These, and only these, may change on --resume (why, for the docs).
RECORD_FINGERPRINT = "record_fingerprint"  # train_options.json's own key: `record_fingerprint`
MAY_CHANGE_ON_RESUME = {
    "resume": "the command itself",
    "overwrite": "the command itself (the run may have begun with it; --resume never takes it)",
    "output_dir": "the run's own folder, however its path is spelt",
    "recipe": "where values come from; the values themselves are compared",
    "cuda_section": "where values come from; the values themselves are compared",
    "data_dir": "it only fills in the corpus paths, which are compared",
    "data_cache": "where prepared data is kept; it is found there by content",
    "verify_cache": "how much of the prepared data is read to check it; the data is the same",
    "max_steps": "a run continues to a larger --max_steps (eq. (3)'s schedule does not depend on it)",
    "max_train_minutes": "like --max_steps, when training ends: a run continues within a larger budget",
    "fit_to_steps": "where values come from; the values themselves are compared",
    "mixed_precision": "a precision named by flag replaces the recorded one, e.g. on another GPU; auto keeps it",
    "logging_steps": "logging",
    "report_to": "logging",
    "health_checks": "monitoring",
    "eval_steps": "dev decoding while training",
    "eval_batch_size": "decoding speed",
    "num_beams": "the final model's decoding, after training",
    "length_penalty": "the final model's decoding, after training",
    "length_penalty_choices": "the final model's decoding, after training",
    "examples": "sentences translated at the end",
    "push_to_hub": "sharing, after training",
    "hub_private": "sharing, after training",
}


# TrainOptions' settings by topic, as `vaswani-train --help` and the docs group them: each group from the field
# named here to the next group's (the fields are in this order).
GROUP_STARTS = {
    "recipe": "where the defaults come from",
    "data_dir": "data",
    "preset": "model and vocabulary",
    "output_dir": "training (§5)",
    "num_beams": "evaluation (§6.1 settings come from the model's generation config)",
    "push_to_hub": "sharing and logging",
}


class JsonDict(dict):
    """A dict that can also be built from JSON text, so that it can be one command-line value."""

    def __init__(self, value: str | dict | None = None) -> None:
        super().__init__(json.loads(value) if isinstance(value, str) else (value or {}))


def _setting(name: str, help: str) -> Any:
    """A field whose default is recipes/defaults.yaml's value for `name` (a copy of it, for lists and dicts)."""
    value = DEFAULTS[name]
    if isinstance(value, list | dict):
        return field(default_factory=lambda: copy.deepcopy(value), metadata={"help": help})
    return field(default=value, metadata={"help": help})


@dataclass
class TrainOptions:
    """Every setting of the training job; the defaults are recipes/defaults.yaml's (the paper's base recipe, §5)."""

    recipe: str | None = field(
        default=None,
        metadata={
            "help": f"named recipe ({', '.join(available_recipes())}) or a YAML file; its values replace the "
            "defaults (recipes/defaults.yaml)"
        },
    )
    data_dir: Path = _setting("data_dir", "replaces {data_dir} in the paths below")
    train_source: str | None = _setting(
        "train_source", "source text file (one sentence a line), TSV file or Hub id; none: embedded Tatoeba"
    )
    train_target: str | None = _setting("train_target", "target text file, line-aligned")
    hub_config: str | None = _setting("hub_config", "configuration of a Hub dataset, e.g. de-en")
    source_lang: str | None = _setting(
        "source_lang",
        "source language code (none: as the corpus files' suffixes say, train.fr → fr; the embedded corpus: en)",
    )
    target_lang: str | None = _setting(
        "target_lang",
        "target language code (none: as the corpus files' suffixes say; the embedded corpus: de)",
    )
    dev_source: str | None = _setting("dev_source", "dev source file / TSV / Hub id")
    dev_target: str | None = _setting("dev_target", "dev target file")
    dev_size: int = _setting(
        "dev_size", "without --dev_source: pairs held out of the training data as dev set"
    )
    max_dev_sentences: int | None = _setting("max_dev_sentences", "use only the first N dev pairs")
    test_source: str | None = _setting("test_source", "test source file / TSV / Hub id")
    test_target: str | None = _setting("test_target", "test reference file")
    test_references_tokenized: str | None = _setting(
        "test_references_tokenized", "tokenised references for tokenised BLEU (Multi30k lc.norm.tok)"
    )
    test_size: int = _setting("test_size", "embedded Tatoeba: held-out test pairs")
    max_test_sentences: int | None = _setting("max_test_sentences", "score only the first N test pairs")
    preset: PresetName = _setting("preset", "model size: a configuration of the paper")
    dropout: float | None = _setting("dropout", "residual dropout P_drop (none: the preset's)")
    config_overrides: JsonDict = _setting(
        "config_overrides", 'other config values as JSON, e.g. \'{"init_scheme": "xavier"}\''
    )
    vocab_size: int = _setting("vocab_size", "joint BPE vocabulary size")
    lowercase: bool = _setting("lowercase", "lowercase text before BPE (and score lowercased)")
    max_length: int = _setting("max_length", "drop training pairs with a longer side (tokens)")
    bpe_max_pairs: int = _setting(
        "bpe_max_pairs", "train the joint BPE on at most this many training pairs, a seeded sample (0: all)"
    )
    data_cache: Path | None = _setting(
        "data_cache",
        "folder of prepared data (the training corpus as read from files, joint BPE, tokenised pairs), one "
        "subfolder per corpus and settings, reused by every run (none: HF_HOME/vaswani_transformer/prepared)",
    )
    verify_cache: bool = _setting(
        "verify_cache",
        "before reusing prepared data, check every file's content (SHA-256), not only the sizes and the files "
        f"up to {HASH_ALWAYS_BYTES >> 20} MiB; a damaged one is prepared anew",
    )
    output_dir: Path = _setting("output_dir", "run folder")
    max_tokens: int = _setting(
        "max_tokens", "padded tokens per batch, side and process (paper: 25k over 8 GPUs)"
    )
    gradient_accumulation_steps: int = _setting("gradient_accumulation_steps", "batches per update")
    mixed_precision: Literal[MIXED_PRECISIONS] = _setting(  # type: ignore[valid-type]
        "mixed_precision",
        "auto: the launcher's (accelerate launch --mixed_precision), else bf16 autocast where the device computes "
        "it faster (GPUs with bf16; CPUs with AMX, AMD CPUs with AVX512-BF16), else fp32; decided once per run "
        "and kept by --resume (training_precision.json)",
    )
    torch_compile: bool = _setting(
        "torch_compile",
        "compile the model with torch.compile (GPUs): batches are padded to at most 8 shapes, each compiled once, "
        "announced by a line 'compiling for shape k of at most n'",
    )
    max_steps: int = _setting("max_steps", "optimiser updates")
    max_train_minutes: float | None = _setting(
        "max_train_minutes",
        "end training after this many minutes of it, over every session of the run, or at --max_steps if that "
        "comes first (fairseq's --stop-time-hours); minutes the process ran: a stopped process's pause (kill "
        "-STOP) does not count; the step that reaches it saves a checkpoint, so stopping on time is a normal end; "
        "none: --max_steps alone",
    )
    fit_to_steps: int | None = _setting(
        "fit_to_steps",
        "the steps the recipe's by_steps: rows are chosen for (none: the steps this machine is measured to train "
        "within --max_train_minutes, else --max_steps); flags given still win over a row's values",
    )
    warmup_steps: int = _setting(
        "warmup_steps",
        f"warm-up steps of eq. (3); beyond --max_steps a warning, beyond {MAX_WARMUP_PER_STEP:,} times it an error",
    )
    lr_scale: float = _setting("lr_scale", "multiplies eq. (3); 1 is the paper's learning rate")
    save_steps: int = _setting("save_steps", "checkpoint interval")
    average_last: int = _setting("average_last", "checkpoints averaged into the final model (§6.1)")
    final_model: Literal[FINAL_MODELS] = _setting(  # type: ignore[valid-type]
        "final_model", "average of the last checkpoints, the best dev-BLEU checkpoint, or the last weights"
    )
    eval_steps: int = _setting("eval_steps", "decode the dev set greedily every N updates (0: never)")
    logging_steps: int = _setting("logging_steps", "log (and check) the loss every N updates")
    health_checks: bool = _setting(
        "health_checks", "stop on divergence or collapse (--no_health_checks trains on)"
    )
    seed: int = _setting("seed", "seed for initialisation, batches and held-out splits")
    resume: bool = _setting(
        "resume",
        "continue the run in --output_dir from its last checkpoint, with the settings its train_options.json "
        "records (flags left out take them from there; a flag given must equal it, but for "
        f"{', '.join(sorted(set(MAY_CHANGE_ON_RESUME) - {'resume'}))})",
    )
    overwrite: bool = _setting(
        "overwrite", "delete an earlier run in --output_dir first (else it needs --resume)"
    )
    cuda_section: bool | None = _setting(
        "cuda_section",
        "apply the recipe's cuda: section (none: when a CUDA GPU is present); the run prints and records what "
        "it applied",
    )
    num_beams: int | None = _setting(
        "num_beams",
        "beam size; above 1 kept in the final model's generation config (none: the model's, 4, §6.1)",
    )
    length_penalty: float | None = _setting(
        "length_penalty", "GNMT α, kept in the final model's generation config (none: the model's, 0.6, §6.1)"
    )
    length_penalty_choices: list[float] = _setting(
        "length_penalty_choices",
        "α values to decode the dev set with after training, when no --length_penalty is given: the one with the "
        "best dev sacreBLEU is kept in the final model's generation config (§6.1 chose α on the development set); "
        "without a dev set, the model's",
    )
    eval_batch_size: int = _setting("eval_batch_size", "sentences per decoding batch")
    split_compounds: bool = _setting("split_compounds", "WMT14 ##AT## compound splitting")
    examples: list[str] = _setting("examples", "sentences translated at the end")
    push_to_hub: str | None = _setting(
        "push_to_hub", "Hub repo id (user/name): push the final model with its model card"
    )
    hub_private: bool = _setting("hub_private", "with --push_to_hub: create the repo private")
    report_to: list[str] = _setting(
        "report_to", "also log to these trackers, e.g. tensorboard (installed separately); default none"
    )

    def __post_init__(self) -> None:
        self.output_dir, self.data_dir = Path(self.output_dir), Path(self.data_dir)
        self.config_overrides = JsonDict(self.config_overrides)
        for name in PATH_FIELDS:
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.replace("{data_dir}", str(self.data_dir)))
        files = {flag: getattr(self, flag) for split in SPLITS for flag in split}
        self.source_lang, self.target_lang = corpus_languages(
            files, self.hub_config, self.source_lang, self.target_lang
        )
        self._check_numbers()
        self._check_combinations()
        self._check_config_overrides()

    @classmethod
    def from_recipe(cls, name: str, **overrides: Any) -> "TrainOptions":
        """The options of a named recipe (or YAML file), with `overrides` on top; its cuda: section applies as
        `overrides["cuda_section"]` says (None: when a CUDA GPU is present)."""
        cuda = applies_cuda_section(overrides.get("cuda_section"))
        recipe = load_recipe(name, allowed=option_names(), cuda=cuda)
        options = cls(**{**recipe, "recipe": name, **overrides, "cuda_section": cuda})
        if not (fitted := fitted_to_steps(options)):
            return options
        return cls(**{**recipe, **fitted, "recipe": name, **overrides, "cuda_section": cuda})

    def _check_numbers(self) -> None:
        """Numbers are in range, with a message naming the flag; every float is finite (nan passes a check such
        as `> 0`, and a recipe's `.nan` or a flag's `inf` parse as floats)."""
        for option in fields(self):
            if isinstance(value := getattr(self, option.name), float):
                check_finite(f"--{option.name}", value)
        check_length_penalty("--length_penalty", self.length_penalty)
        for alpha in self.length_penalty_choices:
            check_length_penalty("--length_penalty_choices", alpha)
        if self.max_train_minutes is not None and self.max_train_minutes <= 0:
            raise ValueError(f"--max_train_minutes must be positive, got {self.max_train_minutes}.")
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
        for name in ("num_beams", "max_test_sentences", "max_dev_sentences", "fit_to_steps"):
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
        if self.warmup_steps > MAX_WARMUP_PER_STEP * self.max_steps:
            raise ValueError(
                f"--warmup_steps {self.warmup_steps:,} is beyond the reach of --max_steps {self.max_steps:,}: the "
                f"learning rate rises for {self.warmup_steps:,} steps (eq. (3)), so the run would end at "
                f"{self.max_steps:,}/{self.warmup_steps:,} of its peak and train nothing. Give --warmup_steps at "
                f"most --max_steps (the paper: 4,000 of 100,000), or raise --max_steps."
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
    def chooses_length_penalty(self) -> bool:
        """Whether the job chooses α on dev after training: --length_penalty_choices, and no --length_penalty."""
        return self.length_penalty is None and bool(self.length_penalty_choices)

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

    def warmup_shortfall(self) -> str | None:
        """A warning when the run ends (at --max_steps) before its warm-up does, else None."""
        if self.warmup_steps <= self.max_steps:
            return None
        return (
            f"warning: --warmup_steps {self.warmup_steps:,} is beyond --max_steps {self.max_steps:,}: training "
            f"ends while the learning rate still rises, at {self.max_steps:,}/{self.warmup_steps:,} of eq. (3)'s "
            "peak."
        )

    def _check_config_overrides(self) -> None:
        """--config_overrides names config keys (a typo is an error with a did-you-mean, never silently kept),
        and none that is a setting of its own (`OWN_SETTINGS`)."""
        from ..modeling.configuration_vaswani_transformer import VaswaniTransformerConfig

        known = {option.name for option in fields(VaswaniTransformerConfig)}
        known |= set(VaswaniTransformerConfig.attribute_map)
        for key in self.config_overrides:
            if key in OWN_SETTINGS:
                raise ValueError(f"--config_overrides cannot set {key}: {OWN_SETTINGS[key]}. Use --{key}.")
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"--config_overrides: {key!r} is not a key of the model's config.{hint}")

    def model_config(self) -> "VaswaniTransformerConfig":
        """The model's config: the preset with --dropout and --config_overrides (raises ValueError on bad values)."""
        from ..modeling.configuration_vaswani_transformer import VaswaniTransformerConfig

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


def record_fingerprint(record: Mapping[str, Any]) -> str:
    """A hash of a run's record (train_options.json, as JSON reads it back) over every value that may not change on
    --resume: written with the record, so that a hand edit of a seed or a learning rate, or a key added by hand, is
    told apart from the record the run wrote (--resume would otherwise take it as the run's own settings)."""
    fixed = {
        name: value
        for name, value in record.items()
        if name not in MAY_CHANGE_ON_RESUME and name != RECORD_FINGERPRINT
    }
    return hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:16]


def changed_on_resume(options: TrainOptions, record: dict[str, Any]) -> list[str]:
    """Each setting of `options` that differs from a run's record (its train_options.json, as `asdict` wrote it)
    and may not change on --resume, said as "--resume --vocab_size 400: the run was made with 300"; one the
    record lacks (a hand edit) as "... the run's record does not hold it"."""
    given = json.loads(json.dumps(asdict(options), default=str))  # the record's own spelling of each value
    return [
        f"--resume --{name} {_shown(given[name])}: "
        + (
            f"the run was made with {_shown(record[name])}"
            if name in record
            else "the run's record does not hold it"
        )
        for name in given
        if name not in MAY_CHANGE_ON_RESUME and record.get(name, _MISSING) != given[name]
    ]


_MISSING = object()  # a setting a run's record does not hold


def _shown(value: Any) -> str:
    """A setting's value as a flag takes it."""
    if value is None:
        return "none"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def recorded_settings(record: dict[str, Any]) -> dict[str, Any]:
    """A run's record as the defaults of a --resume: every setting it holds, but the command's own and the folder
    (which may have moved since)."""
    own = {"resume", "overwrite", "output_dir"}
    return {name: value for name, value in record.items() if name in option_names() - own}


def option_groups() -> dict[str, list[Field]]:
    """TrainOptions' fields by group (`GROUP_STARTS`), in their order: {title: fields}."""
    groups: dict[str, list[Field]] = {}
    title = ""
    for option in fields(TrainOptions):
        title = GROUP_STARTS.get(option.name, title)
        groups.setdefault(title, []).append(option)
    return groups


def option_names() -> set[str]:
    """The names of all settings: fields of TrainOptions, flags of the train command, keys of recipes."""
    return {option.name for option in fields(TrainOptions)}


# A GPU driver's device files (NVIDIA's, AMD's for ROCm builds of torch): where none exists torch.cuda sees no GPU, and
# asking torch would import it (seconds, for every --help).
GPU_DRIVER_FILES = (Path("/dev/nvidiactl"), Path("/dev/kfd"))


def applies_cuda_section(cuda_section: bool | None) -> bool:
    """Whether a recipe's cuda: section applies: as --cuda_section says, else when a CUDA GPU is present."""
    if cuda_section is not None:
        return cuda_section
    if sys.platform == "linux" and not any(path.exists() for path in GPU_DRIVER_FILES):
        return False
    import torch

    return torch.cuda.is_available()


def cuda_section_note(options: TrainOptions) -> str | None:
    """One line saying that the recipe's cuda: section replaced some of its values, and which; None when it did
    not (no recipe, no section, or not applied)."""
    if not options.cuda_section or options.recipe is None:
        return None
    applied = cuda_settings(options.recipe, allowed=option_names())
    if not applied:
        return None
    values = ", ".join(f"{name} {value}" for name, value in applied.items())
    return (
        f"recipe {options.recipe}: its cuda: section applies ({values}); --cuda_section false keeps the "
        "recipe's other values"
    )


def fitted_to_steps(options: TrainOptions) -> dict[str, Any]:
    """The values of the recipe's `by_steps:` row for the steps this run trains (`step_rate.steps_to_fit`), with
    those steps as `fit_to_steps`; empty where the recipe has no rows or they do not apply (a CUDA GPU, --resume).
    Flags given go on top of them."""
    if options.recipe is None or options.cuda_section or options.resume:
        return {}
    rows = by_steps_rows(options.recipe, allowed=option_names())
    if not rows:
        return {}
    from .step_rate import steps_to_fit  # torch: only where a row may apply

    steps = steps_to_fit(options, rows)
    return {**row_settings(row_for(rows, steps)), "fit_to_steps": steps}


def by_steps_note(options: TrainOptions) -> str | None:
    """One line saying which of the recipe's `by_steps:` rows the run was fitted to, for how many steps, and with
    which values; None where the recipe has no rows or they do not apply (a CUDA GPU, --resume)."""
    if options.recipe is None or options.cuda_section or options.resume or options.fit_to_steps is None:
        return None
    rows = by_steps_rows(options.recipe, allowed=option_names())
    if not rows:
        return None
    row = row_for(rows, options.fit_to_steps)
    fitted = f"recipe {options.recipe}, fitted to {options.fit_to_steps:,} steps:"
    if row is None:
        return f"{fitted} its own settings (its by_steps: rows are for fewer than {rows[-1][STEPS_BELOW]:,} steps)"
    values = ", ".join(f"{name} {getattr(options, name)}" for name in row_settings(row))
    return f"{fitted} its by_steps: row for fewer than {row[STEPS_BELOW]:,} steps ({values}; flags given win)"
