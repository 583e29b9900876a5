"""What concerns no user of this package, held back: import warnings while the imports that print them run,
transformers' progress bars while this package writes folders or trains, and every library's warnings while a
command runs (unless --verbose)."""

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

# The libraries whose log lines a command holds back below errors (torchao's "Failed to load ..._C_mxfp8", torch's
# _pytree deprecations, torch.onnx's "torchvision is not installed. Skipping torchvision::nms", transformers' notes)
QUIET_LOGGERS = (
    "transformers",
    "huggingface_hub",
    "accelerate",
    "torch",
    "torch.utils._pytree",  # torch's import sets its own loggers' levels again, but not this one's
    "torchao",
    "datasets",
    "onnxscript",
)


@contextlib.contextmanager
def loggers_below_error_held(names: tuple[str, ...]) -> Iterator[None]:
    """The named loggers' lines below ERROR held back for the block; each logger's level as it was afterwards,
    unless the library set one of its own meanwhile (torch does, on import)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            if logger.level == logging.ERROR:
                logger.setLevel(level)


def quiet_import_warnings() -> contextlib.AbstractContextManager[None]:
    """torchao's import warns about CUDA kernel libraries a CPU build cannot load (and torch about its enum
    registrations); neither concerns CPU int8, so they are held back while it imports: here, and where this
    package imports transformers, which imports torchao whenever it is installed."""
    return loggers_below_error_held(("torchao", "torch.utils._pytree"))


@contextlib.contextmanager
def no_transformers_progress_bars() -> Iterator[None]:
    """transformers' progress bars off for the block (as they were afterwards): save_pretrained draws a "Writing
    model shards" bar for a one-shard folder, for every checkpoint and converted folder; library code does not
    print, and the training job's progress is its own line per log."""
    from transformers.utils import (
        logging as transformers_logging,  # on use: transformers is imported after this
    )

    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False) -> Iterator[None]:
    """The libraries' warnings (Python's and their loggers' below ERROR, `QUIET_LOGGERS`) held back for the block,
    unless `verbose`; this package's own warnings still show. Levels and filters are as they were afterwards."""
    if verbose:
        yield
        return
    with loggers_below_error_held(QUIET_LOGGERS), torch_logs_below_error(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(?!vaswani_transformer)")
        yield


@contextlib.contextmanager
def torch_logs_below_error() -> Iterator[None]:
    """torch sets its loggers' levels again when it is imported (a command imports it after its options are
    parsed, inside `quiet_libraries`), from its documented TORCH_LOGS variable: "-all" has it hold back its own
    lines below ERROR. A TORCH_LOGS the user set is left as it is."""
    if "TORCH_LOGS" in os.environ:
        yield
        return
    os.environ["TORCH_LOGS"] = "-all"
    try:
        yield
    finally:
        os.environ.pop("TORCH_LOGS", None)
