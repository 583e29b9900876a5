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

import lazy_loader

# Each name is imported from its module on first use (PEP 562), so that importing one module of the package
# does not import them all.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "arguments": ["ADAM_BETAS", "ADAM_EPSILON", "paper_learning_rate", "paper_training_arguments"],
        "checkpoints": ["average_checkpoints", "average_last"],
        "checks": ["check_inputs"],
        "job": ["TrainResult", "train_and_evaluate"],
        "job_data": [
            "Corpora",
            "CorpusError",
            "check_data_inputs",
            "data_cache_folder",
            "load_corpora",
            "prepare_training_data",
        ],
        "monitoring": ["TrainingCollapsed", "TrainingDiverged", "TrainingFailure"],
        "options": ["DEFAULT_RECIPE", "JsonDict", "TrainOptions", "option_names"],
        "run_precision": [
            "MIXED_PRECISIONS",
            "RunPrecision",
            "auto_precision_reason",
            "bf16_available",
            "decide_precision",
            "run_precision",
            "training_device",
        ],
        "run_folder": ["RunFolderError", "holding_run_folder"],
        "trainer": ["TokenBudgetSeq2SeqTrainer", "build_trainer"],
    },
)
