"""Seq2SeqTrainer on §5.1's token-budget batches: the Trainer the job trains with, and `build_trainer`."""

import copy
import logging
import shutil
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
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..data.batching import BucketCollator, ShapeBuckets, TokenBudgetBatchSampler
from ..data.token_arrays import PaddedPairBatches, TokenizedPairs, already_collated
from ..files.writing import write_failures_named
from .checkpoints import checkpoint_problem, with_usual_permissions
from .fused_loss import use_fused_loss
from .monitoring import TrainingProgress

logger = logging.getLogger(__name__)


class TokenBudgetSeq2SeqTrainer(Seq2SeqTrainer):
    """Seq2SeqTrainer on §5.1 batches of about `max_tokens` source and target tokens.

    Training batches are padded from flat token arrays (`data.token_arrays.PaddedPairBatches`; `train_dataset` is
    `TokenizedPairs`, memory-mapped from the data cache), about 40× faster on the host than collating Python
    lists with `DataCollatorForSeq2Seq` (which still collates the dev set).

    It also logs target tokens per second of training (from the token counts the Trainer makes anyway, read once
    per log), and keeps the model's generation config as it was across dev decoding (Seq2SeqTrainer writes
    transformers' fallback defaults such as max_length=20 into it, which would end "input length + 50").

    With `bounded_shapes` (by default, under `torch_compile` only) the batches take a bounded set of shapes
    (`data.batching.ShapeBuckets`); compiled with static shapes, each is compiled once, and the first step of
    each logs "compiling for shape k of at most n".

    The model trains with the loss fused with its tied softmax (`fused_loss.use_fused_loss`) where its config
    asks for it (`fused_loss`, the default).
    """

    def __init__(
        self, *args: Any, max_tokens: int, bounded_shapes: bool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        use_fused_loss(self.model)
        self.max_tokens = max_tokens
        self.bounded_shapes = self.args.torch_compile if bounded_shapes is None else bounded_shapes
        self.batch_shapes: list[tuple[int, int]] = []  # with bounded_shapes: the (rows, length) batches take
        self._shapes_seen: set[tuple[int, ...]] = set()
        self._tokens_since_log: torch.Tensor | int = 0
        self._window_started = time.perf_counter()

    def get_train_dataloader(self) -> DataLoader:
        pad_token_id = getattr(self.processing_class, "pad_token_id", self.model.config.pad_token_id)
        batches = PaddedPairBatches(self.train_dataset, pad_token_id)  # padded batches without Python lists
        pairs = batches.pairs
        collate: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] = already_collated
        buckets = None
        if self.bounded_shapes:
            longest = np.maximum(pairs.source_lengths, pairs.target_lengths)
            buckets = ShapeBuckets.for_lengths(longest, self.max_tokens)
            self.batch_shapes = buckets.shapes(longest)
            collate = BucketCollator(buckets, pad_token_id)
        sampler = TokenBudgetBatchSampler(
            pairs.source_lengths,
            pairs.target_lengths,
            self.max_tokens,
            seed=self.args.seed,
            length_buckets=buckets,
        )
        loader = DataLoader(
            batches,
            batch_sampler=sampler,
            collate_fn=collate,
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

    def training_step(
        self, model: torch.nn.Module, inputs: dict[str, Any], num_items_in_batch: Any = None
    ) -> torch.Tensor:
        shape = tuple(inputs["input_ids"].shape)
        if self.args.torch_compile and self.batch_shapes and shape not in self._shapes_seen:
            self._shapes_seen.add(shape)
            if self.is_world_process_zero():  # a step of a new shape compiles first, silently, for minutes
                logger.info(
                    f"compiling for shape {len(self._shapes_seen)} of at most {len(self.batch_shapes)} "
                    f"({shape[0]} sentences × {shape[1]} tokens)"
                )
        return super().training_step(model, inputs, num_items_in_batch)

    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        """Static shapes under torch_compile: batches take a few shapes (`ShapeBuckets`), each compiled once
        and specialised, where transformers' default (dynamic=None) recompiles the second shape for symbolic
        sizes."""
        args = super()._build_accelerator_args(**kwargs)
        if self.args.torch_compile and args.get("dynamo_plugin") is not None:
            args["dynamo_plugin"].dynamic = False
        return args

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

    def _save_checkpoint(self, model: torch.nn.Module, trial: Any) -> None:
        """A checkpoint as transformers saves it, all or nothing: a save that fails (a full disk, a read-only
        folder, an interrupt) removes what it wrote of checkpoint-<step> unless the checkpoint was already whole,
        so the last whole checkpoint is where --resume continues (a save killed outright leaves a folder without
        trainer_state.json, which `run_folder.resume_point` sets aside); a write the machine refused is a
        WriteError naming the checkpoint."""
        checkpoint = (
            Path(self._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        )
        try:
            with write_failures_named(checkpoint, "--output_dir"):
                super()._save_checkpoint(model, trial)
        except BaseException:
            if self.args.should_save and checkpoint.is_dir() and checkpoint_problem(checkpoint) is not None:
                shutil.rmtree(checkpoint, ignore_errors=True)
            raise

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
    eval_dataset: TokenizedPairs | Dataset | None = None,
    compute_metrics: Callable[[EvalPrediction], dict[str, float]] | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    bounded_shapes: bool | None = None,
) -> TokenBudgetSeq2SeqTrainer:
    """A Seq2SeqTrainer over token-budget training batches, in a bounded set of shapes with `bounded_shapes`
    (None: under `args.torch_compile`); the dev set (`TokenizedPairs`, or a `tokenize_parallel` Dataset) is
    padded by DataCollatorForSeq2Seq."""
    if isinstance(eval_dataset, TokenizedPairs):
        eval_dataset = eval_dataset.to_dataset()
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
        bounded_shapes=bounded_shapes,
    )
    if any(isinstance(callback, TrainingProgress) for callback in callbacks):
        trainer.remove_callback(PrinterCallback)  # it would print every log dict again
    return trainer
