"""The end-to-end job: corpora → joint BPE → training with the paper's recipe → final model → BLEU → examples.

`train_and_evaluate(options)` reads top to bottom as the data flows; each step lives in a module of its own
(`job_data`, `precision`, `arguments`, `trainer`, `final_model`, `run_folder`). Under `torchrun` / `accelerate
launch` every process trains on its shard of the token batches; only the main process trains the vocabulary,
builds the final model, evaluates it and returns a result.
"""

import contextlib
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainingArguments,
    TrainerCallback,
    TrainerState,
)

from ..data.token_arrays import TokenizedPairs, tokenize_pairs
from ..data.tokenization import tokenizer_fingerprint
from ..files.writing import write_failures_named
from ..modeling.configuration_vaswani_transformer import VaswaniTransformerConfig
from ..modeling.modeling_vaswani_transformer import VaswaniTransformerForConditionalGeneration
from ..quiet import no_transformers_progress_bars
from .arguments import paper_training_arguments
from .checkpoints import TRAINER_STATE_NAME
from .checks import check_inputs
from .final_model import evaluate_final_model, push_final_model, write_final_model, write_training_run
from .job_data import load_corpora, prepare_training_data
from .monitoring import (
    HealthCheck,
    ResumedCadence,
    TrainingProgress,
    TrainingTimeBudget,
    collapse_check_step,
    dev_metrics,
    failure_advice,
    trained_seconds,
    unigram_loss,
)
from .options import TrainOptions
from .run_folder import delete_earlier_run, holding_run_folder, resume_point
from .run_precision import precision_name, run_precision
from .run_record import record_run
from .trainer import TokenBudgetSeq2SeqTrainer, build_trainer

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    """Where things were written and what was measured."""

    model_dir: Path
    scores: dict
    dev_scores: dict | None
    train_seconds: float
    example_translations: dict[str, str]
    hub_url: str | None = None


def train_and_evaluate(options: TrainOptions) -> TrainResult | None:
    """Load data, train BPE, train the model with the paper's recipe, pick the final model, decode, score.

    Returns None in the processes other than the main one. Raises `monitoring.TrainingFailure` when training
    diverges or collapses, and `run_folder.RunFolderError` when another training holds --output_dir.
    """
    with holding_run_folder(options.output_dir):
        return _train_and_evaluate(options)


def _train_and_evaluate(options: TrainOptions) -> TrainResult | None:
    check_inputs(options)  # again, now that the folder is this run's: a run may have finished there meanwhile
    config = options.model_config()
    args = _training_arguments(options, config)
    advice = failure_advice(options.lr_scale, args.learning_rate, options.warmup_steps, config.init_scheme)
    is_main = args.process_index == 0
    for shortfall in (options.averaging_shortfall(), options.warmup_shortfall()):
        if is_main and shortfall is not None:
            logger.warning(shortfall)
    corpora = load_corpora(options)  # read and checked before --overwrite deletes anything
    if options.overwrite and is_main and options.output_dir.is_dir():
        delete_earlier_run(options.output_dir)

    def in_turn(step: str) -> contextlib.AbstractContextManager:
        # local=False: on several machines, one process (on a shared --output_dir) writes what all of them read
        return args.main_process_first(local=False, desc=step)

    tokenizer, tokenized, filter_stats = prepare_training_data(options, corpora.train, is_main, in_turn)
    # recorded once the folder holds the run's vocabulary: a run that fails before leaves no record behind
    precision = run_precision(options.output_dir, options.mixed_precision, options.resume, is_main, in_turn)
    args = precision.applied_to(args)
    logger.info(filter_stats.summary())
    dev = tokenize_pairs(corpora.dev, tokenizer, options.max_length)[0] if corpora.dev is not None else None
    config.vocab_size = len(tokenizer)
    config.tokenizer_fingerprint = tokenizer_fingerprint(tokenizer)
    config.langs = [options.source_lang, options.target_lang]  # the pair, for every later save of the model
    torch.manual_seed(options.seed)
    model = VaswaniTransformerForConditionalGeneration(config)
    logger.info(
        f"model: preset {options.preset}, {model.num_parameters():,} parameters, init {config.init_scheme}; "
        f"peak learning rate {args.learning_rate:.2e} at step {options.warmup_steps}; "
        f"{precision_name(args)} ({precision.chosen_by})"
    )
    if is_main:
        record_run(options, tokenizer)
    checkpoint = resume_point(options.output_dir, options.resume, is_main)
    finished = _finished_state(checkpoint, options.max_steps, options.max_train_minutes)
    if finished is not None:  # its weights are the model's: "last" saves them, "best" knows its checkpoint
        model = VaswaniTransformerForConditionalGeneration.from_pretrained(checkpoint)
    floor = unigram_loss(tokenized.target_counts(len(tokenizer)), config.label_smoothing)
    trainer = _trainer_for(options, args, model, tokenizer, tokenized, dev, floor, advice)
    started = time.perf_counter()
    if finished is not None:
        logger.info(
            f"--resume: {checkpoint} is step {finished.global_step} of {options.max_steps}, after "
            f"{trained_seconds(finished) / 60:.1f} min of training: no more training"
        )
        trainer.state = finished
    else:
        with no_transformers_progress_bars(), write_failures_named(options.output_dir, "--output_dir"):
            trainer.train(resume_from_checkpoint=checkpoint)
    # The run's training time over all its sessions (a resumed run's card and summary tell the whole run's)
    train_seconds = max(trained_seconds(trainer.state), time.perf_counter() - started)
    if not is_main:
        return None

    def record(folder: Path) -> None:
        write_training_run(trainer, train_seconds, folder, precision, floor, options.logging_steps)

    model_dir, steps = write_final_model(options, trainer, tokenizer, record), trainer.state.global_step
    scores, dev_scores, examples = evaluate_final_model(options, model_dir, corpora, steps, advice)
    hub_url = push_final_model(options, model_dir) if options.push_to_hub is not None else None
    return TrainResult(model_dir, scores, dev_scores, train_seconds, examples, hub_url)


