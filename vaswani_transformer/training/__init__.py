"""Training: the job's settings and recipes, its run folder, the paper's recipe on Seq2SeqTrainer, monitoring,
checkpoint averaging, and the end-to-end job (`train_and_evaluate`).

- `options` (`TrainOptions`) and `recipes` (the YAML files that hold every default); `checks`: what a job
  checks before any long work;
- `job_data`: the corpora the options name, and the training data prepared once;
- `run_folder`: one run per --output_dir, --resume and --overwrite; `precision`: decided once per run;
- `arguments` (§5.3's optimiser and schedule) and `trainer` (§5.1's token-budget batches);
- `monitoring`: health checks, progress, dev BLEU; `checkpoints`: averaging (§6.1); `final_model`: the model the
  job reports;
- `job`: the job itself.
"""

from .arguments import ADAM_BETAS, ADAM_EPSILON, paper_learning_rate, paper_training_arguments
from .checkpoints import average_checkpoints, average_last
from .checks import check_inputs
from .job import TrainResult, train_and_evaluate
from .job_data import (
    Corpora,
    CorpusError,
    check_data_inputs,
    data_cache_folder,
    load_corpora,
    prepare_training_data,
)
from .monitoring import TrainingCollapsed, TrainingDiverged, TrainingFailure
from .options import DEFAULT_RECIPE, JsonDict, TrainOptions, option_names
from .precision import (
    MIXED_PRECISIONS,
    RunPrecision,
    auto_precision_reason,
    bf16_available,
    decide_precision,
    run_precision,
    training_device,
)
from .run_folder import RunFolderError, holding_run_folder
from .trainer import TokenBudgetSeq2SeqTrainer, build_trainer

__all__ = [
    "ADAM_BETAS",
    "ADAM_EPSILON",
    "DEFAULT_RECIPE",
    "MIXED_PRECISIONS",
    "Corpora",
    "CorpusError",
    "JsonDict",
    "RunFolderError",
    "RunPrecision",
    "TokenBudgetSeq2SeqTrainer",
    "TrainOptions",
    "TrainResult",
    "TrainingCollapsed",
    "TrainingDiverged",
    "TrainingFailure",
    "auto_precision_reason",
    "average_checkpoints",
    "average_last",
    "bf16_available",
    "build_trainer",
    "check_data_inputs",
    "check_inputs",
    "data_cache_folder",
    "decide_precision",
    "holding_run_folder",
    "load_corpora",
    "option_names",
    "paper_learning_rate",
    "paper_training_arguments",
    "prepare_training_data",
    "run_precision",
    "train_and_evaluate",
    "training_device",
]
