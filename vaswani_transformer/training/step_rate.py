"""How many steps this machine trains within --max_train_minutes, measured before training, so that a recipe can
take the settings measured best for that many steps (its `by_steps:` rows; docs/decisions/main-job.md).

A time budget makes the steps whatever the machine gives (4,700-5,200 for the main job on one 2-core CPU, 1,500
on another), and the settings best for 5,000 steps are not the best for 1,500. The measurement trains the recipe's
own model for a few steps on random tokens in batches of the recipe's size, in the precision the run will train
in, and times the last ones, scaled by `WHOLE_RUN_RATIO`, measured against a whole run of the main job. A
machine busy with other work measures slower, as it would train slower.
"""

import logging
import os
import time
from typing import TYPE_CHECKING, Any

import torch

from ..modeling.modeling_vaswani_transformer import VaswaniTransformerForConditionalGeneration
from ..precision import cpu_bf16_is_faster
from .recipes import STEPS_BELOW

if TYPE_CHECKING:  # the options module imports this one
    from .options import TrainOptions

logger = logging.getLogger(__name__)

# The main job's sentences are about this long a side: a batch of max_tokens has this many columns
SENTENCE_TOKENS = 12
WARM_UP_STEPS = 2  # the first steps allocate and pick kernels
TIMED_STEPS = 6
# A whole run's seconds a step over the measured step's: the main job on a float32 AMD EPYC without AVX-512 trained
# 2,086 steps in 8.5 minutes (0.2445 s a step) where this measured 0.300 s (its loss is the model's own, not the
# Trainer's fused one, and its batches are full)
WHOLE_RUN_RATIO = 0.815


def measured_step_seconds(options: "TrainOptions") -> float:
    """Seconds one training step of `options`' model takes on this machine: forward, backward and an Adam update
    of a batch of --max_tokens random tokens a side, in the run's precision, scaled to a whole run's
    (`WHOLE_RUN_RATIO`)."""
    torch.manual_seed(options.seed)
    config = options.model_config()
    model = VaswaniTransformerForConditionalGeneration(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    rows = max(1, options.max_tokens // SENTENCE_TOKENS)
    inputs = torch.randint(4, config.vocab_size, (rows, SENTENCE_TOKENS))
    labels = torch.randint(4, config.vocab_size, (rows, SENTENCE_TOKENS))
    # on the CPU (a recipe's rows never apply with its cuda: section): "auto" is the CPU's rule
    bf16 = options.mixed_precision == "bf16" or (options.mixed_precision == "auto" and cpu_bf16_is_faster())
    times = []
    for _ in range(WARM_UP_STEPS + TIMED_STEPS):
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=inputs, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
    return WHOLE_RUN_RATIO * sorted(times[WARM_UP_STEPS:])[TIMED_STEPS // 2]


def expected_steps(options: "TrainOptions", step_seconds: float) -> int:
    """The steps the run trains: --max_steps, or fewer where --max_train_minutes ends it first."""
    if options.max_train_minutes is None:
        return options.max_steps
    return min(options.max_steps, int(options.max_train_minutes * 60 / step_seconds))


def steps_to_fit(options: "TrainOptions", rows: list[dict[str, Any]]) -> int:
    """The steps the recipe's `rows` are chosen for: --fit_to_steps; else --max_steps where it is below every row's
    bound or no time budget can end the run first (or a distributed run's processes could measure apart); else
    the steps this machine is measured to train within --max_train_minutes."""
    if options.fit_to_steps is not None:
        return options.fit_to_steps
    one_process = int(os.environ.get("WORLD_SIZE", "1")) == 1
    if options.max_train_minutes is None or options.max_steps < rows[0][STEPS_BELOW] or not one_process:
        return options.max_steps
    seconds = measured_step_seconds(options)
    steps = expected_steps(options, seconds)
    logger.info(
        f"steps: about {steps:,} in {options.max_train_minutes:g} minutes of training on this machine ({seconds:.3f} s "
        "a step, measured); --fit_to_steps N fits the recipe to N steps instead"
    )
    return steps