def _finished_state(checkpoint: str | None, max_steps: int, max_minutes: float | None) -> TrainerState | None:
    """The Trainer's state at a resumed checkpoint that has done `max_steps` updates or trained `max_minutes`,
    else None. The Trainer would train one more step from there: it checks for the end only after each step."""
    if checkpoint is None:
        return None
    state = TrainerState.load_from_json(str(Path(checkpoint) / TRAINER_STATE_NAME))
    out_of_time = max_minutes is not None and trained_seconds(state) >= max_minutes * 60
    return state if state.global_step >= max_steps or out_of_time else None


def _training_arguments(options: TrainOptions, config: VaswaniTransformerConfig) -> Seq2SeqTrainingArguments:
    """The paper's recipe with this job's batch, schedule, checkpoint and dev-decoding settings."""
    return paper_training_arguments(
        options.output_dir,
        config.d_model,
        max_steps=options.max_steps,
        warmup_steps=options.warmup_steps,
        lr_scale=options.lr_scale,
        save_steps=options.save_steps,
        average_last=options.average_last,
        eval_steps=options.eval_steps,
        logging_steps=min(options.logging_steps, options.max_steps),  # a short run still logs its loss
        seed=options.seed,
        torch_compile=options.torch_compile,
        gradient_accumulation_steps=options.gradient_accumulation_steps,
        per_device_eval_batch_size=options.eval_batch_size,
        report_to=options.report_to or "none",
    )


def _trainer_for(
    options: TrainOptions,
    args: Seq2SeqTrainingArguments,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: TokenizedPairs,
    dev: TokenizedPairs | None,
    floor: float,
    advice: str,
) -> TokenBudgetSeq2SeqTrainer:
    """The paper's recipe on Seq2SeqTrainer, with dev decoding, the health check and the progress lines."""
    callbacks: list[TrainerCallback] = [
        ResumedCadence(),
        TrainingTimeBudget(options.max_train_minutes, options.warmup_steps),
        TrainingProgress(options.max_train_minutes),
    ]
    if options.health_checks:
        check_from = collapse_check_step(options.warmup_steps)
        logger.info(
            f"health check: the loss must be below {floor:.3f} (unigram floor) from step {check_from} on"
        )
        callbacks.append(HealthCheck(floor, check_from, advice))
    return build_trainer(
        model,
        tokenizer,
        train,
        args,
        options.max_tokens,
        eval_dataset=dev,
        compute_metrics=dev_metrics(tokenizer) if dev is not None else None,
        callbacks=callbacks,
    )
