"""The run folder (--output_dir): one run at a time, one run per folder, apart from the job's inputs.

A training holds its folder with an OS lock for as long as it runs; a folder that holds an earlier run is
continued (--resume, with the settings its train_options.json records) or deleted first (--overwrite, which
deletes only what a run writes); a folder that holds anything else (a saved model, the user's files) is refused,
and so is one that is, holds or lies inside an input (a corpus file, the data cache). `resume_point` finds where
--resume continues, setting aside a checkpoint whose save was killed.
"""

import contextlib
import json
import logging
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import asdict
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..files.paths import check_apart
from ..files.writing import write_text_atomically
from .checkpoints import whole_checkpoints
from .options import RECORD_FINGERPRINT, record_fingerprint

logger = logging.getLogger(__name__)

OPTIONS_FILE = "train_options.json"
PRECISION_FILE = "training_precision.json"  # the precision the run trains in (`precision.run_precision`)
# What a run writes at the top of its --output_dir: the only entries --overwrite may delete (with the temporary
# names `files.writing.write_text_atomically` gives its records, should a run be killed while writing them).
RUN_FILES = (OPTIONS_FILE, PRECISION_FILE, f".{OPTIONS_FILE}.tmp", f".{PRECISION_FILE}.tmp")
# runs/: TensorBoard's logs (--report_to)
RUN_FOLDERS = ("tokenizer", "final", "runs")
# .final.partial-<host>-<pid>, .tokenizer.partial-<host>-<pid>: what `files.writing.folder_written_whole` left of a
# killed run
RUN_FOLDER_PATTERNS = ("checkpoint-*", "incomplete-checkpoint-*", ".final.partial-*", ".tokenizer.partial-*")
# The lock a training holds on its folder: never deleted (a new file would let a second training lock it while
# the first still holds the old one), never counted as the folder's content.
LOCK_FILE = ".vaswani-train.lock"
# At the top of a saved model's folder (a run's final/, its checkpoint-N), never at a run folder's.
MODEL_CONFIG = "config.json"


class RunFolderError(ValueError):
    """--output_dir cannot take this run: another training holds it, it holds another run, or it is a file."""


def is_main_process() -> bool:
    """Whether this is the main process of a distributed run (or the only process)."""
    return int(os.environ.get("RANK", "0")) == 0


@contextlib.contextmanager
def holding_run_folder(folder: Path) -> Iterator[None]:
    """Hold `folder` for this run, so that a second training there stops (RunFolderError) before it checks or
    writes anything. An OS lock (flock through `filelock`) that dies with its process: a killed run leaves
    nothing to clean up. Only the main process locks; a folder this made for a run that failed is removed."""
    if not is_main_process():
        yield
        return
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"--output_dir {folder} is a file: give a folder (new, empty, or a run's).")
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunFolderError(
            f"--output_dir {folder} is in use by another training (it holds {folder / LOCK_FILE}): wait for it "
            "to finish, or choose another --output_dir."
        ) from None
    try:
        yield
    except BaseException:
        if created and [path.name for path in folder.iterdir()] == [LOCK_FILE]:
            (folder / LOCK_FILE).unlink()  # while still held: no other run can be waiting for this new folder
            folder.rmdir()
        raise
    finally:
        lock.release()


def _is_run_folder(folder: Path) -> bool:
    """Whether a folder holds (part of) a run of this job: options, vocabulary or checkpoints."""
    return (
        (folder / OPTIONS_FILE).is_file()
        or (folder / "tokenizer").is_dir()
        or any(folder.glob("checkpoint-*"))
    )


def _written_by_a_run(path: Path) -> bool:
    if path.is_symlink():  # a link may lead out of the folder: never the run's own
        return False
    if path.is_file():
        return path.name in RUN_FILES
    return path.is_dir() and (
        path.name in RUN_FOLDERS or any(fnmatch(path.name, pattern) for pattern in RUN_FOLDER_PATTERNS)
    )


def _not_written_by_a_run(folder: Path) -> list[str]:
    """The names in a run folder that no run writes (the user's own files, for one)."""
    return sorted(path.name for path in _content(folder) if not _written_by_a_run(path))


def _content(folder: Path) -> list[Path]:
    """What a folder holds, but for a training's lock."""
    return [path for path in folder.iterdir() if path.name != LOCK_FILE]


