"""The final model (§6.1): the average of the last checkpoints, the best dev checkpoint, or the last weights; its
decoding settings; and its scores on the dev and test sets, refused for a model that has collapsed."""

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers
from datasets import Dataset
from transformers import GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..decoding.translate import translate
from ..engines.torch_engine import TorchEngine
from ..evaluation.loading import load_for_decoding
from ..evaluation.scoring import translate_and_score, write_scores
from ..files.writing import folder_written_whole, write_text_atomically
from ..hub import push_to_hub
from ..plotting import plot_training_curve, training_losses_logged
from .checkpoints import drop_scores, whole_checkpoints, write_average
from .job_data import Corpora
from .monitoring import TrainingCollapsed, collapse_check_step, translation_symptom
from .options import TrainOptions
from .run_folder import write_options
from .run_precision import RunPrecision
from .trainer import TokenBudgetSeq2SeqTrainer

logger = logging.getLogger(__name__)

SANITY_SAMPLE = 100  # training sources decoded to check the final model when there is no dev set


def build_final_model(
    options: TrainOptions, trainer: TokenBudgetSeq2SeqTrainer, folder: Path
) -> dict[str, Any]:
    """Write the final model's weights into `folder`: the average of the last checkpoints (§6.1), the best dev
    checkpoint, or the last weights. Returns what they are, as training_run.json records it (`final_weights`):
    the way they were made and the checkpoints they came from, which may be fewer than asked."""
    checkpoints = whole_checkpoints(options.output_dir)[0]
    best = trainer.state.best_model_checkpoint
    if options.final_model == "best" and best is not None:
        logger.info(f"final model: {best} (best greedy dev BLEU {trainer.state.best_metric:.2f})")
        write_average([Path(best)], folder)
        return {"made_by": "best", "checkpoints": [Path(best).name]}
    if options.final_model == "average" and options.average_last > 1 and len(checkpoints) >= 2:
        chosen = checkpoints[-options.average_last :]
        logger.info(f"final model: average of {', '.join(path.name for path in chosen)}")
        write_average(chosen, folder)
        return {"made_by": "average", "checkpoints": [path.name for path in chosen]}
    logger.info(f"final model: the weights after step {trainer.state.global_step}")
    trainer.save_model(str(folder))
    return {"made_by": "last", "step": trainer.state.global_step}


def write_final_model(
    options: TrainOptions,
    trainer: TokenBudgetSeq2SeqTrainer,
    tokenizer: PreTrainedTokenizerBase,
    record: Callable[[Path], None],
) -> Path:
    """--output_dir/final, all or nothing: the model (`build_final_model`), its tokenizer, the run's settings,
    its decoding settings and what `record` writes (the training run, the curve), written into a temporary
    sibling and moved into place whole. An earlier final model's scores go, since they measured other weights.
    A full disk or read-only folder is a WriteError naming the folder (nothing of the new model is left)."""
    final_dir = options.output_dir / "final"
    with folder_written_whole(final_dir, "--output_dir") as building:
        final_weights = build_final_model(options, trainer, building)
        tokenizer.save_pretrained(building)
        write_options(options, building)
        keep_decoding_settings(options, building)
        record(building)
        run_file = building / "training_run.json"
        run = json.loads(run_file.read_text(encoding="utf-8")) if run_file.is_file() else {}
        write_text_atomically(run_file, json.dumps({**run, "final_weights": final_weights}, indent=2) + "\n")
        if final_dir.is_dir():
            drop_scores(final_dir)  # last, once everything new is written
    return final_dir


