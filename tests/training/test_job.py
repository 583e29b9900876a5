"""The end-to-end job: recipe → data → BPE → training → final model → dev/test scores, resume, two processes."""

import contextlib
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Seq2SeqTrainingArguments

from tests.conftest import TINY, tatoeba_files
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer import precision as precision
from vaswani_transformer.data import TokenBudgetBatchSampler, load_parallel, tokenize_parallel
from vaswani_transformer.data.prepared import content_digest
from vaswani_transformer.precision import cpu_bf16_decodes_faster
from vaswani_transformer.training import TrainOptions, check_inputs, final_model, job_data, train_and_evaluate
from vaswani_transformer.training.monitoring import TrainingCollapsed
from vaswani_transformer.training.options import MAY_CHANGE_ON_RESUME, option_names
from vaswani_transformer.training.run_folder import LOCK_FILE, PRECISION_FILE, RunFolderError
from vaswani_transformer.training.run_precision import RunPrecision, precision_name, run_precision

REPO = Path(__file__).resolve().parents[2]


def decided_precision(options: TrainOptions, is_main_process: bool) -> RunPrecision:
    """`run_precision` of a run with these options, one process playing every role."""
    in_turn = lambda step: contextlib.nullcontext()  # noqa: E731
    return run_precision(
        options.output_dir, options.mixed_precision, options.resume, is_main_process, in_turn
    )


def first_lines(path: Path, count: int, destination: Path) -> str:
    destination.write_text("".join(path.open(encoding="utf-8").readlines()[:count]), encoding="utf-8")
    return str(destination)


@pytest.mark.slow
def test_multi30k_recipe_in_miniature(shared_data: Path, tmp_path: Path, caplog) -> None:
    """The multi30k recipe on 400 real pairs: dev BLEU while training, averaged checkpoints, lowercased scores."""
    m30k = shared_data / "multi30k"
    options = TrainOptions.from_recipe(
        "multi30k",
        data_dir=shared_data,
        output_dir=tmp_path / "run",
        train_source=first_lines(m30k / "train.en", 400, tmp_path / "train.en"),
        train_target=first_lines(m30k / "train.de", 400, tmp_path / "train.de"),
        dev_source=first_lines(m30k / "val.en", 12, tmp_path / "val.en"),
        dev_target=first_lines(m30k / "val.de", 12, tmp_path / "val.de"),
        max_test_sentences=20,
        config_overrides=TINY,
        vocab_size=500,
        max_tokens=1024,
        max_steps=24,
        warmup_steps=8,
        save_steps=8,
        eval_steps=8,
        average_last=3,
        logging_steps=4,
        num_beams=2,
        examples=["A dog runs."],
    )
    caplog.set_level("INFO")
    result = train_and_evaluate(options)
    run = tmp_path / "run"
    # summaries are logged as they are computed, before training
    messages = [record.getMessage() for record in caplog.records]
    first_progress = next(i for i, message in enumerate(messages) if message.startswith("step 4/24"))
    assert any("kept 400" in message for message in messages[:first_progress])
    assert any(message.startswith("tokenised 400 pairs") for message in messages[:first_progress])
    state = json.loads((run / "checkpoint-24" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert losses[-1] < losses[0]
    assert [entry["step"] for entry in state["log_history"] if "eval_bleu" in entry] == [8, 16, 24]
    model_dir = result.model_dir
    assert len((model_dir / "hypotheses.txt").read_text(encoding="utf-8").splitlines()) == 20
    scores = json.loads((model_dir / "scores.json").read_text())
    assert "case:lc" in scores["sacrebleu"]["signature"]  # a lowercased model is scored lowercased
    assert scores["tokenized_bleu"]["ref_len"] > 0 and scores["num_sentences"] == 20
    assert scores["decoding"] == {
        "engine": "torch",
        "quantization": "none",
        "num_beams": 2,
        "do_sample": False,
        # the job scores in the precision translate() picks on this CPU (bf16 autocast where it decodes faster at
        # the model's width)
        "dtype": "bfloat16 (autocast over float32 weights)"
        if cpu_bf16_decodes_faster(json.loads((model_dir / "config.json").read_text())["d_model"])
        else "float32",
        "length_penalty": 1.0,  # the recipe's, chosen on val
        "length_penalty_type": "gnmt",
        "early_stopping": True,
        "max_new_tokens": "each source + 50",
    }
    assert json.loads((model_dir / "dev_scores.json").read_text())["num_sentences"] == 12
    assert result.dev_scores["num_sentences"] == 12
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert isinstance(model, VaswaniTransformerForConditionalGeneration)
    assert len(tokenizer) == model.config.vocab_size
    assert model.generation_config.max_length is None  # dev decoding left "input + 50" in place
    # the saved model decodes as it was scored: the run's beam and the recipe's α, the paper's other settings
    assert (model.generation_config.num_beams, model.generation_config.length_penalty) == (2, 1.0)
    assert model.generation_config.early_stopping is True
    # the final model is the mean of the last 3 checkpoints (§6.1 checkpoint averaging)
    checkpoints = [run / f"checkpoint-{step}" for step in (8, 16, 24)]
    weights = [AutoModelForSeq2SeqLM.from_pretrained(c).lm_head.weight for c in checkpoints]
    torch.testing.assert_close(model.lm_head.weight, torch.stack(weights).mean(0))
    assert list(result.example_translations) == ["A dog runs."]
    assert (model_dir / "training_curve.png").read_bytes().startswith(b"\x89PNG")
    saved_options = json.loads((model_dir / "train_options.json").read_text())
    assert saved_options["recipe"] == "multi30k" and saved_options["max_steps"] == 24
    # the evaluation CLI, as a user runs it (a script named like a library it imports would shadow it)
    command = [sys.executable, "scripts/evaluate_model.py", str(model_dir), "--num-beams", "1"]
    command += ["--source", options.test_source, "--references", options.test_target]
    job_scores = (model_dir / "scores.json").read_text()
    evaluation = model_dir.parent / f"{model_dir.name}-evaluation"  # beside the model, never inside it
    first = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=True)
    assert "sacreBLEU" in first.stdout and (evaluation / "scores.json").is_file()
    refused = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert refused.returncode == 2 and "--name" in refused.stderr and "--overwrite" in refused.stderr
    subprocess.run([*command, "--name", "val"], capture_output=True, text=True, cwd=REPO, check=True)
    assert json.loads((evaluation / "val_scores.json").read_text())["decoding"]["num_beams"] == 1
    assert (evaluation / "val_hypotheses.txt").is_file()
    assert (model_dir / "scores.json").read_text() == job_scores and not (
        model_dir / "val_scores.json"
    ).exists()


def test_final_model_best_is_the_best_dev_checkpoint(shared_data: Path, tmp_path: Path) -> None:
    m30k = shared_data / "multi30k"
    options = TrainOptions(
        output_dir=tmp_path / "run",
        train_source=first_lines(m30k / "train.en", 200, tmp_path / "train.en"),
        train_target=first_lines(m30k / "train.de", 200, tmp_path / "train.de"),
        test_source=first_lines(m30k / "val.en", 5, tmp_path / "test.en"),
        test_target=first_lines(m30k / "val.de", 5, tmp_path / "test.de"),
        dev_size=10,
        config_overrides=TINY,
        vocab_size=300,
        max_tokens=512,
        max_steps=9,
        warmup_steps=3,
        save_steps=3,
        eval_steps=3,
        average_last=1,
        final_model="best",
        num_beams=1,
        examples=[],
    )
    result = train_and_evaluate(options)
    state = json.loads((tmp_path / "run" / "checkpoint-9" / "trainer_state.json").read_text())
    best_step = state["best_global_step"]
    best = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "run" / f"checkpoint-{best_step}")
    final = AutoModelForSeq2SeqLM.from_pretrained(result.model_dir)
    torch.testing.assert_close(final.lm_head.weight, best.lm_head.weight)


