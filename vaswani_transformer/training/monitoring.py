"""Is training healthy, and how far along is it? The checks that stop a failed run, and the progress lines.

A run fails in one of two ways. It *diverges* (the loss becomes NaN or infinite), or it *collapses*: the model
stops using its input and decodes the same thing, often one repeated word, for every sentence. Either way its
BLEU means nothing, so `HealthCheck` stops the job with a `TrainingFailure` that says what happened and what to
change, instead of letting it save and report a result.
"""

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from transformers import (
    EvalPrediction,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from ..data.tokenization import lowercases
from ..evaluation.bleu import sacre_bleu

logger = logging.getLogger(__name__)

# A healthy model's loss falls below the unigram floor within this many updates in every run measured
# (docs/decisions/initialisation.md), so collapse is judged from here on, and only after warm-up.
MIN_STEPS_BEFORE_COLLAPSE_CHECK = 200
# A collapsed model gives the same (or an empty / one-word) translation for most inputs.
MAX_DEGENERATE_SHARE = 0.5
MIN_DISTINCT_SHARE = 0.5


class TrainingFailure(RuntimeError):
    """Training produced a model that is not worth saving or scoring; the message says what to change."""


class TrainingDiverged(TrainingFailure):
    """The loss became NaN or infinite."""


class TrainingCollapsed(TrainingFailure):
    """The model ignores its input: loss stuck at the unigram floor, or degenerate translations."""


def unigram_loss(label_counts: np.ndarray, label_smoothing: float) -> float:
    """The label-smoothed loss of the best predictor that ignores the source and the target prefix, from how often
    each of the vocabulary's ids occurs among the labels (`TokenizedPairs.target_counts`).

    With smoothing ε the training target of a token y is (1 - ε)·onehot(y) + ε/V, so the best constant prediction
    is the average target T = (1 - ε)·p + ε/V (p: unigram frequencies of the labels) and its loss is the entropy
    H(T). A model whose loss stays at this floor has learnt nothing beyond word frequencies.
    """
    counts = np.asarray(label_counts, dtype=np.float64)
    target = (1.0 - label_smoothing) * counts / counts.sum() + label_smoothing / len(counts)
    return float(-(target * np.log(target)).sum())


def is_degenerate(translation: str) -> bool:
    """Empty, or one word repeated ("fl fl fl"): what a collapsed model produces."""
    return len(set(translation.split())) <= 1


def collapse_check_step(warmup_steps: int) -> int:
    """The first update at which a run is judged for collapse: after warm-up, and not before 200 updates."""
    return max(warmup_steps, MIN_STEPS_BEFORE_COLLAPSE_CHECK)


def collapse_symptom(degenerate_share: float, distinct_share: float) -> str | None:
    """What is wrong with a sample of translations, or None when it looks like a working model's."""
    if degenerate_share > MAX_DEGENERATE_SHARE:
        return f"{degenerate_share:.0%} of the translations are empty or one repeated word"
    if distinct_share < MIN_DISTINCT_SHARE:
        return f"only {distinct_share:.0%} of the translations differ from each other"
    return None


def translation_shares(translations: Sequence[str]) -> tuple[float, float]:
    """The shares of degenerate and of distinct translations in a list of translations of different sentences."""
    count = len(translations)
    return sum(map(is_degenerate, translations)) / count, len(set(translations)) / count


def translation_symptom(translations: Sequence[str]) -> str | None:
    """`collapse_symptom` of a list of translations of different sentences."""
    return collapse_symptom(*translation_shares(translations))


def failure_advice(lr_scale: float, peak_lr: float, warmup_steps: int, init_scheme: str) -> str:
    """What to change after a failed run, in the job's own flags."""
    switch = (
        " or switch --config_overrides init_scheme 'xavier' to 'normal'," if init_scheme == "xavier" else ""
    )
    return (
        f"Lower the peak learning rate (--lr_scale {lr_scale:g} gives {peak_lr:.2e}), lengthen "
        f"--warmup_steps ({warmup_steps}),{switch} then rerun with a new --output_dir. "
        "--no_health_checks trains on regardless."
    )


class HealthCheck(TrainerCallback):
    """Stops training on divergence (any step) or collapse (from `check_from` on).

    Collapse: the logged training loss is not below `unigram_floor`, or the greedy dev translations logged by
    `evaluation.dev_metrics` are mostly degenerate, or (from twice `check_from`) mostly identical. Every process sees the same gathered
    losses and metrics, so all processes of a distributed run stop together. `advice` ends each message.
    """

    def __init__(self, unigram_floor: float, check_from: int, advice: str) -> None:
        self.unigram_floor = unigram_floor
        self.check_from = check_from
        self.advice = advice

    def on_log(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, logs=None, **kwargs
    ) -> None:
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        step, lr = state.global_step, logs.get("learning_rate", float("nan"))
        if not math.isfinite(loss):
            raise TrainingDiverged(
                f"Training diverged: the loss became {loss} at step {step} (learning rate {lr:.2e}). "
                + self.advice
            )
        if step >= self.check_from and loss >= self.unigram_floor:
            raise TrainingCollapsed(
                f"Training collapsed: at step {step} the loss is {loss:.3f}, not below {self.unigram_floor:.3f}, "
                "the loss of predicting word frequencies alone; the model has learnt nothing from its input. "
                + self.advice
            )

    def on_evaluate(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, metrics=None, **kwargs
    ) -> None:
        metrics, step = metrics or {}, state.global_step
        if step < self.check_from or "eval_degenerate" not in metrics:
            return
        # A large model on small batches can still translate every sentence alike at the end of warm-up while it
        # is learning (base on CPU-sized batches, docs/decisions/initialisation.md): mostly identical translations
        # count as collapse only from twice that step; empty or one-word translations count at once.
        distinct = metrics["eval_distinct"] if step >= 2 * self.check_from else 1.0
        symptom = collapse_symptom(metrics["eval_degenerate"], distinct)
        if symptom:
            raise TrainingCollapsed(
                f"Training collapsed: at step {step} {symptom} (greedy decoding of the dev set). "
                + self.advice
            )


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


class ResumedCadence(TrainerCallback):
    """Logging and dev decoding every --logging_steps and --eval_steps of this command, which --resume may change:
    the Trainer restores the checkpoint's cadence with its state (and warns that the arguments differ)."""

    def on_train_begin(self, args, state: TrainerState, control, **kwargs) -> None:
        state.compute_steps(args, state.max_steps)


TRAINED_SECONDS = "vaswani_trained_seconds"  # the run's training time so far, kept in trainer_state.json


def trained_seconds(state: TrainerState) -> float:
    """Seconds the run has trained up to `state`, over all its sessions (0 for a checkpoint without the record)."""
    return float(state.stateful_callbacks.get(TRAINED_SECONDS, 0.0))


class TrainingTimeBudget(TrainerCallback):
    """Ends training once `minutes` of it have passed, counted over every session of the run (fairseq's
    --stop-time-hours); None: no budget, only the count. The step that reaches the budget is the last and saves a
    checkpoint, so stopping on time is a normal end: the final model averages the last checkpoints, and --resume
    goes on with what is left (the seconds trained so far go into every checkpoint's trainer_state.json). All
    processes of a multi-process run stop at the same step: the main process's clock decides."""

    def __init__(self, minutes: float | None) -> None:
        self.budget = None if minutes is None else minutes * 60
        self.before = 0.0  # trained in earlier sessions of the run
        self.started = time.perf_counter()

    def on_train_begin(self, args, state: TrainerState, control, **kwargs) -> None:
        self.before = trained_seconds(state)
        self.started = time.perf_counter()

    def on_step_end(self, args, state: TrainerState, control, **kwargs) -> None:
        state.stateful_callbacks[TRAINED_SECONDS] = self.before + time.perf_counter() - self.started
        if self.budget is not None and _main_process_says(trained_seconds(state) >= self.budget, args.device):
            control.should_training_stop = control.should_save = True


def _main_process_says(decision: bool, device: torch.device) -> bool:
    """The main process's `decision`, in every process (the same decision alone, when there is one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return decision
    flag = torch.tensor([float(decision)], device=device)
    dist.broadcast(flag, src=0)
    return bool(flag.item())


class TrainingProgress(TrainerCallback):
    """Logs one line per logging step: loss, learning rate, target tokens/s, last dev BLEU, time and ETA. With a
    time budget (`budget_minutes`) the ETA is whichever end comes first, the budget's or the step count's."""

    def __init__(self, budget_minutes: float | None = None) -> None:
        self.started = time.perf_counter()
        self.first_step = 0
        self.dev = "dev BLEU -"
        self.budget = None if budget_minutes is None else budget_minutes * 60

    def on_train_begin(self, args, state: TrainerState, control, **kwargs) -> None:
        self.started = time.perf_counter()
        self.first_step = state.global_step  # > 0 when resuming: the ETA counts only this session's steps

    def on_log(self, args, state: TrainerState, control, logs=None, **kwargs) -> None:
        logs = logs or {}
        if not state.is_world_process_zero:
            return
        step, total = state.global_step, state.max_steps
        if "eval_bleu" in logs:
            self.dev = f"dev BLEU {logs['eval_bleu']:.1f} (step {step})"
            # The Trainer records best_metric when it saves, after this log: fold the new score in here.
            best = max(logs["eval_bleu"], state.best_metric if state.best_metric is not None else -1.0)
            logger.info(
                f"step {step}/{total}  dev: greedy BLEU {logs['eval_bleu']:.2f} (best {best:.2f}), NLL {logs['eval_loss']:.3f}, "
                f"{logs['eval_degenerate']:.0%} degenerate, {logs['eval_distinct']:.0%} distinct"
            )
        if "loss" in logs:
            elapsed = time.perf_counter() - self.started
            remaining = elapsed / max(step - self.first_step, 1) * (total - step)
            if self.budget is not None:
                remaining = min(remaining, max(self.budget - trained_seconds(state), 0.0))
            tokens = logs.get("target_tokens_per_second", 0) / 1000
            logger.info(
                f"step {step}/{total}  loss {logs['loss']:.3f}  lr {logs.get('learning_rate', 0):.2e}  "
                f"{tokens:.1f}k target tokens/s  {self.dev}  {_duration(elapsed)} elapsed, ETA {_duration(remaining)}"
            )


def dev_metrics(tokenizer: PreTrainedTokenizerBase) -> Callable[[EvalPrediction], dict[str, float]]:
    """`compute_metrics` for greedy dev decoding during training: BLEU, and the shares of degenerate and of
    distinct translations (what `monitoring.HealthCheck` reads).

    References are the decoded labels (the tokenizer's normalised text), so this tracks progress; the reported
    scores come from `evaluation.translate_and_score` on raw references.
    """
    lowercase = lowercases(tokenizer)

    def decode(ids: Any) -> list[str]:
        ids = ids.copy()
        ids[ids < 0] = tokenizer.pad_token_id
        return [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]

    def compute(prediction: EvalPrediction) -> dict[str, float]:
        hypotheses, references = decode(prediction.predictions), decode(prediction.label_ids)
        degenerate, distinct = translation_shares(hypotheses)
        return {
            "bleu": sacre_bleu(hypotheses, references, lowercase=lowercase)["score"],
            "degenerate": degenerate,
            "distinct": distinct,
        }

    return compute
