"""The paper's training recipe (§5) on Seq2SeqTrainer: optimiser, schedule, token-budget batches, dev decoding."""

import copy
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset
from torch.utils.data import DataLoader
from transformers import (
    DataCollatorForSeq2Seq,
    EvalPrediction,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)
from transformers.trainer_callback import PrinterCallback

from .checkpoints import with_usual_permissions
from .data import TokenBudgetBatchSampler
from .monitoring import TrainingProgress
from .precision import bf16_is_faster, bf16_reason
from .token_arrays import PaddedPairBatches, TokenizedPairs, already_collated

# §5.3 Optimizer: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (AdamW with no weight decay is exactly Adam).
ADAM_BETAS = (0.9, 0.98)
ADAM_EPSILON = 1e-9


def paper_learning_rate(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Peak-setting base rate d_model^-0.5 · warmup^-0.5, which makes `inverse_sqrt` equal eq. (3).

    transformers' inverse_sqrt multiplies it by step/warmup during warm-up and by sqrt(warmup/step) after,
    giving lrate = scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5); scale 1 is the paper's formula.
    """
    return scale * d_model**-0.5 * warmup_steps**-0.5


def training_device() -> str:
    """Where the Trainer puts the model: a CUDA GPU, an Apple GPU, else the CPU."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def bf16_available() -> bool:
    """Whether this machine trains faster in bfloat16: its training device computes it faster than float32 (a CUDA
    GPU that supports it, or a CPU whose bfloat16 products measure clearly faster; `precision.bf16_is_faster`)."""
    return bf16_is_faster(training_device())


def auto_precision_reason() -> str:
    """Why "auto" picks what it picks on this machine, in words for logs and the model card."""
    return bf16_reason(training_device())


MIXED_PRECISIONS = ("auto", "no", "fp16", "bf16")


def mixed_precision_arguments(mixed_precision: str = "auto") -> dict[str, bool]:
    """TrainingArguments' bf16/fp16 for a mixed precision; "auto" follows the launcher, else bf16 where the
    device computes it faster (`bf16_available`: GPUs with it, CPUs whose bf16 products measure faster), else fp32.

    `accelerate launch` passes its choice (flag or config file) as ACCELERATE_MIXED_PRECISION, which the Trainer's
    Accelerator reads when bf16 and fp16 are both off. A choice other than "auto" replaces the launcher's in this
    process, so that "no" under a bf16 launcher config trains in fp32.
    """
    if mixed_precision not in MIXED_PRECISIONS:
        raise ValueError(f"mixed precision must be one of {MIXED_PRECISIONS}, got {mixed_precision!r}.")
    if mixed_precision == "auto":
        if "ACCELERATE_MIXED_PRECISION" in os.environ:
            return {"bf16": False, "fp16": False}
        mixed_precision = "bf16" if bf16_available() else "no"
    elif "ACCELERATE_MIXED_PRECISION" in os.environ:
        os.environ["ACCELERATE_MIXED_PRECISION"] = mixed_precision
    return {"bf16": mixed_precision == "bf16", "fp16": mixed_precision == "fp16"}


# Under torchrun the other processes wait at a barrier while the main one prepares the data the first time
# (`experiment.prepare_training_data`: the paper's 4.5M pairs took 5.5-7.9 minutes on 2 CPU cores, benchmarks/RESULTS.md;
# a busy host several times that). transformers' default wait of 30 minutes would end such a run;
# this one is set explicitly, for work that finishes.
DATA_PREPARATION_WAIT_S = 4 * 3600


def paper_training_arguments(
    output_dir: str | Path,
    d_model: int,
    *,
    max_steps: int,
    warmup_steps: int = 4000,
    lr_scale: float = 1.0,
    save_steps: int = 1000,
    save_total_limit: int | None = 5,
    eval_steps: int = 0,
    logging_steps: int = 20,
    seed: int = 0,
    mixed_precision: str = "auto",
    **overrides: object,
) -> Seq2SeqTrainingArguments:
    """Seq2SeqTrainingArguments with §5.3's optimiser and schedule; label smoothing lives in the model's loss.

    With `eval_steps` > 0 the dev set is decoded greedily every `eval_steps` updates; its BLEU is logged, and the
    checkpoint with the best dev BLEU is kept out of the `save_total_limit` rotation (one more is kept for it).
    `mixed_precision` is "auto" (the launcher's, else bf16 where supported), "no", "fp16" or "bf16".
    """
    evaluating = eval_steps > 0
    values: dict[str, object] = {
        "output_dir": str(output_dir),
        "max_steps": max_steps,
        "learning_rate": paper_learning_rate(d_model, warmup_steps, lr_scale),
        "lr_scheduler_type": "inverse_sqrt",
        "warmup_steps": warmup_steps,
        "optim": "adamw_torch_fused",  # one kernel per step on GPUs (and CPUs), as transformers defaults to
        "adam_beta1": ADAM_BETAS[0],
        "adam_beta2": ADAM_BETAS[1],
        "adam_epsilon": ADAM_EPSILON,
        "weight_decay": 0.0,
        "max_grad_norm": 0.0,  # the paper does not clip gradients
        **mixed_precision_arguments(mixed_precision),
        # Explicit on accelerator-less machines: it also lets torchrun run CPU processes as gloo DDP.
        "use_cpu": not (torch.cuda.is_available() or torch.backends.mps.is_available()),
        # every parameter takes part in every step (the Trainer's default, True, costs DDP a graph walk a step)
        "ddp_find_unused_parameters": False,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": None if save_total_limit is None else save_total_limit + evaluating,
        "eval_strategy": "steps" if evaluating else "no",
        "eval_steps": eval_steps if evaluating else None,
        "predict_with_generate": evaluating,
        "generation_num_beams": 1,  # dev decoding is greedy: a fast quality signal, not the reported score
        "metric_for_best_model": "bleu" if evaluating else None,  # evaluation.dev_metrics
        "greater_is_better": True if evaluating else None,
        "logging_steps": logging_steps,
        "logging_nan_inf_filter": False,  # a NaN loss must reach the logs, where the health check sees it
        "report_to": [],
        "disable_tqdm": True,  # progress is one line per log (monitoring.TrainingProgress)
        "seed": seed,
        "per_device_train_batch_size": 1,  # unused: batches come from the token-budget sampler
        "dataloader_drop_last": False,
        "ddp_timeout": DATA_PREPARATION_WAIT_S,
    }
    values.update(overrides)
    return Seq2SeqTrainingArguments(**values)


