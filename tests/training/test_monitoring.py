"""Health checks: the unigram floor, degenerate translations, and the guard that stops diverged or collapsed runs;
the progress line."""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainerControl, TrainerState

from tests.conftest import paper_arguments, tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.data import tokenize_parallel
from vaswani_transformer.data.token_arrays import TokenizedPairs
from vaswani_transformer.training import build_trainer, monitoring
from vaswani_transformer.training.monitoring import (
    TRAINED_SECONDS,
    HealthCheck,
    RunningClock,
    TrainingCollapsed,
    TrainingDiverged,
    TrainingProgress,
    TrainingTimeBudget,
    collapse_check_step,
    collapse_symptom,
    is_degenerate,
    translation_symptom,
    unigram_loss,
)


def test_unigram_loss_is_the_loss_of_the_best_constant_prediction() -> None:
    """The floor equals the label-smoothed cross-entropy of predicting the smoothed unigram distribution at every
    position, and every other constant prediction does worse."""
    labels = [[4, 4, 5, 3], [4, 3], [6, 6, 6, 4, 5, 3]]
    vocab, smoothing = 9, 0.1
    flat = torch.tensor([token for row in labels for token in row])
    counts = torch.bincount(flat, minlength=vocab).double()
    floor = unigram_loss(counts.numpy(), smoothing)
    target = (1 - smoothing) * counts / counts.sum() + smoothing / vocab
    loss_of = lambda logits: torch.nn.functional.cross_entropy(  # noqa: E731
        logits.expand(len(flat), vocab), flat, label_smoothing=smoothing
    )
    assert floor == pytest.approx(loss_of(target.log()).item(), rel=1e-9)
    torch.manual_seed(0)
    for _ in range(20):
        other = target.log() + 0.3 * torch.randn(vocab, dtype=torch.float64)
        assert loss_of(other).item() > floor


@pytest.mark.parametrize(
    ("translation", "degenerate"),
    [("", True), ("   ", True), ("fl fl fl fl", True), ("auf dem zug.", False), ("Ich liebe dich.", False)],
)
def test_degenerate_translations(translation: str, degenerate: bool) -> None:
    assert is_degenerate(translation) is degenerate


def test_collapse_symptoms_of_translation_samples() -> None:
    working = ["Ich liebe dich.", "Wo ist der Bahnhof?", "Tom liest ein Buch.", "Hallo!"]
    assert translation_symptom(working) is None
    assert "empty or one repeated word" in translation_symptom(["fl fl fl", "", "fl fl", "Ja, gut."])
    assert "differ from each other" in translation_symptom(
        ["ein mann .", "ein mann .", "ein mann .", "ein mann .", "Hallo."]
    )
    assert collapse_symptom(0.5, 0.5) is None  # the thresholds themselves still pass


def test_collapse_is_judged_after_warm_up_and_not_before_200_steps() -> None:
    assert collapse_check_step(4000) == 4000
    assert collapse_check_step(30) == 200


def log(check: HealthCheck, step: int, **logs: float) -> None:
    check.on_log(None, TrainerState(global_step=step), TrainerControl(), logs=logs)


def test_health_check_rules() -> None:
    check = HealthCheck(unigram_floor=5.0, check_from=100, advice="Lower --lr_scale.")
    log(check, 50, loss=7.0)  # above the floor, but still in warm-up: fine
    log(check, 100, loss=4.9)
    with pytest.raises(
        TrainingCollapsed, match=r"at step 100 the loss is 5\.100, not below 5\.000.*Lower --lr_scale"
    ):
        log(check, 100, loss=5.1)
    with pytest.raises(TrainingDiverged, match="loss became nan at step 3"):
        log(check, 3, loss=float("nan"), learning_rate=1e-3)
    state = TrainerState(global_step=150)
    check.on_evaluate(None, state, TrainerControl(), metrics={"eval_degenerate": 0.1, "eval_distinct": 0.9})
    with pytest.raises(TrainingCollapsed, match="80% of the translations are empty or one repeated word"):
        check.on_evaluate(
            None, state, TrainerControl(), metrics={"eval_degenerate": 0.8, "eval_distinct": 0.9}
        )
    alike = {"eval_degenerate": 0.0, "eval_distinct": 0.1}  # the same fluent sentence for every source
    check.on_evaluate(None, state, TrainerControl(), metrics=alike)  # still learning to read the source
    with pytest.raises(TrainingCollapsed, match="at step 200 only 10% of the translations differ"):
        check.on_evaluate(None, TrainerState(global_step=200), TrainerControl(), metrics=alike)


