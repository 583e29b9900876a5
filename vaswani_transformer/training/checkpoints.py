"""Checkpoint averaging as in the paper (mean of the last 5 checkpoints for base models, 20 for big), and
telling whole checkpoints from ones a killed save left behind."""

import json
import os
import pickle
import re
import shutil
import zipfile
from collections.abc import Iterable, Sequence
from fnmatch import fnmatch
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..claims import claimed_output
from ..files.writing import folder_written_whole

WEIGHTS_NAME = "model.safetensors"


def new_file_mode(folder: Path) -> int:
    """The permissions a new file gets in `folder` (0666 less the umask), read from a file made for the purpose."""
    probe = folder / ".new-file-mode"
    probe.unlink(missing_ok=True)
    os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        return probe.stat().st_mode & 0o777
    finally:
        probe.unlink()


def with_usual_permissions(weights: Path) -> None:
    """Give weights safetensors wrote (always 0600) the permissions of any new file, so that a run folder shared
    with others, and the Hub folder made from it, can be read as the user's other files can."""
    os.chmod(weights, new_file_mode(weights.parent))


TRAINER_STATE_NAME = (
    "trainer_state.json"  # the Trainer writes it last, after weights, optimizer and RNG state
)
_CHECKPOINT_DIR = re.compile(r"checkpoint-(\d+)")
# Weights (averaged separately) and Trainer resume state: everything else in a checkpoint is copied.
_NOT_COPIED = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt", "*.pth", "trainer_state.json")
# The Trainer's resume state beside the weights: torch.save files (zip archives), which it loads with
# torch.load(weights_only=True), never unpickling code; the optimiser's is optimizer.pt (optimizer.bin, or a folder,
# under FSDP).
SCHEDULER_FILE = "scheduler.pt"
TRAINING_ARGS_FILE = "training_args.bin"
_TORCH_FILES = ("*.pt", "*.pth", "*.bin")
# What an evaluation wrote about a folder's weights (vaswani-evaluate, the job's scoring): stale once they change.
SCORE_FILES = ("scores.json", "*_scores.json", "hypotheses.txt", "*_hypotheses.txt")


def find_checkpoints(run_dir: Path) -> list[Path]:
    """Trainer `checkpoint-<step>` folders of a run, sorted by step."""
    steps = {}
    for path in Path(run_dir).iterdir():
        match = _CHECKPOINT_DIR.fullmatch(path.name)
        if match and path.is_dir():
            steps[path] = int(match.group(1))
    return sorted(steps, key=steps.__getitem__)


def safetensors_problem(path: Path) -> str | None:
    """What is wrong with a safetensors file (missing, cut short), naming it; None when it is whole.

    Only the header is read: the file must be exactly as long as the header says.
    """
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    with path.open("rb") as file:
        header_size = int.from_bytes(file.read(8), "little")
        if size < 8 or 8 + header_size > size:
            return f"{path} is cut short ({size:,} bytes, not even its header)"
        try:
            header = json.loads(file.read(header_size))
        except (json.JSONDecodeError, UnicodeDecodeError):
            return f"{path} has an unreadable header"
    end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
    if 8 + header_size + end != size:
        return f"{path} is cut short ({size:,} of {8 + header_size + end:,} bytes)"
    return None


def checkpoint_problem(checkpoint_dir: Path) -> str | None:
    """Why a checkpoint cannot be averaged (nor resumed from), naming the file; None when it is whole: its save
    finished (trainer_state.json), and its model files can be read (weights; JSON: config, tokenizer)."""
    folder = Path(checkpoint_dir)
    if not (folder / TRAINER_STATE_NAME).is_file():
        return f"{folder / TRAINER_STATE_NAME} is missing: the save was interrupted"
    for problem in (
        *map(_json_problem, sorted(folder.glob("*.json"))),
        safetensors_problem(folder / WEIGHTS_NAME),
    ):
        if problem is not None:
            return problem
    return None


