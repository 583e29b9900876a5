"""The paper's training recipe (§5.3) as Seq2SeqTrainingArguments: Adam(0.9, 0.98, 1e-9), the warm-up / inverse-√
schedule of eq. (3), no gradient clipping; label smoothing (§5.4) lives in the model's loss.

`paper_training_arguments` takes the job's settings under their own names and is the one place they meet the
Trainer's: `average_last` becomes the checkpoint rotation (`save_total_limit`, one more when the dev set is
evaluated, so the best checkpoint is kept out of it), `eval_steps` turns greedy dev decoding on. It has no
defaults for those settings: they come from the recipes. The precision is not here: `precision.RunPrecision`
applies the one the run decided.
"""

from pathlib import Path

import torch
from transformers import Seq2SeqTrainingArguments

# §5.3 Optimizer: Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (AdamW with no weight decay is exactly Adam).
ADAM_BETAS = (0.9, 0.98)
ADAM_EPSILON = 1e-9
# Under torchrun the other processes wait at a barrier while the main one prepares the data the first time (the
# paper's 4.5M pairs take minutes on a few CPU cores, a busy host several times that). transformers' default wait
# of 30 minutes would end such a run; this one is set explicitly, for work that finishes.
DATA_PREPARATION_WAIT_S = 4 * 3600


def paper_learning_rate(d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Peak-setting base rate d_model^-0.5 · warmup^-0.5, which makes `inverse_sqrt` equal eq. (3).

    transformers' inverse_sqrt multiplies it by step/warmup during warm-up and by sqrt(warmup/step) after,
    giving lrate = scale · d_model^-0.5 · min(step^-0.5, step · warmup^-1.5); scale 1 is the paper's formula.
    """
    return scale * d_model**-0.5 * warmup_steps**-0.5


def paper_training_arguments(
    output_dir: str | Path,
    d_model: int,
    *,
    max_steps: int,
    warmup_steps: int,
    lr_scale: float,
    save_steps: int,
    average_last: int,
    eval_steps: int,
    logging_steps: int,
    seed: int,
    **overrides: object,
) -> Seq2SeqTrainingArguments:
    """Seq2SeqTrainingArguments with §5.3's optimiser and schedule and the job's checkpoint and dev settings.

    With `eval_steps` > 0 the dev set is decoded greedily every `eval_steps` updates; its BLEU is logged, and the
    checkpoint with the best dev BLEU is kept out of the rotation of the last `average_last` checkpoints (one more
    is kept for it). `overrides` are other Seq2SeqTrainingArguments fields.
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
        # Explicit on accelerator-less machines: it also lets torchrun run CPU processes as gloo DDP.
        "use_cpu": not (torch.cuda.is_available() or torch.backends.mps.is_available()),
        # every parameter takes part in every step (the Trainer's default, True, costs DDP a graph walk a step)
        "ddp_find_unused_parameters": False,
        "save_strategy": "steps",
        "save_steps": save_steps,
        "save_total_limit": average_last + evaluating,
        "eval_strategy": "steps" if evaluating else "no",
        "eval_steps": eval_steps if evaluating else None,
        "predict_with_generate": evaluating,
        "generation_num_beams": 1,  # dev decoding is greedy: a fast quality signal, not the reported score
        "metric_for_best_model": "bleu" if evaluating else None,  # monitoring.dev_metrics
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