def _check_final_model(options: TrainOptions, steps: int, translations: list[str], advice: str) -> None:
    """Refuse to report scores of a model that translates every sentence the same way (or into nothing), once it
    has trained `steps` updates, past the warm-up, to be judged: a run stopped earlier (by --max_train_minutes, say)
    is scored with a warning that asks for a longer run, not for another learning rate."""
    check_step = collapse_check_step(options.warmup_steps)
    judged = options.health_checks and steps >= check_step
    symptom = translation_symptom(translations)
    if judged and symptom:
        raise TrainingCollapsed(
            f"The final model has collapsed: {symptom}; no scores are reported. " + advice
        )
    if symptom:
        why = (
            "as --no_health_checks asks"
            if not options.health_checks
            else f"training ended at step {steps}, too early to judge (the check starts at step {check_step}, "
            f"after the warm-up of {options.warmup_steps}): train longer (a larger --max_train_minutes or "
            "--max_steps, or --resume the run with one)"
        )
        logger.warning(f"warning: the final model looks collapsed ({symptom}); scoring it anyway: {why}")


def keep_decoding_settings(options: TrainOptions, model_dir: Path) -> None:
    """Write the run's beam settings (--length_penalty, e.g. a recipe's α tuned on dev, and a --num_beams above 1)
    into the final model's generation config, so the saved model decodes as its scores were measured. --num_beams 1
    scores greedily without taking the beam from the model (a greedy config cannot hold beam settings)."""
    overrides: dict[str, Any] = {}
    if options.length_penalty is not None:
        overrides["length_penalty"] = options.length_penalty
    if options.num_beams is not None and options.num_beams > 1:
        overrides["num_beams"] = options.num_beams
    if overrides:
        generation_config = GenerationConfig.from_pretrained(model_dir)
        generation_config.update(**overrides)
        generation_config.save_pretrained(model_dir)


def _score(
    options: TrainOptions,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Dataset,
    references_tokenized: list[str] | None = None,
    **generate_overrides: Any,
) -> tuple[list[str], dict]:
    return translate_and_score(
        TorchEngine(model, tokenizer),
        list(pairs["source"]),
        list(pairs["target"]),
        target_lang=options.target_lang,
        references_tokenized=references_tokenized,
        split_compounds=options.split_compounds,
        batch_size=options.eval_batch_size,
        show_progress=True,
        # --num_beams 1 is not in the model's config (keep_decoding_settings); the rest is
        **({} if options.num_beams is None else {"num_beams": options.num_beams}),
        **generate_overrides,
    )


def choose_length_penalty(
    options: TrainOptions,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dev: Dataset,
    model_dir: Path,
) -> tuple[list[str], dict]:
    """§6.1: α was "chosen after experimentation on the development set". The dev set decoded with each of
    --length_penalty_choices; the α of the best dev sacreBLEU (the first of equals) is kept in the model's
    generation config, in memory and in `model_dir`. Returns its dev translations and scores, which also hold
    every α's dev sacreBLEU (`length_penalty_on_dev`)."""
    decoded = {
        alpha: _score(options, model, tokenizer, dev, length_penalty=alpha)
        for alpha in options.length_penalty_choices
    }
    bleu = {alpha: scores["sacrebleu"]["score"] for alpha, (_, scores) in decoded.items()}
    chosen = max(bleu, key=bleu.__getitem__)
    logger.info(
        f"length penalty: α {chosen} chosen on dev ("
        + ", ".join(f"α {alpha}: {score:.2f}" for alpha, score in bleu.items())
        + " sacreBLEU)"
    )
    model.generation_config.length_penalty = chosen
    generation_config = GenerationConfig.from_pretrained(model_dir)
    generation_config.update(length_penalty=chosen)
    generation_config.save_pretrained(model_dir)
    hypotheses, scores = decoded[chosen]
    scores["length_penalty_on_dev"] = {str(alpha): score for alpha, score in bleu.items()}
    return hypotheses, scores