def resume_problem(checkpoint_dir: Path) -> str | None:
    """Why --resume cannot continue from a checkpoint, naming the file; None when it can: whole
    (`checkpoint_problem`), with the optimiser's and the schedule's state (without which the Trainer would go on
    silently with a fresh Adam, its moments at zero), and each torch file of the Trainer's state whole."""
    folder = Path(checkpoint_dir)
    if problem := checkpoint_problem(folder):
        return problem
    if not any(folder.glob("*optimizer*")) or not (folder / SCHEDULER_FILE).is_file():
        return f"{folder} has no optimizer.pt or {SCHEDULER_FILE}: the optimiser's state is missing"
    return next(filter(None, map(_torch_file_problem, _torch_files(folder))), None)


def _torch_files(checkpoint_dir: Path) -> list[Path]:
    return sorted(path for pattern in _TORCH_FILES for path in Path(checkpoint_dir).glob(pattern))


def _json_problem(path: Path) -> str | None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"{path} is cut short or damaged (not JSON)"
    return None


def _torch_file_problem(path: Path) -> str | None:
    """A torch.save file is a zip archive whose directory is at its end: a file cut short has none. Its pickle is
    then read as the Trainer reads it (weights_only, numpy's arrays allowed), its tensors mapped, not read (an
    optimiser's state is twice the weights): a file holding any other object, which could run code, is refused
    here, before training starts, rather than by the Trainer halfway through resuming."""
    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, OSError):
        return f"{path} is cut short or damaged (not a whole torch file)"
    if path.name == TRAINING_ARGS_FILE:  # the Trainer writes this pickle of its arguments, never loads it
        return None
    from transformers.trainer_pt_utils import safe_globals  # the Trainer's own allowlist, imported with it

    try:
        with safe_globals():
            torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError:
        return (
            f"{path} holds objects other than tensors and numbers (code could run on loading it): not loaded"
        )
    except (RuntimeError, OSError, EOFError, ValueError) as error:
        return f"{path} is damaged ({type(error).__name__})"
    return None


def whole_checkpoints(run_dir: Path, for_resume: bool = False) -> tuple[list[Path], dict[Path, str]]:
    """The run's checkpoints that a save finished whole, by step (`for_resume`: also with the optimiser's state
    to continue from), and each other one with why it is left out."""
    whole, incomplete = [], {}
    for checkpoint in find_checkpoints(run_dir):
        problem = resume_problem(checkpoint) if for_resume else checkpoint_problem(checkpoint)
        if problem is None:
            whole.append(checkpoint)
        else:
            incomplete[checkpoint] = problem
    return whole, incomplete


def _check_floating(key: str, tensor: torch.Tensor, label: str) -> None:
    """Raise unless the tensor can be averaged."""
    if not tensor.is_floating_point():
        raise ValueError(f"cannot average {key!r} in {label}: {tensor.dtype} is not a floating-point dtype")


def _check_same_keys(expected: Iterable[str], state_dict: dict[str, torch.Tensor], label: str) -> None:
    """Raise if the state dict's keys differ from the first checkpoint's."""
    expected, found = set(expected), set(state_dict)
    if missing := sorted(expected - found):
        raise ValueError(f"{label} lacks {len(missing)} key(s) of the first, e.g. {missing[0]!r}")
    if extra := sorted(found - expected):
        raise ValueError(f"{label} has {len(extra)} key(s) absent from the first, e.g. {extra[0]!r}")


def _add_to_sums(sums: dict[str, torch.Tensor], state_dict: dict[str, torch.Tensor], label: str) -> None:
    """Add each (floating-point, same-shape) tensor of the state dict to its float64 running sum."""
    _check_same_keys(sums, state_dict, label)
    for key, tensor in state_dict.items():
        _check_floating(key, tensor, label)
        if tensor.shape != sums[key].shape:
            raise ValueError(f"{key!r} has shape {tuple(tensor.shape)} in {label}, unlike the first")
        sums[key] += tensor.to(torch.float64)


def _mean_state_dict(labelled: Iterable[tuple[str, dict[str, torch.Tensor]]]) -> dict[str, torch.Tensor]:
    """Element-wise mean of state dicts consumed one at a time, summed in float64, in the first's dtypes."""
    sums: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    count = 0
    for label, state_dict in labelled:
        if count == 0:
            dtypes = {key: tensor.dtype for key, tensor in state_dict.items()}
            sums = {key: torch.zeros(tensor.shape, dtype=torch.float64) for key, tensor in state_dict.items()}
        _add_to_sums(sums, state_dict, label)
        count += 1
    if count == 0:
        raise ValueError("no checkpoints to average")
    return {key: (total / count).to(dtypes[key]) for key, total in sums.items()}


