"""Import warnings that concern no user of this package, held back while the imports that print them run."""

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