class TokenBudgetSeq2SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer on §5.1 batches of about `max_tokens` source and target tokens.

    Training batches are padded from flat token arrays (`token_arrays.PaddedPairBatches`; `train_dataset` is
    `TokenizedPairs`, memory-mapped from the data cache, or a `tokenize_parallel` Dataset), about 40× faster on
    the host than collating Python lists with `DataCollatorForSeq2Seq` (which still collates the dev set).

    It also logs target tokens per second of training (from the token counts the Trainer makes anyway, read once
    per log), and keeps the model's generation config as it was across dev decoding (Seq2SeqTrainer writes
    transformers' fallback defaults such as max_length=20 into it, which would end "input length + 50").
    """

    def __init__(self, *args: Any, max_tokens: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_tokens = max_tokens
        self._tokens_since_log: torch.Tensor | int = 0
        self._window_started = time.perf_counter()

    def get_train_dataloader(self) -> DataLoader:
        pad_token_id = getattr(self.processing_class, "pad_token_id", self.model.config.pad_token_id)
        batches = PaddedPairBatches(self.train_dataset, pad_token_id)  # padded batches without Python lists
        pairs = batches.pairs
        sampler = TokenBudgetBatchSampler(
            pairs.source_lengths, pairs.target_lengths, self.max_tokens, seed=self.args.seed
        )
        loader = DataLoader(
            batches,
            batch_sampler=sampler,
            collate_fn=already_collated,
            num_workers=self.args.dataloader_num_workers,
            pin_memory=self.args.dataloader_pin_memory and torch.cuda.is_available(),
        )
        return self.accelerator.prepare(loader)

    def get_batch_samples(
        self, epoch_iterator: Iterator, num_batches: int, device: torch.device
    ) -> tuple[list, torch.Tensor | int | None]:
        batch_samples, num_items_in_batch = super().get_batch_samples(epoch_iterator, num_batches, device)
        if num_items_in_batch is not None:  # target tokens of this update, summed over processes
            self._tokens_since_log = self._tokens_since_log + num_items_in_batch
        return batch_samples, num_items_in_batch

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            seconds = time.perf_counter() - self._window_started
            logs["target_tokens_per_second"] = round(float(self._tokens_since_log) / max(seconds, 1e-9))
            self._tokens_since_log = 0
            self._window_started = time.perf_counter()
        super().log(logs, start_time)

    def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        started = time.perf_counter()
        generation_config = copy.deepcopy(self.model.generation_config)
        try:
            return super().evaluate(*args, **kwargs)
        finally:
            self.model.generation_config = generation_config
            self._window_started += time.perf_counter() - started  # dev decoding is not training time

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """Checkpoints and saved models as transformers writes them, with the weights' permissions those of any
        new file (safetensors writes 0600)."""
        super()._save(output_dir, state_dict)
        weights = Path(output_dir if output_dir is not None else self.args.output_dir) / "model.safetensors"
        if weights.is_file():
            with_usual_permissions(weights)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """transformers warns of "missing keys" on every --resume for the tied weights, which a checkpoint never
        holds (the decoder's embedding and the output layer are the encoder's table, §3.4); only other keys are
        worth a warning."""
        tied = set(getattr(self.model, "_tied_weights_keys", None) or {})
        missing = [key for key in load_result.missing_keys if key not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_dataset: TokenizedPairs | Dataset,
    args: Seq2SeqTrainingArguments,
    max_tokens: int,
    *,
    eval_dataset: Dataset | None = None,
    compute_metrics: Callable[[EvalPrediction], dict[str, float]] | None = None,
    callbacks: Sequence[TrainerCallback] = (),
) -> TokenBudgetSeq2SeqTrainer:
    """A Seq2SeqTrainer over token-budget training batches; the dev set is padded by DataCollatorForSeq2Seq."""
    if eval_dataset is not None:  # longest first, so greedy decoding pads little
        order = np.argsort(-eval_dataset.with_format("arrow")["src_len"].to_numpy(), kind="stable")
        eval_dataset = eval_dataset.select(order).remove_columns(["src_len", "tgt_len"])
    trainer = TokenBudgetSeq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100),
        processing_class=tokenizer,
        compute_metrics=compute_metrics,
        callbacks=list(callbacks),
        max_tokens=max_tokens,
    )
    if any(isinstance(callback, TrainingProgress) for callback in callbacks):
        trainer.remove_callback(PrinterCallback)  # it would print every log dict again
    return trainer
