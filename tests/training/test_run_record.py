"""What a run's record holds beside its settings (its corpora's fingerprint, its vocabulary), what
--resume checks against it, and the checkpoints it will not continue from (the refusals themselves, exit 2 with
nothing written, are RESUME_CASES in tests/test_bad_inputs.py)."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from vaswani_transformer.cli.train import parse_options
from vaswani_transformer.data.corpora import TATOEBA_FILE
from vaswani_transformer.training.checkpoints import resume_problem, whole_checkpoints
from vaswani_transformer.training.checks import check_resume
from vaswani_transformer.training.options import RECORD_FINGERPRINT, record_fingerprint
from vaswani_transformer.training.run_folder import resume_point


@pytest.fixture
def run(trained_run, tmp_path: Path) -> Path:
    """A copy of the miniature main job's run folder (embedded Tatoeba, checkpoints 20, 40 and 60)."""
    folder = tmp_path / "run"
    shutil.copytree(trained_run.output_dir, folder, ignore=shutil.ignore_patterns("final", "runs"))
    return folder


def record(folder: Path) -> dict:
    return json.loads((folder / "train_options.json").read_text(encoding="utf-8"))


def rewrite_record(folder: Path, recorded: dict) -> None:
    """train_options.json as `recorded`, its fingerprint made anew: an edit that passes the fingerprint, for the
    checks behind it."""
    recorded = {**recorded, RECORD_FINGERPRINT: record_fingerprint(recorded)}
    (folder / "train_options.json").write_text(json.dumps(recorded), encoding="utf-8")


@pytest.mark.parametrize(
    "edit", [{"seed": 7}, {"lr_scale": 2.0}, {"warmup_steps": 3}, {"max_tokens": 999}, {"colour": "blue"}]
)
def test_a_hand_edited_record_is_refused_on_resume_as_the_same_flag_would_be(run: Path, edit: dict) -> None:
    """--resume takes its settings from the record: an edited one was taken silently, and the final record then
    named a learning rate the model mostly did not train with."""
    recorded = record(run) | edit
    (run / "train_options.json").write_text(json.dumps(recorded), encoding="utf-8")
    with pytest.raises(ValueError, match="train_options.json was edited after the run wrote it"):
        check_resume(parse_options(["--output_dir", str(run), "--resume"]))


def test_a_setting_that_may_change_on_resume_may_also_change_in_the_record(run: Path) -> None:
    (run / "train_options.json").write_text(json.dumps(record(run) | {"max_steps": 80}), encoding="utf-8")
    check_resume(parse_options(["--output_dir", str(run), "--resume"]))


class Payload:
    """What a pickle in a checkpoint could run: any callable, here `print`."""

    def __reduce__(self) -> tuple:
        return (print, ("ran",))


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_a_checkpoint_whose_state_pickles_code_is_set_aside_unloaded(run: Path, name: str, capsys) -> None:
    """The Trainer's weights_only load refused the payload only halfway through resuming, with a traceback whose
    advice (weights_only=False) would have run it: such a checkpoint is now incomplete before training starts."""
    torch.save({"state": Payload()}, run / "checkpoint-60" / name)
    problem = resume_problem(run / "checkpoint-60")
    assert name in problem and "holds objects other than tensors" in problem
    assert "weights_only=False" not in problem and "ran" not in capsys.readouterr().out
    assert whole_checkpoints(run, for_resume=True)[0][-1].name == "checkpoint-40"


def test_a_run_records_its_corpora_and_vocabulary_when_it_begins(run: Path) -> None:
    recorded = record(run)
    assert recorded["corpus_sha256"] == {
        "embedded_tatoeba": hashlib.sha256(TATOEBA_FILE.read_bytes()).hexdigest()
    }
    tokens = len(
        json.loads((run / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    )
    assert recorded["vocabulary"] == {"vocab_size": 400, "tokens": tokens}


@pytest.mark.parametrize("damaged", ["optimizer.pt", "scheduler.pt", "rng_state.pth", "tokenizer.json"])
def test_resume_sets_aside_a_checkpoint_with_a_damaged_file_and_continues_from_the_one_before(
    run: Path, damaged: str, caplog
) -> None:
    """The Trainer loaded a truncated optimizer.pt or tokenizer.json with a traceback: such a checkpoint is now
    incomplete, set aside like one with cut weights, and --resume continues from the last whole one."""
    path = run / "checkpoint-60" / damaged
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert damaged in resume_problem(run / "checkpoint-60") and "cut short or damaged" in resume_problem(
        run / "checkpoint-60"
    )
    check_resume(parse_options(["--output_dir", str(run), "--resume"]))  # passes: checkpoint-40 is whole
    assert resume_point(run, resume=True, is_main=True) == str(run / "checkpoint-40")
    assert (run / "incomplete-checkpoint-60" / damaged).is_file() and not (run / "checkpoint-60").exists()
    assert any(
        "skipping an incomplete checkpoint" in message and damaged in message for message in caplog.messages
    )


def test_a_checkpoint_without_its_optimiser_state_is_not_resumed_but_still_averaged(run: Path) -> None:
    """Without optimizer.pt the Trainer would go on with a fresh Adam, silently; averaging needs only weights."""
    (run / "checkpoint-60" / "optimizer.pt").unlink()
    assert "the optimiser's state is missing" in resume_problem(run / "checkpoint-60")
    assert whole_checkpoints(run, for_resume=True)[0][-1].name == "checkpoint-40"
    assert whole_checkpoints(run)[0][-1].name == "checkpoint-60"


@pytest.mark.parametrize("key", ["corpus_sha256", "vocabulary"])
def test_a_record_without_its_inputs_is_refused(run: Path, key: str) -> None:
    """Every run's record holds its corpora's fingerprint and its vocabulary: one without is edited, and --resume
    could not check the run's inputs against it."""
    recorded = record(run)
    del recorded[key]
    rewrite_record(run, recorded)
    with pytest.raises(ValueError, match=f"train_options.json holds no {key} .every run's record does"):
        check_resume(parse_options(["--output_dir", str(run), "--resume"]))


def test_a_vocabulary_larger_than_vocab_size_with_merges_contradicts_the_record(run: Path) -> None:
    """A record whose vocab_size was edited together with its vocabulary's: a --vocab_size below the vocabulary's
    size is a contradiction whenever BPE learnt merges, since only a corpus's characters and the special tokens
    can exceed the size asked for."""
    recorded = record(run)
    edited = {"vocab_size": 100, "vocabulary": {**recorded["vocabulary"], "vocab_size": 100}}
    rewrite_record(run, recorded | edited)
    with pytest.raises(
        ValueError, match="says vocab_size 100, but the run's vocabulary .* merges among them"
    ):
        check_resume(parse_options(["--output_dir", str(run), "--resume"]))