def evaluate_final_model(
    options: TrainOptions, model_dir: Path, corpora: Corpora, steps: int, advice: str
) -> tuple[dict, dict | None, dict[str, str]]:
    """Load the final model once: check it has not collapsed (after `steps` updates), score dev and test, translate
    the examples."""
    model, tokenizer = load_for_decoding(model_dir)
    dev_scores = None
    if corpora.dev is not None:
        if options.chooses_length_penalty:
            dev_hypotheses, dev_scores = choose_length_penalty(
                options, model, tokenizer, corpora.dev, model_dir
            )
        else:
            dev_hypotheses, dev_scores = _score(options, model, tokenizer, corpora.dev)
        logger.info(
            f"dev: sacreBLEU {dev_scores['sacrebleu']['score']:.2f} (final model, {len(corpora.dev)} pairs)"
        )
        _check_final_model(options, steps, dev_hypotheses, advice)
        write_scores(model_dir, dev_hypotheses, dev_scores, name="dev_", choose="--output_dir")
    else:
        if options.chooses_length_penalty:
            logger.info(
                f"length penalty: no dev set to choose α on, the model's ({model.generation_config.length_penalty}) "
                "is kept: --dev_size N chooses it, --length_penalty sets it"
            )
        sample = list(corpora.train["source"][:SANITY_SAMPLE])
        _check_final_model(options, steps, translate(sample, model, tokenizer, num_beams=1), advice)
    hypotheses, scores = _score(options, model, tokenizer, corpora.test, corpora.test_references_tokenized)
    if dev_scores is not None and "length_penalty_on_dev" in dev_scores:  # the card says how α was chosen
        scores["length_penalty_on_dev"] = dev_scores["length_penalty_on_dev"]
    write_scores(model_dir, hypotheses, scores, choose="--output_dir")
    examples = list(options.examples)
    translations = dict(zip(examples, translate(examples, model, tokenizer), strict=True))
    return scores, dev_scores, translations


def write_training_run(
    trainer: TokenBudgetSeq2SeqTrainer,
    train_seconds: float,
    folder: Path,
    precision: RunPrecision,
    floor: float,
    logging_steps: int,
) -> None:
    """How the model was trained, for its model card: training_run.json (steps, time, hardware, precision and why,
    versions) and the training curve (against the unigram `floor`)."""
    args = trainer.args
    if torch.cuda.is_available():
        hardware = f"{args.world_size} × {torch.cuda.get_device_name()}"
    else:
        hardware = f"{args.world_size} × CPU process ({torch.get_num_threads()} threads)"
    run = {
        "steps": trainer.state.global_step,
        "train_seconds": round(train_seconds, 1),
        "hardware": hardware,
        "mixed_precision": {"no": "fp32"}.get(
            trainer.accelerator.mixed_precision, trainer.accelerator.mixed_precision
        ),
        "mixed_precision_chosen_by": precision.chosen_by,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }
    write_text_atomically(folder / "training_run.json", json.dumps(run, indent=2) + "\n")
    write_training_curve(trainer.state.log_history, folder, floor, logging_steps)


def write_training_curve(log_history: list[dict], folder: Path, floor: float, logging_steps: int) -> None:
    """training_curve.png in `folder`; none, said in the log, for a run that ended (on a time budget, say) before
    its first logged loss."""
    if not training_losses_logged(log_history):
        logger.info(
            f"no training curve: training ended before its first logged step (--logging_steps {logging_steps})"
        )
        return
    plot_training_curve(
        log_history, folder / "training_curve.png", unigram_floor=floor, choose="--output_dir"
    )


def push_final_model(options: TrainOptions, model_dir: Path) -> str | None:
    """Push the final model; when the upload fails (network, permissions), say how to retry and return None:
    the trained and scored model stays where it is."""
    try:
        url = push_to_hub(model_dir, options.push_to_hub, private=options.hub_private)
    except OSError as error:  # huggingface_hub's HTTP errors are OSErrors
        logger.error(
            f"error: pushing to {options.push_to_hub} failed: {error}\nThe model is saved in {model_dir}; retry "
            f"with: vaswani-push {model_dir} --repo_id {options.push_to_hub}"
        )
        return None
    logger.info(f"pushed to the Hub: {url}")
    return url
