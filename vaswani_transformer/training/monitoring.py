"""Is training healthy, and how far along is it? The checks that stop a failed run, and the progress lines.

A run fails in one of two ways. It *diverges* (the loss becomes NaN or infinite), or it *collapses*: the model
stops using its input and decodes the same thing, often one repeated word, for every sentence. Either way its
BLEU means nothing, so `HealthCheck` stops the job with a `TrainingFailure` that says what happened and what to
change, instead of letting it save and report a result.
"""

import logging
import math
import threading
import time
import weakref
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


class RunningClock:
    """Seconds this process has run since `start()`: monotonic wall time less the stretches in which it did not run
    at all (stopped by SIGSTOP or Ctrl-Z in a shell, frozen with its container). A thread wakes every `tick`
    seconds; a wake-up later than `gap` seconds, across which the process used less than a tenth of a CPU, means
    the whole process stood still, and the lateness is left out. A thread kept waiting while its process runs (a
    long call holding the GIL) finds the process's CPU time grown, and nothing is left out; a process waiting for
    input or a GPU still wakes its thread on time. docs/training.md, "A time budget", says what counts."""

    IDLE_CPU_SHARE = 0.1

    def __init__(self, tick: float = 0.25, gap: float = 2.0) -> None:
        self.tick, self.gap = tick, gap
        self.left_out = 0.0  # seconds in which the process did not run
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._started = self._last = time.monotonic()
        self._last_cpu = time.process_time()

    def start(self) -> None:
        self.left_out, self._started = 0.0, time.monotonic()
        self._last, self._last_cpu = self._started, time.process_time()
        self._halt = threading.Event()
        # the thread holds the clock weakly: it ends with it, also when training ends by an exception
        watch = threading.Thread(
            target=_watch, args=(weakref.ref(self), self._halt), name="vaswani-running-clock"
        )
        watch.daemon = True
        watch.start()

    def stop(self) -> None:
        self._halt.set()

    def seconds(self) -> float:
        """The seconds run since `start()` (a stop that just ended is left out already)."""
        self.observe(time.monotonic(), time.process_time())
        return self._last - self._started - self.left_out

    def observe(self, now: float, cpu: float) -> None:
        """Account for the time from the last observation to `now`, the process's CPU time then being `cpu`."""
        with self._lock:
            elapsed = now - self._last
            if elapsed > self.tick + self.gap and cpu - self._last_cpu < self.IDLE_CPU_SHARE * elapsed:
                self.left_out += elapsed - self.tick
            self._last, self._last_cpu = max(now, self._last), cpu


def _watch(clock: "weakref.ref[RunningClock]", halt: threading.Event) -> None:
    """`RunningClock`'s thread: an observation every tick, until the clock is stopped or gone."""
    while (watched := clock()) is not None and not halt.wait(watched.tick):
        watched.observe(time.monotonic(), time.process_time())
        del watched


class TrainingTimeBudget(TrainerCallback):
    """Ends training once `minutes` of it have passed, counted over every session of the run (fairseq's
    --stop-time-hours) as the process ran (`RunningClock`: a stopped process's pause is left out); None: no
    budget, only the count. The step that reaches the budget is the last and saves a checkpoint, so stopping on
    time is a normal end (one line says so, and whether the warm-up of `warmup_steps` had ended): the final model
    averages the last checkpoints, and --resume goes on with what is left (the seconds trained so far go into every
    checkpoint's trainer_state.json). All processes of a multi-process run stop at the same step: the main
    process's clock decides."""

    def __init__(self, minutes: float | None, warmup_steps: int = 1) -> None:
        self.minutes, self.warmup_steps = minutes, warmup_steps
        self.before = 0.0  # trained in earlier sessions of the run
        self.clock = RunningClock()

    def on_train_begin(self, args, state: TrainerState, control, **kwargs) -> None:
        self.before = trained_seconds(state)
        self.clock.start()

    def on_train_end(self, args, state: TrainerState, control, **kwargs) -> None:
        self.clock.stop()

    def on_step_end(self, args, state: TrainerState, control, **kwargs) -> None:
        state.stateful_callbacks[TRAINED_SECONDS] = self.before + self.clock.seconds()
        if self.minutes is None:
            return
        if _main_process_says(trained_seconds(state) >= self.minutes * 60, args.device):
            control.should_training_stop = control.should_save = True
            if state.is_world_process_zero and state.global_step < state.max_steps:
                logger.info(self.ended_training(state.global_step, state.max_steps))

    def ended_training(self, step: int, max_steps: int) -> str:
        """The line that says the budget ended training at `step`."""
        line = f"the {self.minutes:g}-minute budget (--max_train_minutes) ended training at step {step} of {max_steps}"
        if step >= self.warmup_steps:
            return line
        return (
            f"{line}, within the warm-up (--warmup_steps {self.warmup_steps}): the learning rate rose to "
            f"{step / self.warmup_steps:.1%} of eq. (3)'s peak. Give a warm-up the budget reaches, or a larger budget."
        )


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