@pytest.fixture(scope="module")
def reversal_pairs(letter_tokenizer) -> Dataset:
    """2,000 letter sequences and their reversals, tokenised with lengths (the §5.1 sampler's input)."""
    rng = random.Random(0)
    sources = [" ".join(rng.choices("abcdefghij", k=rng.randint(2, 7))) for _ in range(2000)]
    pairs = Dataset.from_dict({"source": sources, "target": [" ".join(reversed(s.split())) for s in sources]})
    return tokenize_parallel(pairs, letter_tokenizer)[0]


class PoisonWeights(TrainerCallback):
    """Sets one weight to NaN after update `step`: a forced divergence."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, model=None, **kwargs) -> None:
        if state.global_step == self.step:
            with torch.no_grad():
                model.model.encoder.layers[0].feed_forward.fc1.weight.fill_(float("nan"))


def train_reversal(
    tokenizer, pairs: Dataset, output_dir: Path, *, lr_scale: float, extra_callbacks=(), max_steps: int = 220
):
    """The paper's recipe with the health check on a tiny model: warm-up 50, judged from step 200."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    args = paper_arguments(
        output_dir,
        32,
        max_steps=max_steps,
        warmup_steps=50,
        lr_scale=lr_scale,
        logging_steps=10,
        save_steps=10**6,
        use_cpu=True,
    )
    label_counts = TokenizedPairs.from_dataset(pairs).target_counts(len(tokenizer))
    floor = unigram_loss(label_counts, model.config.label_smoothing)
    check = HealthCheck(floor, collapse_check_step(50), advice="Lower --lr_scale.")
    trainer = build_trainer(
        model, tokenizer, pairs, args, max_tokens=256, callbacks=[check, *extra_callbacks]
    )
    trainer.train()
    return trainer, floor


@pytest.mark.slow  # a training run of 200+ steps (the rules themselves: test_health_check_rules)
def test_a_healthy_run_passes_the_check(letter_tokenizer, reversal_pairs, tmp_path: Path) -> None:
    trainer, floor = train_reversal(letter_tokenizer, reversal_pairs, tmp_path, lr_scale=0.1)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 220 and losses[-1] < floor


@pytest.mark.slow  # a training run of 200+ steps (the rules themselves: test_health_check_rules)
def test_a_learning_rate_far_too_high_is_stopped_as_collapse(
    letter_tokenizer, reversal_pairs, tmp_path
) -> None:
    """eq. (3) as written at d_model 32 peaks at 0.025: the model never leaves the unigram floor."""
    with pytest.raises(TrainingCollapsed, match="at step 200 the loss is") as failure:
        train_reversal(letter_tokenizer, reversal_pairs, tmp_path, lr_scale=1.0)
    assert "Lower --lr_scale" in str(failure.value)


def test_a_nan_loss_is_stopped_as_divergence(letter_tokenizer, reversal_pairs, tmp_path: Path) -> None:
    poison = PoisonWeights(step=15)
    with pytest.raises(TrainingDiverged, match="the loss became nan at step 20"):
        train_reversal(letter_tokenizer, reversal_pairs, tmp_path, lr_scale=0.1, extra_callbacks=[poison])


