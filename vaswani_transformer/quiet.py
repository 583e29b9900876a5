"""What concerns no user of this package, held back: import warnings while the imports that print them run, and
transformers' progress bars while this package writes folders or trains."""

import contextlib
import logging
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_import_warnings() -> Iterator[None]:
    """torchao's import warns about CUDA kernel libraries a CPU build cannot load (and torch about its enum
    registrations); neither concerns CPU int8, so they are held back while it imports: here, and where this
    package imports transformers, which imports torchao whenever it is installed."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


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