def average_state_dicts(
    state_dicts: Sequence[dict[str, torch.Tensor]], labels: Sequence[str] | None = None
) -> dict[str, torch.Tensor]:
    """Element-wise mean of floating-point state dicts with identical keys; `labels` name them in errors."""
    labels = labels if labels is not None else [f"state dict #{i}" for i in range(len(state_dicts))]
    return _mean_state_dict(zip(labels, state_dicts, strict=True))


def _load_weights(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """The safetensors weights of one checkpoint (never unpickled)."""
    weights = Path(checkpoint_dir) / WEIGHTS_NAME
    if not weights.is_file():
        raise FileNotFoundError(
            f"{checkpoint_dir} has no {WEIGHTS_NAME}: checkpoints must be saved unsharded with safetensors "
            "(save_pretrained / Trainer default); pickled .bin weights are not loaded"
        )
    return load_file(weights)


def _copy_model_files(source_dir: Path, output_dir: Path) -> None:
    """Copy config, generation config, tokenizer and code files, leaving weights and Trainer state behind."""
    for path in Path(source_dir).iterdir():
        if path.is_file() and not any(fnmatch(path.name, pattern) for pattern in _NOT_COPIED):
            shutil.copy2(path, output_dir / path.name)


def save_weights(tensors: dict[str, torch.Tensor], path: Path) -> None:
    """Write safetensors weights with the permissions of any new file (a full disk or read-only folder: its
    callers write inside `files.folder_written_whole`, which names the folder)."""
    save_file(tensors, path, metadata={"format": "pt"})
    with_usual_permissions(path)


def write_average(checkpoint_dirs: Sequence[Path], folder: Path) -> None:
    """Write the mean of the checkpoints' weights into `folder` (a new one, e.g. a temporary that becomes the
    final model), with the last checkpoint's other model files."""
    averaged = _mean_state_dict((str(path), _load_weights(path)) for path in checkpoint_dirs)
    save_weights(averaged, folder / WEIGHTS_NAME)
    _copy_model_files(checkpoint_dirs[-1], folder)


def average_checkpoints(checkpoint_dirs: Sequence[Path], output_dir: Path, choose: str = "--output") -> Path:
    """Average the checkpoints' weights into output_dir, with the last checkpoint's other model files: all
    written into a temporary sibling first (`files.folder_written_whole`), so that a failure (a full disk, a
    read-only folder, an interrupt) leaves output_dir as it was, and under output_dir's claim
    (`claims.claimed_output`: a second writer stops, naming this one); `choose` is the flag that picks another
    output_dir, named in a write failure."""
    checkpoint_dirs = [Path(path) for path in checkpoint_dirs]
    output_dir = Path(output_dir)
    if not checkpoint_dirs:
        raise ValueError("no checkpoints to average")
    if any(output_dir.resolve() == path.resolve() for path in checkpoint_dirs):
        raise ValueError(f"output_dir {output_dir} must not be one of the averaged checkpoints")
    with claimed_output(output_dir, choose), folder_written_whole(output_dir, choose) as temporary:
        write_average(checkpoint_dirs, temporary)
        if (
            output_dir.is_dir()
        ):  # its scores describe the weights about to be replaced; last, once all is written
            drop_scores(output_dir)
    return output_dir


def drop_scores(folder: Path) -> None:
    """Delete an earlier evaluation's scores and hypotheses from a folder whose weights are being replaced, so
    no scores.json (the model card's BLEU) ever sits beside weights it was not measured on."""
    for path in folder.iterdir():
        if path.is_file() and any(fnmatch(path.name, pattern) for pattern in SCORE_FILES):
            path.unlink()


def average_last(run_dir: Path, n: int, output_dir: Path) -> Path:
    """Average the last n whole checkpoints of a Trainer run; raises if the run has fewer than n."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    checkpoints, incomplete = whole_checkpoints(run_dir)
    if len(checkpoints) < n:
        left_out = f" (left out: {'; '.join(incomplete.values())})" if incomplete else ""
        raise ValueError(
            f"asked to average the last {n} checkpoints but {run_dir} has {len(checkpoints)}{left_out}"
        )
    return average_checkpoints(checkpoints[-n:], output_dir)
