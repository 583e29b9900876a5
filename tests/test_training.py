"""The paper's recipe on Seq2SeqTrainer, and the train → average → evaluate job end to end."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration, training
from vaswani_transformer.data import TokenBudgetBatchSampler, load_parallel, tokenize_parallel
from vaswani_transformer.training import (
    TrainOptions,
    build_trainer,
    paper_learning_rate,
    paper_training_arguments,
    train_and_evaluate,
)

REPO = Path(__file__).resolve().parents[1]


def paper_lrate(step: int, d_model: int, warmup: int) -> float:
    """Eq. (3): lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (1024, 4000), (256, 400)])
def test_inverse_sqrt_schedule_is_the_papers_formula(
    letter_tokenizer, tmp_path: Path, d_model, warmup
) -> None:
    model = VaswaniTransformerForConditionalGeneration(tiny_config())
    args = paper_training_arguments(tmp_path, d_model, max_steps=100_000, warmup_steps=warmup, use_cpu=True)
    dataset = Dataset.from_dict({"input_ids": [[5, 3]], "labels": [[6, 3]], "src_len": [2], "tgt_len": [2]})
    trainer = build_trainer(model, letter_tokenizer, dataset, args, max_tokens=64)
    trainer.create_optimizer_and_scheduler(num_training_steps=100_000)
    base = trainer.lr_scheduler.base_lrs[0]  # the current lr is base · λ(0) = 0 before the first step
    assert base == pytest.approx(paper_learning_rate(d_model, warmup))
    for step in (1, 10, warmup // 2, warmup - 1, warmup, warmup + 1, 3 * warmup, 100_000):
        lr = base * trainer.lr_scheduler.lr_lambdas[0](step)
        assert lr == pytest.approx(paper_lrate(step, d_model, warmup), rel=1e-9)
    group = trainer.optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9 and group["weight_decay"] == 0.0


def first_lines(path: Path, count: int, destination: Path) -> str:
    destination.write_text("".join(path.open(encoding="utf-8").readlines()[:count]), encoding="utf-8")
    return str(destination)


def test_multi30k_smoke_train_average_evaluate(shared_data: Path, tmp_path: Path) -> None:
    """A tiny model on 400 real Multi30k pairs: BPE, token batches, checkpoints, averaging, BLEU files."""
    m30k, tok = shared_data / "multi30k", shared_data / "multi30k-tok"
    options = TrainOptions(
        output_dir=tmp_path / "run",
        train_source=first_lines(m30k / "train.en", 400, tmp_path / "train.en"),
        train_target=first_lines(m30k / "train.de", 400, tmp_path / "train.de"),
        test_source=first_lines(m30k / "test_2016_flickr.en", 20, tmp_path / "test.en"),
        test_target=first_lines(m30k / "test_2016_flickr.de", 20, tmp_path / "test.de"),
        test_references_tokenized=str(tok / "test_2016_flickr.lc.norm.tok.de"),
        max_test_sentences=20,
        config_overrides={"d_model": 32, "d_ff": 64, "num_encoder_layers": 1, "num_decoder_layers": 1},
        vocab_size=500,
        max_tokens=1024,
        max_steps=24,
        warmup_steps=8,
        save_steps=8,
        average_last=3,
        logging_steps=4,
        num_beams=2,
        examples=("A dog runs.",),
    )
    result = train_and_evaluate(options)
    checkpoints = sorted((tmp_path / "run").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-16", "checkpoint-24", "checkpoint-8"]
    history = json.loads((checkpoints[1] / "trainer_state.json").read_text())["log_history"]
    losses = [entry["loss"] for entry in history if "loss" in entry]
    assert losses[-1] < losses[0]
    model_dir = result.model_dir
    hypotheses = (model_dir / "hypotheses.txt").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 20
    scores = json.loads((model_dir / "scores.json").read_text())
    assert scores["sacrebleu"]["signature"].startswith("nrefs:1")
    assert scores["tokenized_bleu"]["ref_len"] > 0 and scores["num_sentences"] == 20
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert (
        isinstance(model, VaswaniTransformerForConditionalGeneration)
        and len(tokenizer) == model.config.vocab_size
    )
    # the final model is the mean of the last 3 checkpoints (§6.1 checkpoint averaging)
    weights = [AutoModelForSeq2SeqLM.from_pretrained(c).lm_head.weight for c in checkpoints]
    torch.testing.assert_close(model.lm_head.weight, torch.stack(weights).mean(0))
    assert list(result.example_translations) == ["A dog runs."]
    assert (model_dir / "training_curve.png").read_bytes().startswith(b"\x89PNG")
    # the evaluation CLI, as a user runs it (a script named like a library it imports would shadow it)
    command = [sys.executable, "scripts/evaluate_model.py", str(model_dir), "--num-beams", "1"]
    command += ["--source", options.test_source, "--references", options.test_target]
    completed = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=True)
    assert "sacreBLEU" in completed.stdout


def test_token_budget_batches_in_a_plain_accelerate_loop(letter_tokenizer) -> None:
    """The §5.1 sampler outside the Trainer: every pair once per epoch, no batch over budget."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForSeq2Seq

    sources = [" ".join("abcdefghij"[: 2 + i % 8]) for i in range(100)]
    pairs = Dataset.from_dict({"source": sources, "target": [s[::-1] for s in sources]})
    tokenized, _ = tokenize_parallel(pairs, letter_tokenizer)
    sampler = TokenBudgetBatchSampler.from_dataset(tokenized, max_tokens=64)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    loader = DataLoader(
        tokenized.remove_columns(["src_len", "tgt_len"]),
        batch_sampler=sampler,
        collate_fn=DataCollatorForSeq2Seq(letter_tokenizer, model=model),
    )
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    seen = 0
    for batch in loader:
        assert batch["input_ids"].numel() <= 64 and batch["labels"].numel() <= 64
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()
        seen += batch["input_ids"].shape[0]
    assert seen == len(tokenized) == 100


def test_resume_continues_from_the_last_checkpoint(shared_data: Path, tmp_path: Path, monkeypatch) -> None:
    m30k = shared_data / "multi30k"
    common = {
        "output_dir": tmp_path / "run",
        "train_source": first_lines(m30k / "train.en", 200, tmp_path / "train.en"),
        "train_target": first_lines(m30k / "train.de", 200, tmp_path / "train.de"),
        "test_source": first_lines(m30k / "val.en", 5, tmp_path / "val.en"),
        "test_target": first_lines(m30k / "val.de", 5, tmp_path / "val.de"),
        "config_overrides": {"d_model": 32, "d_ff": 64, "num_encoder_layers": 1, "num_decoder_layers": 1},
        "vocab_size": 300,
        "max_tokens": 512,
        "warmup_steps": 4,
        "save_steps": 4,
        "average_last": 1,
        "logging_steps": 2,
        "num_beams": 1,
        "examples": (),
    }
    train_and_evaluate(TrainOptions(max_steps=4, **common))
    vocabulary = (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_text()
    # the tokenised corpus is reused from disk, not recomputed
    monkeypatch.setattr(training, "tokenize_parallel", lambda *args, **kwargs: pytest.fail("re-tokenised"))
    train_and_evaluate(TrainOptions(max_steps=8, resume=True, **common))
    state = json.loads((tmp_path / "run" / "checkpoint-8" / "trainer_state.json").read_text())
    assert state["global_step"] == 8
    first_logged_step = min(entry["step"] for entry in state["log_history"] if "loss" in entry)
    assert first_logged_step == 2  # history carried over from the first run, not restarted
    assert (tmp_path / "run" / "tokenizer" / "tokenizer.json").read_text() == vocabulary


def test_two_process_distributed_training(shared_data: Path, tmp_path: Path) -> None:
    """2 processes (torchrun, gloo DDP on CPU; `accelerate launch --multi_gpu` on GPUs): one vocabulary, sharded
    token batches, one report."""
    m30k = shared_data / "multi30k"
    files = {
        "--train-source": first_lines(m30k / "train.en", 300, tmp_path / "train.en"),
        "--train-target": first_lines(m30k / "train.de", 300, tmp_path / "train.de"),
        "--test-source": first_lines(m30k / "val.en", 10, tmp_path / "val.en"),
        "--test-target": first_lines(m30k / "val.de", 10, tmp_path / "val.de"),
    }
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "scripts/train.py"]
    arguments = [item for pair in files.items() for item in pair]
    arguments += ["--vocab-size", "400", "--max-tokens", "512", "--max-steps", "6", "--save-steps", "3"]
    arguments += [
        "--average-last",
        "2",
        "--warmup",
        "2",
        "--num-beams",
        "1",
        "--output",
        str(tmp_path / "run"),
    ]
    completed = subprocess.run(launch + arguments, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.count("sacreBLEU") == 1  # only the main process evaluates and reports
    state = json.loads((tmp_path / "run" / "checkpoint-6" / "trainer_state.json").read_text())
    batches = len(
        TokenBudgetBatchSampler.from_dataset(
            tokenize_parallel(
                load_parallel(files["--train-source"], files["--train-target"])[0],
                AutoTokenizer.from_pretrained(tmp_path / "run" / "tokenizer"),
            )[0],
            512,
        )
    )
    assert state["global_step"] == 6
    assert state["log_history"][-1]["epoch"] == pytest.approx(6 / math.ceil(batches / 2))  # 2 batches a step