@pytest.mark.slow  # two training jobs
def test_resume_continues_from_the_last_checkpoint(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    m30k = shared_data / "multi30k"
    common = {
        "output_dir": tmp_path / "run",
        "train_source": first_lines(m30k / "train.en", 200, tmp_path / "train.en"),
        "train_target": first_lines(m30k / "train.de", 200, tmp_path / "train.de"),
        "test_source": first_lines(m30k / "val.en", 5, tmp_path / "val.en"),
        "test_target": first_lines(m30k / "val.de", 5, tmp_path / "val.de"),
        "config_overrides": TINY,
        "vocab_size": 300,
        "max_tokens": 512,
        "warmup_steps": 4,
        "save_steps": 4,
        "average_last": 1,
        "logging_steps": 2,
        "num_beams": 1,
        "examples": [],
    }
    train_and_evaluate(TrainOptions(max_steps=4, **common))
    vocabulary = (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_text()
    # the tokenised corpus is reused from disk, not recomputed
    monkeypatch.setattr(job_data, "write_tokenized", lambda *args, **kwargs: pytest.fail("re-tokenised"))
    train_and_evaluate(TrainOptions(max_steps=8, resume=True, **common))
    state = json.loads((tmp_path / "run" / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    first_logged_step = min(entry["step"] for entry in state["log_history"] if "loss" in entry)
    assert first_logged_step == 2  # history carried over from the first run, not restarted
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_text() == vocabulary


@pytest.mark.slow  # three training jobs
def test_a_resumed_run_continues_as_recorded_and_a_finished_one_trains_no_further_step(
    tmp_path: Path, caplog
) -> None:
    """--resume of a finished run once trained one step past --max_steps, and --resume took any flag (a
    --vocab_size the model did not have went into its records). Flags left out take the run's recorded values;
    those of MAY_CHANGE_ON_RESUME (here --logging_steps, --max_steps) may change; the record says what ran."""
    from safetensors.torch import load_file

    from vaswani_transformer.cli.train import main

    flags = {f"--{name}": value for name, value in tatoeba_files(tmp_path, 150).items()}
    arguments = [item for pair in flags.items() for item in pair]
    arguments += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
    arguments += ["--max_steps", "4", "--warmup_steps", "2", "--save_steps", "2", "--average_last", "1"]
    arguments += ["--logging_steps", "2", "--dev_size", "0", "--eval_steps", "0", "--num_beams", "1"]
    run = tmp_path / "run"
    assert main([*arguments, "--examples", "A dog.", "--output_dir", str(run)]) == 0
    trained = load_file(run / "checkpoint-4" / "model.safetensors")
    caplog.set_level("INFO")
    assert main(["--output_dir", str(run), "--resume"]) == 0  # every other setting from train_options.json
    assert sorted(path.name for path in run.glob("checkpoint-*")) == ["checkpoint-4"]
    assert json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    assert any(
        message.startswith(f"--resume: {run / 'checkpoint-4'} is step 4 of 4, after ")
        and message.endswith("min of training: no more training")
        for message in caplog.messages
    )
    final = load_file(run / "final" / "model.safetensors")
    assert final.keys() == trained.keys() and all(torch.equal(final[key], trained[key]) for key in final)
    assert main(["--output_dir", str(run), "--resume", "--logging_steps", "1", "--max_steps", "6"]) == 0
    state = json.loads((run / "checkpoint-6" / "trainer_state.json").read_text())
    assert [entry["step"] for entry in state["log_history"] if "loss" in entry] == [2, 4, 5, 6]
    for record in (run / "train_options.json", run / "final" / "train_options.json"):
        recorded = json.loads(record.read_text())
        assert (recorded["logging_steps"], recorded["max_steps"], recorded["vocab_size"]) == (1, 6, 300)
    assert set(MAY_CHANGE_ON_RESUME) < option_names()


# Each rank measures its CPU otherwise (rank 0 bf16 faster, rank 1 not) and says which precision it trains in.
RANKS_MEASURE_APART = r"""
import os, sys
from vaswani_transformer.cli.train import main
from vaswani_transformer import precision as precision
from vaswani_transformer.training import job

rank = os.environ["RANK"]
precision.cpu_bf16_is_faster = lambda: rank == "0"
build_trainer = job.build_trainer

def saying_its_precision(*args, **kwargs):
    trainer = build_trainer(*args, **kwargs)
    print(f"rank {rank} trains in {trainer.accelerator.mixed_precision}", flush=True)
    return trainer

job.build_trainer = saying_its_precision
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_two_process_distributed_training(shared_data: Path, tmp_path: Path) -> None:
    """2 processes (torchrun, gloo DDP on CPU; `accelerate launch --multi_gpu` on GPUs): one vocabulary, sharded
    token batches, one report, one precision: the main process's "auto", though the other measures otherwise."""
    script = tmp_path / "ranks_measure_apart.py"
    script.write_text(RANKS_MEASURE_APART, encoding="utf-8")
    m30k = shared_data / "multi30k"
    files = {
        "--train_source": first_lines(m30k / "train.en", 300, tmp_path / "train.en"),
        "--train_target": first_lines(m30k / "train.de", 300, tmp_path / "train.de"),
        "--test_source": first_lines(m30k / "val.en", 10, tmp_path / "val.en"),
        "--test_target": first_lines(m30k / "val.de", 10, tmp_path / "val.de"),
    }
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)]
    arguments = [item for pair in files.items() for item in pair]
    arguments += ["--vocab_size", "400", "--max_tokens", "512", "--max_steps", "6", "--save_steps", "3"]
    arguments += ["--average_last", "2", "--warmup_steps", "2", "--num_beams", "1", "--dev_size", "0"]
    arguments += [
        "--eval_steps",
        "0",
        "--config_overrides",
        json.dumps(TINY),
        "--output_dir",
        str(tmp_path / "run"),
    ]
    completed = subprocess.run(launch + arguments, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.count("test sacreBLEU") == 1  # only the main process evaluates and reports
    assert "rank 0 trains in bf16" in completed.stdout and "rank 1 trains in bf16" in completed.stdout
    assert "Writing model shards" not in completed.stderr  # progress is the job's own line, not a bar a save
    assert "find_unused_parameters=True" not in completed.stderr  # DDP knows every parameter takes part
    state = json.loads((tmp_path / "run" / "checkpoint-6" / "trainer_state.json").read_text())
    batches = len(
        TokenBudgetBatchSampler.from_dataset(
            tokenize_parallel(
                load_parallel(files["--train_source"], files["--train_target"])[0],
                AutoTokenizer.from_pretrained(tmp_path / "run" / "tokenizer"),
            )[0],
            512,
        )
    )
    assert state["global_step"] == 6
    assert state["log_history"][-1]["epoch"] == pytest.approx(6 / math.ceil(batches / 2))  # 2 batches a step


def test_a_run_folder_belongs_to_one_run(tmp_path: Path) -> None:
    """Rerunning into an earlier run's folder stops before training unless --resume or --overwrite says what
    to do with it; --overwrite deletes the old checkpoints, so none can be averaged into the new model."""
    common = {
        **tatoeba_files(tmp_path, 150), "output_dir": tmp_path / "run", "config_overrides": TINY,
        "vocab_size": 300, "max_tokens": 512, "max_steps": 4, "warmup_steps": 2, "save_steps": 2,
        "average_last": 2, "num_beams": 1, "examples": [],
    }  # fmt: skip
    old = tmp_path / "run" / "checkpoint-900"
    old.mkdir(parents=True)
    (tmp_path / "run" / "train_options.json").write_text("{}")
    with pytest.raises(ValueError, match="already holds a run. Continue it with --resume, delete it first"):
        check_inputs(TrainOptions(**common))
    with pytest.raises(ValueError, match="give one"):
        TrainOptions(**common, resume=True, overwrite=True)
    train_and_evaluate(TrainOptions(**common, overwrite=True))
    assert not old.exists()
    assert sorted(path.name for path in (tmp_path / "run").glob("checkpoint-*")) == [
        "checkpoint-2",
        "checkpoint-4",
    ]
    other = tmp_path / "notes"
    other.mkdir()
    (other / "thesis.tex").write_text("keep")
    with pytest.raises(ValueError, match="is not empty and holds no run"):
        check_inputs(TrainOptions(**{**common, "output_dir": other}, overwrite=True))
    assert (other / "thesis.tex").read_text() == "keep"


@pytest.mark.slow  # three training jobs
def test_overwrite_deletes_only_what_a_run_wrote_and_only_after_the_corpora_load(tmp_path: Path) -> None:
    """A data loss: --overwrite once deleted any folder that merely looked like a run, the user's own files
    included, before the corpora were checked. Now a run folder holding anything else is refused, naming it, and
    nothing is deleted when the corpora fail to load."""
    common = {
        **tatoeba_files(tmp_path, 150), "config_overrides": TINY, "vocab_size": 300, "max_tokens": 512,
        "max_steps": 2, "warmup_steps": 1, "save_steps": 2, "average_last": 1, "num_beams": 1, "examples": [],
        "overwrite": True,
    }  # fmt: skip
    mixed = tmp_path / "mixed"
    (mixed / "tokenizer").mkdir(parents=True)
    (mixed / "src").mkdir()
    (mixed / "src" / "important.py").write_text("keep")
    (mixed / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match=r"files no run writes \(notes.txt, src\)"):
        train_and_evaluate(TrainOptions(**common, output_dir=mixed))
    assert (mixed / "src" / "important.py").read_text() == "keep" and (mixed / "tokenizer").is_dir()
    run = tmp_path / "run"
    (run / "checkpoint-900").mkdir(parents=True)
    (run / "train_options.json").write_text("{}")
    (run / ".training_precision.json.tmp").write_text("{")  # a run killed while writing its precision
    short_target = tmp_path / "short.de"  # one line fewer than the source: the corpora fail to load
    lines = Path(common["train_target"]).read_text(encoding="utf-8").splitlines(keepends=True)
    short_target.write_text("".join(lines[:-1]), encoding="utf-8")
    with pytest.raises(ValueError, match="line counts differ"):
        train_and_evaluate(TrainOptions(**{**common, "train_target": str(short_target)}, output_dir=run))
    assert (run / "checkpoint-900").is_dir() and (run / "train_options.json").is_file()
    train_and_evaluate(TrainOptions(**common, output_dir=run))
    assert sorted(path.name for path in run.iterdir()) == [
        ".vaswani-train.lock", "checkpoint-2", "final", "tokenizer", "train_options.json",
        "training_precision.json",
    ]  # fmt: skip
    # weights in the run folder have a new file's permissions (safetensors writes 0600), as its options do
    options_mode = (run / "train_options.json").stat().st_mode
    assert (run / "checkpoint-2" / "model.safetensors").stat().st_mode == options_mode
    assert (run / "final" / "model.safetensors").stat().st_mode == options_mode


def test_a_run_folder_in_use_stops_a_second_training_before_it_writes(tmp_path: Path, capsys) -> None:
    """Two trainings that both passed the folder check once wrote into one folder. A training holds
    its folder's lock (an OS lock, gone with its process); a second one stops with exit 2 and writes nothing.
    A folder made for a run that then fails on its inputs is removed again; an --output_dir that is a file is
    refused by name."""
    from vaswani_transformer.cli.train import main

    files = tatoeba_files(tmp_path, 150)
    arguments = [item for name, value in files.items() for item in (f"--{name}", value)]
    arguments += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
    arguments += ["--max_steps", "2", "--warmup_steps", "1", "--save_steps", "2", "--average_last", "1"]
    arguments += ["--num_beams", "1", "--examples", "A dog.", "--dev_size", "0", "--eval_steps", "0"]
    busy = tmp_path / "busy"
    busy.mkdir()
    holder = os.open(busy / LOCK_FILE, os.O_CREAT | os.O_RDWR)  # another training's lock
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        assert main([*arguments, "--output_dir", str(busy)]) == 2
        assert f"--output_dir {busy} is in use by another training" in capsys.readouterr().err
        assert [path.name for path in busy.iterdir()] == [LOCK_FILE]  # nothing written
    finally:
        os.close(holder)  # the other training ends: its lock goes with it
    assert (
        main([*arguments, "--output_dir", str(busy)]) == 0
    )  # the folder's left-over lock file is no content
    assert (busy / "final" / "scores.json").is_file()
    new = tmp_path / "new" / "run"
    short_target = tmp_path / "short.de"  # one line fewer than the source: the corpora fail to load
    lines = Path(files["train_target"]).read_text(encoding="utf-8").splitlines(keepends=True)
    short_target.write_text("".join(lines[:-1]), encoding="utf-8")
    shortened = [short_target if value == files["train_target"] else value for value in arguments]
    assert main([*map(str, shortened), "--output_dir", str(new)]) == 2
    assert not new.exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("keep")
    assert main([*arguments, "--output_dir", str(a_file)]) == 2
    assert f"--output_dir {a_file} is a file" in capsys.readouterr().err and a_file.read_text() == "keep"


def write_lines(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("test source without its target", "is a text file: give its line-aligned --test_target too"),
        ("blank training files", "--train_source"),
        ("single-column TSV", "no usable pairs"),
        (
            "tokenised references of another length",
            "has 3 lines but the test set has 5: they must be line-aligned",
        ),
        ("tokenised references after skipped test pairs", "no longer lines up"),
        ("missing file in an existing folder", "corpus/train: no such file"),
        ("every pair longer than --max_length", "no training pair is left"),
    ],
)
def test_bad_corpora_stop_before_training_with_status_2(
    case, message, tmp_path, monkeypatch, caplog, capsys
) -> None:
    """Each case: a clear message naming the flag and status 2, after the load summary, with no step trained."""
    from vaswani_transformer.cli.train import main

    monkeypatch.chdir(tmp_path)
    files = tatoeba_files(tmp_path, 150)
    flags = {f"--{name}": value for name, value in files.items()}
    if case == "test source without its target":
        del flags["--test_target"]
    elif case == "blank training files":
        flags["--train_source"] = write_lines(tmp_path / "blank.en", ["", " "])
        flags["--train_target"] = write_lines(tmp_path / "blank.de", ["", ""])
    elif case == "single-column TSV":
        del flags["--train_target"]
        flags["--train_source"] = write_lines(tmp_path / "one.tsv", ["no tab here", "none here either"])
    elif case == "tokenised references of another length":
        flags["--test_references_tokenized"] = write_lines(tmp_path / "refs.tok", ["a", "b", "c"])
    elif case == "tokenised references after skipped test pairs":
        flags["--test_source"] = write_lines(tmp_path / "t.en", ["A dog .", "", "A cat ."])
        flags["--test_target"] = write_lines(tmp_path / "t.de", ["Ein Hund .", "", "Eine Katze ."])
        flags["--test_references_tokenized"] = write_lines(
            tmp_path / "t.tok", ["ein hund .", "", "eine katze ."]
        )
    elif case == "missing file in an existing folder":
        (tmp_path / "corpus").mkdir()
        flags["--train_source"] = "corpus/train"  # would have gone to the Hub as a dataset id
    elif case == "every pair longer than --max_length":
        flags["--max_length"] = "1"
    arguments = [item for pair in flags.items() for item in pair]
    arguments += ["--output_dir", str(tmp_path / "run"), "--config_overrides", json.dumps(TINY)]
    arguments += ["--vocab_size", "300", "--max_tokens", "512", "--max_steps", "4", "--warmup_steps", "2"]
    arguments += ["--save_steps", "2", "--average_last", "2", "--examples", "A dog."]
    arguments += ["--dev_size", "0", "--eval_steps", "0"]
    caplog.set_level("INFO")
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert message in error
    if case == "blank training files":
        assert "read 2 pairs, kept 0; skipped 2 empty" in error  # the load summary is in the message
    assert not list((tmp_path / "run").glob("checkpoint-*"))


# Trains with the train command, but SIGKILLs itself halfway through writing checkpoint-4's optimizer state:
# what a power cut or an out-of-memory kill during a save leaves behind.
KILLED_DURING_SAVE = r"""
import os, signal, sys
import torch
from vaswani_transformer.cli.train import main
from vaswani_transformer import precision as precision

real_save = torch.save

def save_then_die(obj, file, *args, **kwargs):
    if str(file).endswith(os.path.join("checkpoint-4", "optimizer.pt")):
        with open(file, "wb") as partial:
            partial.write(b"half an optimizer state")
        os.kill(os.getpid(), signal.SIGKILL)
    return real_save(obj, file, *args, **kwargs)

torch.save = save_then_die
precision.cpu_bf16_is_faster = lambda: True  # this process measures bf16 faster: "auto" trains in bf16
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_killed_during_a_save_resumes_to_the_uninterrupted_weights(
    tmp_path: Path, caplog, monkeypatch
) -> None:
    """A run killed while saving checkpoint-4 resumes from checkpoint-2 to the weights of a run never killed, under
    "auto" in the precision the run began in, though the resuming process measures its CPU otherwise (on a busy
    host the measurement varies between processes across the line)."""
    from safetensors.torch import load_file

    from vaswani_transformer.cli.train import main

    flags = {f"--{name}": value for name, value in tatoeba_files(tmp_path, 150).items()}
    arguments = [item for pair in flags.items() for item in pair]
    arguments += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
    arguments += ["--max_steps", "6", "--warmup_steps", "2", "--save_steps", "2", "--average_last", "3"]
    arguments += ["--final_model", "last", "--dev_size", "0", "--eval_steps", "0", "--num_beams", "1"]
    arguments += ["--examples", "A dog.", "--mixed_precision", "auto"]
    monkeypatch.setattr(precision, "cpu_bf16_is_faster", lambda: True)
    assert main([*arguments, "--output_dir", str(tmp_path / "straight")]) == 0
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_DURING_SAVE, *arguments, "--output_dir", str(tmp_path / "killed")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    half_written = tmp_path / "killed" / "checkpoint-4"
    assert (half_written / "optimizer.pt").read_bytes() == b"half an optimizer state"
    caplog.set_level("INFO")
    monkeypatch.setattr(precision, "cpu_bf16_is_faster", lambda: False)  # this process would pick float32
    assert main([*arguments, "--output_dir", str(tmp_path / "killed"), "--resume"]) == 0
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("--resume: training in the run's precision, bf16 (auto: ") for m in messages)
    run = json.loads((tmp_path / "killed" / "final" / "training_run.json").read_text())
    assert run["mixed_precision"] == "bf16" and run["mixed_precision_chosen_by"].startswith("auto: ")
    assert any(
        "skipping an incomplete checkpoint" in m and "checkpoint-4/trainer_state.json" in m for m in messages
    )
    assert "--resume: continuing from checkpoint-2" in messages
    assert (
        tmp_path / "killed" / "incomplete-checkpoint-4" / "optimizer.pt"
    ).is_file()  # set aside, not reused
    straight = load_file(tmp_path / "straight" / "final" / "model.safetensors")
    resumed = load_file(tmp_path / "killed" / "final" / "model.safetensors")
    assert straight.keys() == resumed.keys()
    for name, tensor in straight.items():
        assert torch.equal(tensor, resumed[name]), name


@pytest.mark.parametrize("vocab_size", [1, 5000])
def test_a_vocabulary_of_another_size_than_asked_is_said(tmp_path: Path, caplog, vocab_size: int) -> None:
    """--vocab_size 1 once silently gave a vocabulary of every character (66 tokens); a corpus too
    small for the size asked gives fewer tokens, also said."""
    options = TrainOptions(
        **tatoeba_files(tmp_path, 50), vocab_size=vocab_size, output_dir=tmp_path / "run", data_cache=tmp_path
    )
    pairs = load_parallel(options.train_source, options.train_target)[0]
    with caplog.at_level("WARNING"):
        size = len(job_data._tokenizer_for(options, pairs, True, content_digest(pairs)))
    expected = {
        1: f"--vocab_size 1 is below the corpus's characters and special tokens: the vocabulary has {size:,}",
        5000: f"the corpus gave {size:,} tokens, fewer than --vocab_size 5,000",
    }
    assert expected[vocab_size] in caplog.text


@pytest.mark.parametrize(
    ("flags", "steps", "reason"),
    [
        ({"health_checks": False}, 10_000, "scoring it anyway: as --no_health_checks asks"),
        (
            {"max_steps": 10},
            10,
            "scoring it anyway: training ended at step 10, too early to judge (the check",
        ),
        # --max_train_minutes 1 stops a 100,000-step run inside its warm-up; "lower the peak learning
        # rate" (exit 3) was the advice, judged by --max_steps instead of the steps trained
        (
            {"max_train_minutes": 1, "warmup_steps": 4000},
            312,
            "training ended at step 312, too early to judge (the check starts at step 4000, after the warm-up of "
            "4000): train longer (a larger --max_train_minutes",
        ),
    ],
)
def test_a_collapsed_final_model_scored_anyway_says_why(tmp_path: Path, caplog, flags, steps, reason) -> None:
    """The words "scoring it anyway, as asked" were once said unasked; now the reason is said."""
    options = TrainOptions(**tatoeba_files(tmp_path, 10), output_dir=tmp_path / "run", **flags)
    with caplog.at_level("WARNING"):
        final_model._check_final_model(options, steps, ["", "", ""], advice="Lower the peak learning rate")
    assert reason in caplog.text
    assert "Lower the peak" not in caplog.text


def test_a_collapsed_final_model_judged_after_warm_up_is_refused_with_the_advice(tmp_path: Path) -> None:
    """The same translations after the warm-up are a collapse: no scores, and the learning-rate advice."""
    options = TrainOptions(
        **tatoeba_files(tmp_path, 10), output_dir=tmp_path / "run", max_train_minutes=1, warmup_steps=400
    )
    with pytest.raises(
        TrainingCollapsed, match="has collapsed: 100% of the translations are empty.*Lower the peak"
    ):
        final_model._check_final_model(options, 400, ["", "", ""], advice="Lower the peak learning rate")


def test_a_runs_precision_is_decided_once_by_the_main_process(tmp_path: Path, monkeypatch) -> None:
    """`run_precision`: the main process decides and records; another process reads the record, whatever its own
    CPU measures; --resume under "auto" keeps a recorded precision; a flag overrides it; the launcher's is asked
    again."""
    options = TrainOptions(**tatoeba_files(tmp_path, 10), output_dir=tmp_path)
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    monkeypatch.setattr(precision, "cpu_bf16_is_faster", lambda: True)
    decided = decided_precision(options, True)
    assert decided.mixed_precision == "bf16" and decided.chosen_by.startswith("auto: ")
    monkeypatch.setattr(precision, "cpu_bf16_is_faster", lambda: False)
    assert decided_precision(options, False) == decided  # another rank: the record's
    resumed = replace(options, resume=True)
    assert decided_precision(resumed, True) == decided  # kept, though this CPU now says fp32
    assert decided_precision(options, True).mixed_precision == "no"  # a new run decides anew
    named = decided_precision(replace(resumed, mixed_precision="bf16"), True)
    assert named == RunPrecision("bf16", "--mixed_precision bf16")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")
    launcher = decided_precision(options, True)
    assert launcher == RunPrecision("auto", "auto: the launcher's (accelerate launch --mixed_precision)")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    assert decided_precision(resumed, True).mixed_precision == "no"  # no launcher now: measured


@pytest.mark.parametrize(
    "flags, launcher, name",
    [({"bf16": True}, None, "bf16 autocast"), ({"fp16": True}, None, "fp16 autocast"), ({}, None, "fp32"),
     ({}, "fp16", "fp16 autocast"), ({}, "bf16", "bf16 autocast"), ({}, "no", "fp32")],
)  # fmt: skip
def test_the_training_precision_is_named_alike_whoever_chose_it(
    monkeypatch, flags: dict[str, bool], launcher: str | None, name: str
) -> None:
    """The log's "model: ..." line names the precision the same way whether the flag chose it or the launcher did
    (ACCELERATE_MIXED_PRECISION): `accelerate launch --mixed_precision fp16` trains in fp16 autocast, and the
    line says so, not a bare "fp16" (what benchmarks/gpu_owed.py's launcher-fp16 item read on an H200)."""
    if launcher is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    args = Seq2SeqTrainingArguments(output_dir="unused", report_to=[], use_cpu=True, **flags)
    assert precision_name(args) == name


@pytest.mark.parametrize(
    "text, problem",
    [("{not json", "cannot be read"), ('{"precision": "bf16"}', "cannot be read"), ("[]", "cannot be read"),
     ('{"mixed_precision": "fp8", "chosen_by": "me"}', "names an unknown precision, 'fp8'")],
)  # fmt: skip
def test_a_hand_edited_precision_record_stops_resume_with_the_fix(
    tmp_path: Path, monkeypatch, text: str, problem: str
) -> None:
    """--resume under "auto" over a precision record it cannot use stops before training (RunFolderError: the
    command exits 2) naming the file and both ways out, and leaves the record as it was."""
    options = TrainOptions(**tatoeba_files(tmp_path, 10), output_dir=tmp_path, resume=True)
    record = tmp_path / PRECISION_FILE
    record.write_text(text, encoding="utf-8")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    with pytest.raises(RunFolderError, match=problem) as stopped:
        decided_precision(options, True)
    assert str(record) in str(stopped.value) and "--mixed_precision {bf16,fp16,no}" in str(stopped.value)
    assert "delete the file" in str(stopped.value) and record.read_text(encoding="utf-8") == text
    named = decided_precision(replace(options, mixed_precision="no"), True)
    assert named == RunPrecision("no", "--mixed_precision no")  # the flag's way out works


@pytest.mark.slow  # a job that trains until its time budget ends, then a resumed one
def test_a_time_budget_ends_training_with_a_checkpoint_and_resume_keeps_what_is_left(
    tmp_path: Path, caplog
) -> None:
    """--max_train_minutes ends training on time, whatever the machine's speed (fairseq's
    --stop-time-hours): the step that reaches the budget saves a checkpoint and is averaged into the final model;
    the seconds trained are recorded, a resume with no time left trains no further step, and a larger budget
    goes on from the same step."""
    from vaswani_transformer.cli.train import main
    from vaswani_transformer.training.monitoring import TRAINED_SECONDS

    flags = {f"--{name}": value for name, value in tatoeba_files(tmp_path, 150).items()}
    arguments = [item for pair in flags.items() for item in pair]
    arguments += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
    arguments += ["--max_steps", "100000", "--warmup_steps", "2", "--save_steps", "100000"]
    arguments += ["--average_last", "1", "--dev_size", "0", "--eval_steps", "0", "--num_beams", "1"]
    arguments += ["--no_health_checks"]  # a few steps at a high rate: the check is not what this tests
    arguments += [
        "--logging_steps",
        "100000",
    ]  # ends before its first logged loss: no curve, the model all the same
    run = tmp_path / "run"
    assert (
        main([*arguments, "--max_train_minutes", "0.01", "--examples", "A dog.", "--output_dir", str(run)])
        == 0
    )
    (checkpoint,) = run.glob("checkpoint-*")  # only the one the budget saved: save_steps is never reached
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    steps = state["global_step"]
    assert 0 < steps < 100000 and checkpoint.name == f"checkpoint-{steps}"
    assert 0.6 <= state["stateful_callbacks"][TRAINED_SECONDS] < 60
    assert (run / "final" / "model.safetensors").is_file()
    assert not (run / "final" / "training_curve.png").exists()
    caplog.set_level("INFO")
    assert main(["--output_dir", str(run), "--resume"]) == 0  # no time left: no step
    assert [path.name for path in run.glob("checkpoint-*")] == [checkpoint.name]
    assert any("no more training" in message for message in caplog.messages)
    assert main(["--output_dir", str(run), "--resume", "--max_train_minutes", "0.02"]) == 0
    later = json.loads((run / f"checkpoint-{max_step(run)}" / "trainer_state.json").read_text())
    assert later["global_step"] > steps and later["stateful_callbacks"][TRAINED_SECONDS] >= 1.2


def max_step(run: Path) -> int:
    return max(int(path.name.split("-")[1]) for path in run.glob("checkpoint-*"))


@pytest.mark.slow
def test_a_compiled_job_compiles_at_most_the_shapes_it_announces(tmp_path: Path, monkeypatch, caplog) -> None:
    """`vaswani-train --torch_compile` once recompiled for almost every token-budget batch. Over a whole
    job (the compiler swapped for dynamo's "eager" backend: tracing and guards, without inductor's minutes of C++
    compiling), dynamo compiles one graph per batch shape, no more than the progress lines announce."""
    from torch._dynamo.utils import counters

    from vaswani_transformer.cli.train import main
    from vaswani_transformer.training import job

    def eager_backend(*args, **kwargs):
        return paper_training_arguments(*args, **kwargs, torch_compile_backend="eager")

    paper_training_arguments = job.paper_training_arguments
    monkeypatch.setattr(job, "paper_training_arguments", eager_backend)
    flags = {f"--{name}": value for name, value in tatoeba_files(tmp_path, 150).items()}
    for side in ("train_source", "train_target"):  # 1 to 6 sentences a line: 5 to about 80 tokens, 4+ shapes
        lines = Path(flags[f"--{side}"]).read_text(encoding="utf-8").splitlines()
        joined = [" ".join(lines[i : i + 1 + i % 6]) for i in range(len(lines))]
        Path(flags[f"--{side}"]).write_text("\n".join(joined) + "\n", encoding="utf-8")
    arguments = [item for pair in flags.items() for item in pair]
    arguments += ["--config_overrides", json.dumps(TINY), "--vocab_size", "300", "--max_tokens", "512"]
    arguments += ["--max_steps", "30", "--warmup_steps", "2", "--save_steps", "15", "--average_last", "1"]
    arguments += ["--logging_steps", "15", "--dev_size", "0", "--eval_steps", "0", "--num_beams", "1"]
    arguments += ["--no_health_checks", "--torch_compile", "--examples", "A dog."]
    torch._dynamo.reset()
    counters.clear()
    caplog.set_level("INFO")
    assert main([*arguments, "--output_dir", str(tmp_path / "run")]) == 0
    announced = [message for message in caplog.messages if message.startswith("compiling for shape ")]
    bound = int(announced[0].split(" of at most ")[1].split()[0])
    assert 3 < len(announced) <= bound <= 8
    assert [message.split(" of ")[0] for message in announced] == [
        f"compiling for shape {k}" for k in range(1, len(announced) + 1)
    ]
    assert counters["stats"]["unique_graphs"] == len(announced)
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
