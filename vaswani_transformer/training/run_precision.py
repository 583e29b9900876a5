"""The precision a run trains in, decided once, in one place, at the run's start, and kept in its folder.

--mixed_precision names it ("no", "fp16", "bf16"), or "auto" leaves it to the launcher (`accelerate launch
--mixed_precision`, which the Trainer reads from ACCELERATE_MIXED_PRECISION), else to this machine: bfloat16
autocast where the training device computes it faster than float32, by the rule of `vaswani_transformer.precision`.
The main process decides and writes training_precision.json; the other processes of a distributed run, and
`--resume` under "auto", read it, so that no process trains in another precision than the run began in, also where
a run moves to another machine.
"""

import contextlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from transformers import Seq2SeqTrainingArguments

from ..files.writing import write_text_atomically
from ..precision import bf16_is_faster, bf16_reason
from .options import MIXED_PRECISIONS
from .run_folder import PRECISION_FILE, RunFolderError

logger = logging.getLogger(__name__)

LAUNCHER_PRECISION = "ACCELERATE_MIXED_PRECISION"  # set by `accelerate launch`, read by the Trainer


def training_device() -> str:
    """Where the Trainer puts the model: a CUDA GPU, an Apple GPU, else the CPU."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def bf16_available() -> bool:
    """Whether this machine trains faster in bfloat16: its training device computes it faster than float32 (a CUDA
    GPU that supports it, or a CPU the rule of `vaswani_transformer.precision` gives bfloat16)."""
    return bf16_is_faster(training_device())


def auto_precision_reason() -> str:
    """Why "auto" picks what it picks on this machine, in words for logs and the model card."""
    return bf16_reason(training_device())


@dataclass(frozen=True)
class RunPrecision:
    """The precision a run trains in ("no", "fp16", "bf16", or "auto": the launcher's) and who chose it, why."""

    mixed_precision: str
    chosen_by: str

    def applied_to(self, args: Seq2SeqTrainingArguments) -> Seq2SeqTrainingArguments:
        """`args` training in this precision. A named one replaces the launcher's in the Trainer's Accelerator (its
        `mixed_precision`), so that "no" under a bf16 launcher configuration trains in fp32; "auto" keeps the
        launcher's, which TrainingArguments reads itself."""
        named = self.mixed_precision
        args = replace(args, bf16=named == "bf16", fp16=named == "fp16")
        if named != "auto":
            args.mixed_precision = named
        return args


def precision_name(args: Seq2SeqTrainingArguments) -> str:
    """How the arguments train, named alike whoever chose it: "bf16 autocast", "fp16 autocast" or "fp32"."""
    return "fp32" if args.mixed_precision == "no" else f"{args.mixed_precision} autocast"


def decide_precision(mixed_precision: str) -> RunPrecision:
    """The flag's precision, else the launcher's, else this machine's (`bf16_available`)."""
    if mixed_precision != "auto":
        return RunPrecision(mixed_precision, f"--mixed_precision {mixed_precision}")
    if LAUNCHER_PRECISION in os.environ:
        return RunPrecision("auto", "auto: the launcher's (accelerate launch --mixed_precision)")
    return RunPrecision("bf16" if bf16_available() else "no", f"auto: {auto_precision_reason()}")


def run_precision(
    folder: Path,
    mixed_precision: str,
    resume: bool,
    is_main_process: bool,
    in_turn: Callable[[str], contextlib.AbstractContextManager],
) -> RunPrecision:
    """The precision this run trains in, decided once by the main process and kept in the run folder
    (PRECISION_FILE), where every process of a distributed run reads it and `--resume` under "auto" finds it
    (a run resumed on another kind of machine keeps the precision it began in). A precision named by flag or
    launcher is kept too.
    """
    record = folder / PRECISION_FILE
    with in_turn("deciding the training precision"):
        if is_main_process:
            kept = _kept_precision(record) if resume and mixed_precision == "auto" else None
            decided = kept or decide_precision(mixed_precision)
            write_text_atomically(record, json.dumps(asdict(decided), indent=2) + "\n")
            if kept is not None:
                logger.info(
                    f"--resume: training in the run's precision, {kept.mixed_precision} ({kept.chosen_by})"
                )
            return decided
    return read_precision(record)  # the other processes, once the main one has written it


def read_precision(record: Path) -> RunPrecision:
    """The record's precision; RunFolderError if it names none (it is written whole: a hand edit)."""
    try:
        kept = RunPrecision(**json.loads(record.read_text(encoding="utf-8")))
    except (ValueError, TypeError) as error:  # not JSON (ValueError), not the two fields (TypeError)
        problem = f"cannot be read ({error})"
    else:
        if kept.mixed_precision in MIXED_PRECISIONS:
            return kept
        problem = f"names an unknown precision, {kept.mixed_precision!r}"
    raise RunFolderError(
        f"{record} {problem}. Name the precision with --mixed_precision {{bf16,fp16,no}}, or delete the file to "
        "let --resume decide again."
    )


def _kept_precision(record: Path) -> RunPrecision | None:
    """The precision a run folder's record names, if it names one (not the launcher's, which is asked again)."""
    if not record.is_file():  # a run killed before it was written
        return None
    kept = read_precision(record)
    return kept if kept.mixed_precision != "auto" else None