@pytest.mark.parametrize(("budget_minutes", "eta"), [(None, "ETA 499:10"), (1.0, "ETA 0:10")])
def test_the_progress_line_counts_down_to_whichever_end_comes_first(
    budget_minutes: float | None, eta: str, caplog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a time budget (the main job's normal end) the ETA is the budget's, not that of a step cap the
    run will not reach; without one it is the step count's."""
    now = [1000.0]  # the progress line's clock, stopped: the test computes no time of its own
    monkeypatch.setattr(monitoring.time, "perf_counter", lambda: now[0])
    progress = TrainingProgress(budget_minutes)
    state = TrainerState(global_step=0, max_steps=60_000)
    progress.on_train_begin(None, state, TrainerControl())
    now[0] += 50.0  # 100 steps in 50 seconds: 0.5 s a step
    state.global_step = 100
    state.stateful_callbacks[TRAINED_SECONDS] = 50.0
    caplog.set_level("INFO")
    progress.on_log(None, state, TrainerControl(), logs={"loss": 2.0, "learning_rate": 1e-3})
    assert caplog.messages[-1].endswith(eta)


def test_the_running_clock_leaves_out_a_stretch_in_which_the_process_did_not_run() -> None:
    """A 60 s SIGSTOP once counted against --max_train_minutes. The clock's thread wakes every tick; a wake-up
    late by more than `gap` with (almost) no CPU used meanwhile is a stop, left out. Late while the process ran (a
    long call holding the GIL) or late by less than `gap` counts."""
    clock = RunningClock(tick=0.25, gap=2.0)
    now, cpu = time.monotonic(), time.process_time()
    clock.observe(now, cpu)
    clock.observe(now + 60.25, cpu + 0.01)  # stopped for a minute
    assert clock.left_out == pytest.approx(60.0)
    clock.observe(now + 120.5, cpu + 50.0)  # a minute late, but the process computed all along
    clock.observe(now + 122.0, cpu + 50.0)  # 1.25 s late: within the gap
    assert clock.left_out == pytest.approx(60.0)


CHILD = """
import sys, time
from vaswani_transformer.training.monitoring import RunningClock
clock = RunningClock()
clock.start()
began = time.monotonic()
print("ready", flush=True)
sys.stdin.readline()  # the parent stops the process, continues it, then writes a line
print(clock.seconds(), time.monotonic() - began, flush=True)
"""


@pytest.mark.slow  # a process stopped for 4 s
def test_a_sigstop_is_left_out_of_the_time_a_process_ran() -> None:
    """The real thing: a process stopped for 4 s and continued counts about 4 s less than the wall clock, though
    it waited for input all along (a waiting process still wakes the clock's thread on time)."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(4)
        os.kill(child.pid, signal.SIGCONT)
        ran, wall = map(float, child.communicate("go\n", timeout=120)[0].split())
    finally:
        child.kill()
    assert wall >= 4 and wall - 4.5 < ran < wall - 3


def test_the_budget_says_that_it_ended_training_and_whether_warm_up_had_ended(caplog) -> None:
    """No line said that the budget ended training; now one does, and a budget that ends it within the
    warm-up says how far the learning rate rose."""
    caplog.set_level("INFO")
    budget = TrainingTimeBudget(minutes=1e-6, warmup_steps=8)
    state, control = TrainerState(global_step=0, max_steps=100), TrainerControl()
    budget.on_train_begin(None, state, control)
    time.sleep(0.01)
    state.global_step = 2
    budget.on_step_end(SimpleNamespace(device=torch.device("cpu")), state, control)
    budget.on_train_end(None, state, control)
    assert control.should_training_stop and control.should_save
    assert caplog.messages[-1] == (
        "the 1e-06-minute budget (--max_train_minutes) ended training at step 2 of 100, within the warm-up "
        "(--warmup_steps 8): the learning rate rose to 25.0% of eq. (3)'s peak. Give a warm-up the budget reaches, "
        "or a larger budget."
    )
    assert budget.ended_training(50, 100) == (
        "the 1e-06-minute budget (--max_train_minutes) ended training at step 50 of 100"
    )
