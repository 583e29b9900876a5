"""The paper's recipe on Seq2SeqTrainer: schedule, token-budget batches, dev decoding during training."""

import logging
from pathlib import Path

import numpy as np
import pytest
import safetensors.torch
import torch
from accelerate.state import AcceleratorState
from datasets import Dataset
from transformers import GenerationConfig, TrainingArguments

from tests.conftest import paper_arguments, tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer import precision as precision
from vaswani_transformer.data import TokenBudgetBatchSampler, tokenize_parallel
from vaswani_transformer.data.batching import MAX_COMPILED_SHAPES
from vaswani_transformer.data.token_arrays import PaddedPairBatches, already_collated
from vaswani_transformer.training import build_trainer, paper_learning_rate
from vaswani_transformer.training.monitoring import dev_metrics
from vaswani_transformer.training.run_precision import decide_precision


def paper_lrate(step: int, d_model: int, warmup: int) -> float:
    """Eq. (3): lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)."""
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (1024, 4000), (256, 400)])
def test_inverse_sqrt_schedule_is_the_papers_formula(
    letter_tokenizer, tmp_path: Path, d_model, warmup
) -> None:
    model = VaswaniTransformerForConditionalGeneration(tiny_config())
    args = paper_arguments(tmp_path, d_model, max_steps=100_000, warmup_steps=warmup, use_cpu=True)
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


def test_token_budget_batches_in_a_plain_accelerate_loop(letter_tokenizer) -> None:
    """The §5.1 sampler outside the Trainer: every pair once per epoch, no batch over budget."""
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    sources = [" ".join("abcdefghij"[: 2 + i % 8]) for i in range(100)]
    pairs = Dataset.from_dict({"source": sources, "target": [s[::-1] for s in sources]})
    tokenized, _ = tokenize_parallel(pairs, letter_tokenizer)
    sampler = TokenBudgetBatchSampler.from_dataset(tokenized, max_tokens=64)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    loader = DataLoader(
        PaddedPairBatches(tokenized, letter_tokenizer.pad_token_id),
        batch_sampler=sampler,
        collate_fn=already_collated,
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


@pytest.mark.slow
def test_compiled_training_gives_the_losses_of_eager_training(letter_tokenizer, tmp_path: Path) -> None:
    """torch_compile through the Trainer (the logits path, traced) against eager training (the fused loss) on the
    same bounded-shape batches."""
    sources = [" ".join("abcdefghij"[i % 5 : i % 5 + 2 + i % 6]) for i in range(60)]
    pairs = Dataset.from_dict({"source": sources, "target": [" ".join(reversed(s.split())) for s in sources]})
    tokenized, _ = tokenize_parallel(pairs, letter_tokenizer)
    losses = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
        args = paper_arguments(
            tmp_path / str(compiled),
            32,
            max_steps=5,
            warmup_steps=2,
            logging_steps=1,
            save_strategy="no",
            use_cpu=True,
            torch_compile=compiled,
            torch_compile_backend="eager",  # dynamo's tracing without inductor's minutes of C++ compiling
        )
        trainer = build_trainer(model, letter_tokenizer, tokenized, args, max_tokens=48, bounded_shapes=True)
        trainer.train()
        losses[compiled] = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses[True]) == 5 and losses[True] == pytest.approx(losses[False], rel=1e-5)


def long_letter_pairs(tokenizer, count: int) -> Dataset:
    """`count` pairs of 1 to 100 letters (and an end token), tokenised."""
    rng = np.random.default_rng(0)
    sources = [" ".join(rng.choice(list("abcdefghij"), rng.integers(1, 101))) for _ in range(count)]
    pairs = Dataset.from_dict({"source": sources, "target": [" ".join(reversed(s.split())) for s in sources]})
    return tokenize_parallel(pairs, tokenizer)[0]


