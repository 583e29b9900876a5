"""The checks a job passes before any long work: its corpora and data cache, its model config, sharing that can
work, and a run folder that can take it. Every failure is an error naming the flag and the fix."""

from huggingface_hub import get_token
from huggingface_hub.utils import validate_repo_id
from transformers.integrations import is_tensorboard_available

from ..files import check_writable
from .job_data import check_data_inputs
from .options import TrainOptions
from .run_folder import check_output_dir, is_main_process


def check_inputs(options: TrainOptions) -> None:
    """Fail before any long work: missing local files, a model config that cannot be built, sharing that cannot
    work, a run folder that cannot take this run, a data cache or run folder that cannot be written (WriteError)."""
    check_data_inputs(options)
    options.model_config()
    _check_sharing(options)
    if is_main_process():  # other processes find the main process's files there
        check_output_dir(options.output_dir, resume=options.resume, overwrite=options.overwrite)
        check_writable(options.output_dir, "--output_dir")


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
    if "tensorboard" in options.report_to and not is_tensorboard_available():
        raise ValueError("--report_to tensorboard needs TensorBoard: pip install tensorboard.")