def delete_earlier_run(folder: Path) -> None:
    """--overwrite: delete what a run wrote in `folder`, and nothing else (`check_output_dir` refused the rest)."""
    logger.info(f"--overwrite: deleting the earlier run in {folder}")
    for path in sorted(_content(folder)):
        if not _written_by_a_run(path):
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def check_output_dir(
    folder: Path, *, resume: bool, overwrite: bool, inputs: Mapping[str, Path | None] | None = None
) -> None:
    """A run folder belongs to one run: an earlier run's checkpoints must never be averaged into this one, no
    saved model or other folder is trained into, and the run's files never land on `inputs` (named as
    `files.paths.check_apart` names them)."""
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"--output_dir {folder} is a file: give a folder (new, empty, or a run's).")
    if (folder / MODEL_CONFIG).is_file():  # a run folder holds its models one level down, never at its top
        raise RunFolderError(
            f"--output_dir {folder} holds a saved model ({MODEL_CONFIG}), not a run: give a new folder for a "
            "new run; to continue the run that made the model, --resume its run folder (the one with "
            f"{OPTIONS_FILE} and checkpoint-N)."
        )
    if folder.is_dir() and _content(folder):
        _check_what_it_holds(folder, resume=resume, overwrite=overwrite)
    try:  # last: what a folder holds says best what is wrong with it (the user's files, another run)
        check_apart("--output_dir", folder, inputs or {})
    except ValueError as error:
        raise RunFolderError(str(error)) from None


def _check_what_it_holds(folder: Path, *, resume: bool, overwrite: bool) -> None:
    """A folder that holds something takes this run only when it holds a run: one to continue (--resume), or one
    to delete (--overwrite) that holds nothing else."""
    if resume:
        if not _is_run_folder(folder):
            raise RunFolderError(
                f"--resume: --output_dir {folder} holds no run ({OPTIONS_FILE}, tokenizer/, checkpoint-N): give "
                "the folder of the run to continue, or a new one."
            )
        return
    if not _is_run_folder(folder):
        raise RunFolderError(
            f"--output_dir {folder} is not empty and holds no run: choose a new or empty folder."
        )
    if not overwrite:
        raise RunFolderError(
            f"--output_dir {folder} already holds a run. Continue it with --resume, delete it first with "
            "--overwrite, or choose a new --output_dir."
        )
    if others := _not_written_by_a_run(folder):
        raise RunFolderError(
            f"--output_dir {folder} holds a run and files no run writes ({', '.join(others)}): --overwrite "
            "deletes only a run's own files. Move those elsewhere, or choose a new --output_dir."
        )


def resume_point(folder: Path, resume: bool, is_main: bool) -> str | None:
    """With --resume, the last checkpoint whose save finished; ones a killed save left are reported and set
    aside as `incomplete-checkpoint-<step>` (so neither resuming nor averaging nor rotation sees them)."""
    if not resume or not folder.is_dir():
        return None
    whole, incomplete = whole_checkpoints(folder, for_resume=True)
    for checkpoint, problem in incomplete.items():
        logger.warning(f"warning: skipping an incomplete checkpoint: {problem}")
        if is_main:
            aside = checkpoint.with_name(f"incomplete-{checkpoint.name}")
            shutil.rmtree(aside, ignore_errors=True)
            checkpoint.rename(aside)
    if not whole:
        logger.info("--resume: no complete checkpoint yet, training from the start")
        return None
    logger.info(f"--resume: continuing from {whole[-1].name}")
    return str(whole[-1])


def read_run_record(folder: Path) -> dict[str, Any] | None:
    """The settings a run folder's train_options.json records; None when it has none. RunFolderError for a
    record that cannot be read (a hand edit, a disk fault), naming it."""
    record = folder / OPTIONS_FILE
    if not record.is_file():
        return None
    try:
        settings = json.loads(record.read_text(encoding="utf-8"))
    except ValueError as error:  # not JSON, or not UTF-8
        problem = f"is damaged, not valid JSON ({error})"
    else:
        if not isinstance(settings, dict):
            problem = "is not a run's record (a JSON object of settings)"
        elif settings.get(RECORD_FINGERPRINT) != record_fingerprint(settings):
            raise RunFolderError(
                f"{record} was edited after the run wrote it (its {RECORD_FINGERPRINT} does not match its "
                "settings): --resume continues a run with the settings it was made with. Restore the file; change "
                "what may change on --resume by its flag (docs/training.md); or start a new run with --overwrite "
                "or in another --output_dir."
            )
        else:
            return settings
    raise RunFolderError(
        f"{record} {problem}: --resume cannot check the run's settings against it. Start a new run with "
        "--overwrite or in another --output_dir."
    )


def write_options(options: Any, folder: Path, inputs: Mapping[str, Any] | None = None) -> None:
    """The run's settings (a `TrainOptions`) as train_options.json in `folder`, with what the run was made from
    (`run_record.record_run`: the corpora's fingerprint, the vocabulary) where given."""
    folder.mkdir(parents=True, exist_ok=True)
    record = json.loads(json.dumps(asdict(options) | dict(inputs or {}), default=str))
    record[RECORD_FINGERPRINT] = record_fingerprint(record)
    write_text_atomically(folder / OPTIONS_FILE, json.dumps(record, indent=2) + "\n")
