"""The checks a job passes before any long work: its corpora and data cache, its model config, sharing that can
work, a run folder that can take it (apart from its inputs), and a --resume that continues the run as recorded.
Every failure is an error naming the flag and the fix."""

from pathlib import Path

from huggingface_hub import get_token
from huggingface_hub.utils import validate_repo_id
from transformers.integrations import integration_utils

from ..files.writing import check_writable
from .checkpoints import TRAINER_STATE_NAME, find_checkpoints, whole_checkpoints
from .job_data import check_data_inputs, corpus_files, data_cache_folder
from .options import TrainOptions, changed_on_resume
from .run_folder import OPTIONS_FILE, RunFolderError, check_output_dir, is_main_process, read_run_record
from .run_record import check_run_inputs


def check_inputs(options: TrainOptions) -> None:
    """Fail before any long work: missing local files, a model config that cannot be built, sharing that cannot
    work, a run folder that cannot take this run, a data cache or run folder that cannot be written (WriteError)."""
    check_data_inputs(options)
    options.model_config()
    if is_main_process():  # other processes find the main process's files there
        folder = options.output_dir
        check_output_dir(
            folder, resume=options.resume, overwrite=options.overwrite, inputs=job_inputs(options)
        )
        check_writable(folder, "--output_dir")
        if options.resume:
            check_resume(options)
    _check_sharing(options)


def job_inputs(options: TrainOptions) -> dict[str, Path]:
    """What the job reads, by the name an error gives it: its local corpus files and the data cache."""
    return corpus_files(options) | {"the --data_cache folder": data_cache_folder(options)}


def check_resume(options: TrainOptions) -> None:
    """--resume continues the run in --output_dir as its train_options.json records it: every setting but those
    that may change (`options.MAY_CHANGE_ON_RESUME`) as it was, the same corpora, vocabulary and model
    (`run_record.check_run_inputs`), from a checkpoint that can be resumed; or a RunFolderError naming each
    difference. Only reads: nothing is written before every check passes."""
    folder = options.output_dir
    record = read_run_record(folder)
    if record is None:
        if folder.is_dir() and find_checkpoints(folder):
            raise RunFolderError(
                f"--resume: {folder} holds checkpoints but no {OPTIONS_FILE} (the run's settings), so it cannot "
                "be checked that they are this run's: start a new run with --overwrite or in another --output_dir."
            )
        return
    if differences := changed_on_resume(options, record):
        raise RunFolderError(
            f"{'; '.join(differences)}. A run continues with the settings it was made with: leave those flags out "
            f"(--resume takes them from {folder / OPTIONS_FILE}), or train a new run in another --output_dir."
        )
    check_run_inputs(options, record, _resume_checkpoint(folder))


def _resume_checkpoint(folder: Path) -> Path | None:
    """The checkpoint --resume continues from (`run_folder.resume_point` sets the others aside), None when there
    is none yet; a RunFolderError when every checkpoint a save finished is damaged, naming each file: training
    the run again from the start is the user's choice, not a silent one."""
    whole, incomplete = whole_checkpoints(folder, for_resume=True) if folder.is_dir() else ([], {})
    damaged = [problem for path, problem in incomplete.items() if (path / TRAINER_STATE_NAME).is_file()]
    if not whole and damaged:
        raise RunFolderError(
            f"--resume: no checkpoint of {folder} can be continued from: {'; '.join(damaged)}. Restore the "
            "file from a copy, or train the run again from the start with --overwrite or in another --output_dir."
        )
    return whole[-1] if whole else None


def _check_sharing(options: TrainOptions) -> None:
    """A push needs a valid repo id and a token, a tracker must be installed: known before training starts."""
    if options.push_to_hub is not None:
        try:
            validate_repo_id(options.push_to_hub)
        except ValueError as error:  # the Hub's own rule, named with its flag
            raise ValueError(f"--push_to_hub {options.push_to_hub!r}: {error}") from None
        if get_token() is None:
            raise ValueError(
                f"--push_to_hub {options.push_to_hub} needs a Hub token: run `hf auth login` or set HF_TOKEN."
            )
    for tracker in options.report_to:
        _check_tracker(tracker)


# What pip installs for a tracker whose package has another name than transformers gives the tracker
TRACKER_PACKAGES = {
    "azure_ml": "azureml-core",
    "dagshub": "dagshub mlflow",
    "flyte": "flytekit flytekitplugins-deck-standard",
}


def _check_tracker(tracker: str) -> None:
    """A --report_to tracker must be one transformers logs to, and installed (transformers' own test of each, as
    `report_to="all"` uses): its callback would fail at the Trainer's start, after the data is prepared."""
    if tracker in ("all", "none"):
        return
    known = integration_utils.INTEGRATION_TO_CALLBACK
    if tracker not in known:
        raise ValueError(
            f"--report_to {tracker}: not a tracker transformers logs to; choose from {', '.join(known)}."
        )
    installed = integration_utils.get_available_reporting_integrations()
    if integration_utils.is_flytekit_available() and integration_utils.is_flyte_deck_standard_available():
        installed.append("flyte")
    if tracker not in installed:
        package = TRACKER_PACKAGES.get(tracker, tracker)
        raise ValueError(
            f"--report_to {tracker} needs {package}, which is not installed: pip install {package}."
        )