def test_training_batches_without_torch_compile_are_the_plain_token_budget_batches(
    letter_tokenizer, tmp_path: Path
) -> None:
    """A job without --torch_compile serves the batches it always has: PaddedPairBatches over the §5.1 sampler
    (tests/data: the greedy packing; tests/data/test_token_arrays.py: DataCollatorForSeq2Seq's bytes)."""
    tokenized = long_letter_pairs(letter_tokenizer, 200)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    args = paper_arguments(tmp_path, 32, max_steps=1, seed=5, use_cpu=True)
    trainer = build_trainer(model, letter_tokenizer, tokenized, args, max_tokens=512)
    dataset = PaddedPairBatches(tokenized, letter_tokenizer.pad_token_id)
    lengths = dataset.pairs.source_lengths, dataset.pairs.target_lengths
    expected = TokenBudgetBatchSampler(*lengths, 512, seed=5)
    assert not trainer.bounded_shapes and trainer.batch_shapes == []
    for indices, batch in zip(expected, trainer.get_train_dataloader(), strict=True):
        for name, tensor in dataset.__getitems__(indices).items():
            assert batch[name].dtype == tensor.dtype and torch.equal(batch[name], tensor), name


@pytest.mark.slow
def test_a_compiled_job_compiles_once_per_promised_shape_and_says_so(
    letter_tokenizer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Over an epoch of token-budget batches of 1 to 101 tokens, dynamo compiles one graph per batch shape, at
    most the bound the progress lines promise (transformers' dynamic=None compiles 2 on the same batches, its
    symbolic-shape graph; static shapes are this job's choice: docs/training-speed.md)."""
    from torch._dynamo.utils import counters

    tokenized = long_letter_pairs(letter_tokenizer, 300)
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    args = paper_arguments(
        tmp_path,
        32,
        max_steps=40,  # an epoch and a bit: every shape of the data
        warmup_steps=2,
        logging_steps=10,
        save_strategy="no",
        use_cpu=True,
        torch_compile=True,
        torch_compile_backend="eager",  # dynamo's tracing and guards without inductor's minutes of C++ compiling
    )
    trainer = build_trainer(model, letter_tokenizer, tokenized, args, max_tokens=512)
    torch._dynamo.reset()
    counters.clear()
    with caplog.at_level(logging.INFO, logger="vaswani_transformer.training.trainer"):
        trainer.train()
    shapes = trainer.batch_shapes
    assert 5 <= len(shapes) <= MAX_COMPILED_SHAPES
    assert all(length % 8 == 0 and rows * length <= 512 for rows, length in shapes)
    compiling = [record.getMessage() for record in caplog.records if "compiling" in record.getMessage()]
    assert len(compiling) == len(shapes)  # the epoch met every shape, each announced once
    assert all(f"of at most {len(shapes)} " in line for line in compiling)
    assert [line.split(" of ")[0] for line in compiling] == [
        f"compiling for shape {k}" for k in range(1, len(shapes) + 1)
    ]
    assert counters["stats"]["unique_graphs"] == len(shapes)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 4 and all(np.isfinite(losses)) and losses[-1] < losses[0]


def same_stop_tokens(generation_config: dict) -> dict:
    """The config with eos_token_id as a list: transformers 5.17's Trainer turns an int into [id] before training
    (`align_special_tokens`), the same stop token; 5.24 leaves it an int."""
    eos = generation_config["eos_token_id"]
    return generation_config | {"eos_token_id": eos if isinstance(eos, list) else [eos]}


def test_dev_decoding_logs_bleu_and_speed_and_leaves_the_generation_config_alone(
    letter_tokenizer, tmp_path: Path
) -> None:
    """Greedy dev BLEU and target tokens/s reach the log; Seq2SeqTrainer's evaluation must not write its
    max_length=20 fallback into the model's generation config (that would end "input length + 50")."""
    sources = [" ".join("abcdefghij"[i % 5 : i % 5 + 2 + i % 6]) for i in range(120)]
    pairs = Dataset.from_dict({"source": sources, "target": [" ".join(reversed(s.split())) for s in sources]})
    tokenized, _ = tokenize_parallel(pairs, letter_tokenizer)
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    expected = model.generation_config.to_dict()
    args = paper_arguments(
        tmp_path,
        32,
        max_steps=6,
        warmup_steps=2,
        lr_scale=0.1,
        save_steps=3,
        eval_steps=3,
        logging_steps=3,
        use_cpu=True,
    )
    trainer = build_trainer(
        model,
        letter_tokenizer,
        tokenized,
        args,
        max_tokens=128,
        eval_dataset=tokenized.select(range(20)),
        compute_metrics=dev_metrics(letter_tokenizer),
    )
    trainer.train()
    evaluations = [entry for entry in trainer.state.log_history if "eval_bleu" in entry]
    assert [entry["step"] for entry in evaluations] == [3, 6]
    assert all(
        0 <= entry["eval_degenerate"] <= 1 and 0 < entry["eval_distinct"] <= 1 for entry in evaluations
    )
    speeds = [entry["target_tokens_per_second"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(speeds) == 2 and all(speed > 0 for speed in speeds)
    assert same_stop_tokens(model.generation_config.to_dict()) == same_stop_tokens(expected)
    assert model.generation_config.max_length is None
    saved = GenerationConfig.from_pretrained(tmp_path / "checkpoint-6")
    assert saved.max_length is None and saved.num_beams == 4
    # the best dev checkpoint is kept beside the rotation's
    assert trainer.state.best_model_checkpoint is not None and args.save_total_limit == 5 + 1


@pytest.mark.parametrize(
    ("launcher", "flag", "native_bf16", "expected"),
    [
        (None, "auto", False, "no"),
        (None, "auto", True, "bf16"),
        ("bf16", "auto", False, "bf16"),
        ("bf16", "no", True, "no"),
        ("no", "bf16", False, "bf16"),
    ],
)
def test_mixed_precision_follows_the_launcher_unless_the_flag_names_one(
    letter_tokenizer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    launcher: str | None,
    flag: str,
    native_bf16: bool,
    expected: str,
) -> None:
    """`accelerate launch --mixed_precision X` reaches the Trainer's accelerator (bf16 is not hard-set over it);
    --mixed_precision other than auto wins; with neither, a CPU trains in bf16 when it computes bf16 faster
    (`precision.cpu_bf16_is_faster`, patched here both ways) and in fp32 when it does not."""
    monkeypatch.setattr(precision, "cpu_bf16_is_faster", lambda: native_bf16)
    if launcher is None:
        monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    else:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    args = decide_precision(flag).applied_to(paper_arguments(tmp_path, 32, max_steps=1))
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    tokenized, _ = tokenize_parallel(
        Dataset.from_dict({"source": ["a b"], "target": ["b a"]}), letter_tokenizer
    )
    try:
        trainer = build_trainer(model, letter_tokenizer, tokenized, args, max_tokens=64)
        assert trainer.accelerator.mixed_precision == expected
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)  # the next Trainer sets its own precision


def test_resuming_warns_of_missing_weights_but_not_of_the_tied_ones(
    letter_tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every --resume once warned that lm_head and the decoder's embedding were missing from the
    checkpoint; they are the encoder's table (tied), which a checkpoint holds once. A weight really missing is
    still named."""
    import transformers.trainer

    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(letter_tokenizer)))
    tokenized, _ = tokenize_parallel(
        Dataset.from_dict({"source": ["a b"], "target": ["b a"]}), letter_tokenizer
    )
    args = decide_precision("no").applied_to(paper_arguments(tmp_path, 32, max_steps=1))
    try:
        trainer = build_trainer(model, letter_tokenizer, tokenized, args, max_tokens=64)
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    warnings: list[str] = []
    monkeypatch.setattr(
        transformers.trainer.logger, "warning", lambda message, *a, **k: warnings.append(message)
    )
    model.save_pretrained(tmp_path / "checkpoint")  # what --resume reads: the shared table is saved once
    saved = safetensors.torch.load_file(tmp_path / "checkpoint" / "model.safetensors")
    loaded = model.load_state_dict(saved, strict=False)
    assert set(loaded.missing_keys) == {"lm_head.weight", "model.decoder.embed_tokens.weight"}
    trainer._issue_warnings_after_load(loaded)
    assert warnings == []
    without_fc1 = {name: tensor for name, tensor in saved.items() if "layers.0.feed_forward.fc1" not in name}
    trainer._issue_warnings_after_load(model.load_state_dict(without_fc1, strict=False))
    assert len(warnings) == 1 and "layers.0.feed_forward.fc1" in warnings[0] and "lm_head" not in warnings[0]


def test_processes_wait_hours_not_minutes_for_the_first_data_preparation(tmp_path: Path) -> None:
    """Other ranks wait at a barrier while the main process prepares a new corpus (about 11 minutes for
    4.5M pairs on 2 cores, more on a busy host); transformers' default 30-minute process-group timeout would end
    the run, so the package sets its own."""
    args = paper_arguments(tmp_path, 32, max_steps=1)
    assert args.ddp_timeout == 4 * 3600 > TrainingArguments("unused").ddp_timeout
