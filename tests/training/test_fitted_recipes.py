"""A recipe fitted to the steps the machine trains (its by_steps: rows, the measurement that picks one, flags on
top, the record), and the length penalty chosen on dev after training (§6.1)."""

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import GenerationConfig

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.cli.train import parse_options
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.training import TrainOptions, step_rate
from vaswani_transformer.training.final_model import choose_length_penalty
from vaswani_transformer.training.options import by_steps_note

RECIPE = """
preset: tiny
vocab_size: 8000
max_steps: 10000
max_train_minutes: 8.5
warmup_steps: 300
dropout: 0.1
by_steps:
  - steps_below: 1000
    dropout: 0.0
    vocab_size: 2000
  - steps_below: 3000
    dropout: 0.05
"""


@pytest.fixture
def recipe(tmp_path: Path) -> str:
    path = tmp_path / "fitted.yaml"
    path.write_text(RECIPE, encoding="utf-8")
    return str(path)


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The step time the machine measures (seconds, one value a call), and what was asked of it."""
    seconds: list[float] = []
    monkeypatch.setattr(step_rate, "measured_step_seconds", lambda options: seconds.pop(0))
    return seconds


def test_a_run_shorter_than_a_rows_bound_takes_its_values_without_measuring(recipe, measured) -> None:
    options = parse_options(["--recipe", recipe, "--cuda_section", "false", "--max_steps", "500"])
    assert (options.dropout, options.vocab_size, options.fit_to_steps) == (0.0, 2000, 500)
    flagged = parse_options(
        ["--recipe", recipe, "--cuda_section", "false", "--max_steps", "500", "--dropout", "0.2"]
    )
    assert (flagged.dropout, flagged.vocab_size) == (0.2, 2000)  # a flag given wins over the row
    note = by_steps_note(flagged)
    assert note == (
        f"recipe {recipe}, fitted to 500 steps: its by_steps: row for fewer than 1,000 steps (dropout 0.2, "
        "vocab_size 2000; flags given win)"
    )


def test_the_steps_the_machine_is_measured_to_train_pick_the_row(recipe, measured) -> None:
    measured.extend([0.25, 0.01])
    slow = parse_options(["--recipe", recipe, "--cuda_section", "false"])  # 8.5 min at 0.25 s: 2,040 steps
    assert (slow.fit_to_steps, slow.dropout, slow.vocab_size) == (2040, 0.05, 8000)
    fast = parse_options(["--recipe", recipe, "--cuda_section", "false"])  # 51,000 steps: --max_steps ends it
    assert (fast.fit_to_steps, fast.dropout) == (10000, 0.1)
    assert "its own settings" in by_steps_note(fast)
    assert TrainOptions.from_recipe(recipe, cuda_section=False, fit_to_steps=999).vocab_size == 2000
    assert measured == []


def test_fit_to_steps_resume_and_the_cuda_section_measure_nothing(recipe, measured, tmp_path: Path) -> None:
    given = parse_options(["--recipe", recipe, "--cuda_section", "false", "--fit_to_steps", "1500"])
    assert (given.fit_to_steps, given.dropout) == (1500, 0.05)
    on_gpu = parse_options(["--recipe", recipe, "--cuda_section", "true"])
    assert (on_gpu.fit_to_steps, on_gpu.dropout, by_steps_note(on_gpu)) == (None, 0.1, None)
    resumed = parse_options(
        ["--recipe", recipe, "--cuda_section", "false", "--resume", "--output_dir", str(tmp_path)]
    )
    assert resumed.fit_to_steps is None  # a resumed run's values are its record's


@pytest.mark.parametrize(
    "rows, message",
    [
        ("- dropout: 0.0", "every row needs a positive whole steps_below"),
        ("- {steps_below: 3000, dropout: 0.0}\n  - {steps_below: 1000, dropout: 0.1}", "in ascending order"),
        ("- {steps_below: 3000, dropuot: 0.0}", "unknown setting(s) ['dropuot']"),
        ("dropout: 0.0", "a list of rows"),
    ],
)
def test_a_malformed_by_steps_section_is_refused_naming_it(tmp_path: Path, rows: str, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(f"preset: tiny\nby_steps:\n  {rows}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="by_steps: section") as error:
        parse_options(["--recipe", str(path), "--cuda_section", "false"])
    assert message in str(error.value)


def test_the_measurement_times_real_training_steps_of_the_runs_model() -> None:
    options = TrainOptions(
        preset="tiny",
        vocab_size=500,
        max_tokens=256,
        max_length=64,
        mixed_precision="no",
        max_train_minutes=1,
    )
    seconds = step_rate.measured_step_seconds(options)
    assert 0 < seconds < 60
    assert step_rate.expected_steps(options, seconds) == min(options.max_steps, int(60 / seconds))


def test_the_length_penalty_is_chosen_by_dev_bleu_and_kept_in_the_model(
    tmp_path: Path, letter_tokenizer
) -> None:
    """Of the α values tried, the one whose dev translations score best is kept, in memory and in the folder, and
    its translations are the ones returned: here the references are what α 3 translates, so α 3 must win, though it
    comes second."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30)).eval()
    with torch.no_grad():  # a random model that ends some of its beams: </s> likelier
        model.get_output_embeddings().weight[3] *= 2
    model.save_pretrained(tmp_path)
    sources = ["a b c", "d e f g h", "i j", "k l m n o p", "q r s", "t u v w"]
    long_outputs = translate(sources, model, letter_tokenizer, length_penalty=3.0)
    assert long_outputs != translate(sources, model, letter_tokenizer, length_penalty=0.0)  # α matters here
    dev = Dataset.from_dict({"source": sources, "target": long_outputs})
    options = TrainOptions(length_penalty_choices=[0.0, 3.0], target_lang="de", eval_batch_size=4)
    hypotheses, scores = choose_length_penalty(options, model, letter_tokenizer, dev, tmp_path)
    assert hypotheses == long_outputs
    assert scores["length_penalty_on_dev"]["3.0"] == pytest.approx(100.0)
    assert scores["length_penalty_on_dev"]["0.0"] < 50
    assert model.generation_config.length_penalty == 3.0
    assert GenerationConfig.from_pretrained(tmp_path).length_penalty == 3.0
    assert json.loads((tmp_path / "generation_config.json").read_text())["num_beams"] == 4  # the rest kept
