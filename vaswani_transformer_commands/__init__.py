"""The console commands' entry points, and how every command ends when it is stopped from outside.

Ctrl-C (SIGINT) and SIGTERM end a command with one line on standard error ("interrupted", "terminated") and the
shell's status for the signal (130, 143), never a traceback; a reader of standard output that goes away
(`vaswani-translate ... | head -1`) ends it quietly with 141, as it ends `cat`. Both signals become exceptions,
so every `with` block and `finally` on the way out runs: temporary files and folders are removed, and what was
whole before stays whole.

This package sits beside `vaswani_transformer`, not in it, and imports only the standard library: importing
anything of `vaswani_transformer` imports torch and transformers (seconds), and a command's handling of signals
must be in place before that. Each entry point (pyproject.toml's [project.scripts]) puts it in place, then
imports its command's module (`vaswani_transformer.cli.NAME`) inside it and runs its `main`.

Third-party libraries' warnings and progress bars (transformers' "Loading weights" bar, torchao's and torch's
import warnings, torch.onnx's notes) concern no user of a command: `quiet_libraries` holds them back while a
command imports and runs, unless `--verbose` is among its options (`vaswani_transformer.cli.command` takes it out
of the arguments before the command's parser sees them, and holds back transformers' bars).

A command started with SIGINT ignored (`command &` in a script without job control) keeps ignoring it, as Python
and every Unix tool do: Ctrl-C at the terminal is meant for the script in the foreground, not for its background
jobs. SIGTERM ends it all the same.
"""

import importlib
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

Main = Callable[[Sequence[str] | None], int]

INTERRUPTED = 130  # 128 + SIGINT
BROKEN_PIPE = 141  # 128 + SIGPIPE
TERMINATED = 143  # 128 + SIGTERM

VERBOSE_FLAG = "--verbose"
VERBOSE_HELP = (
    "show the libraries' own warnings and progress bars (transformers, torch, torchao), held back otherwise"
)
# The libraries whose log lines a command holds back below errors (torchao's "Failed to load ..._C_mxfp8", torch's
# _pytree deprecations, torch.onnx's "torchvision is not installed. Skipping torchvision::nms", transformers' notes)
QUIET_LOGGERS = (
    "transformers",
    "huggingface_hub",
    "accelerate",
    "torch",
    "torchao",
    "datasets",
    "onnxscript",
)


class Terminated(BaseException):
    """SIGTERM, raised where the program is, like KeyboardInterrupt for SIGINT (a BaseException, so that no
    `except Exception` on the way swallows it)."""


class Interrupted(KeyboardInterrupt):
    """An interrupt that knows what the user can do next ("the run can continue with --resume")."""

    def __init__(self, advice: str) -> None:
        super().__init__(advice)
        self.advice = advice


def _raise_terminated(signal_number: int, frame: FrameType | None) -> None:
    raise Terminated


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated while the command runs (signal handlers can only be set in the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stdout_to_devnull() -> None:
    """Point standard output at /dev/null, so that flushing it at exit does not raise BrokenPipeError again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def ending_on_signals(run: Callable[[], int]) -> int:
    """`run()`'s exit status, or the status of the signal or closed standard output that ended it, said in one
    line as this module says (SIGINT needs no handler of its own: Python raises KeyboardInterrupt for it)."""
    try:
        with _sigterm_raises():
            return run()
    except KeyboardInterrupt as interrupt:
        advice = interrupt.advice if isinstance(interrupt, Interrupted) else ""
        print(f"\ninterrupted{f'; {advice}' if advice else ''}", file=sys.stderr)
        return INTERRUPTED
    except Terminated:
        print("\nterminated", file=sys.stderr)
        return TERMINATED
    except BrokenPipeError:
        _stdout_to_devnull()
        return BROKEN_PIPE


def is_verbose(arguments: Sequence[str]) -> bool:
    """Whether --verbose is among the options (before a `--` that ends them)."""
    options = arguments[: arguments.index("--")] if "--" in arguments else arguments
    return VERBOSE_FLAG in options


@contextmanager
def quiet_libraries(verbose: bool = False) -> Iterator[None]:
    """The libraries' warnings (Python's and their loggers' below ERROR) held back for the block, unless `verbose`;
    this package's own warnings still show. Levels and filters are as they were afterwards."""
    if verbose:
        yield
        return
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=r"(?!vaswani_transformer)")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            # a library that set its own level on import (torch does) keeps it
            if logger.level == logging.ERROR:
                logger.setLevel(level)


def _entry_point(module: str) -> Main:
    """The console command whose `main` is `vaswani_transformer.cli.<module>.main`, imported inside its handling of
    signals."""

    def main(argv: Sequence[str] | None = None) -> int:
        def run() -> int:
            with quiet_libraries(is_verbose(sys.argv[1:] if argv is None else argv)):
                command = importlib.import_module(f"vaswani_transformer.cli.{module}")
            return command.main(argv)

        return ending_on_signals(run)

    main.__name__ = main.__qualname__ = module
    main.__doc__ = f"`vaswani_transformer.cli.{module}.main`, imported once signals end it with one line."
    return main


average = _entry_point("average")
convert = _entry_point("convert")
evaluate = _entry_point("evaluate")
export = _entry_point("export")
export_onnx = _entry_point("export_onnx")
plot_attention = _entry_point("plot_attention")
plot_positional_encoding = _entry_point("plot_positional_encoding")
prepare = _entry_point("prepare")
push = _entry_point("push")
serve = _entry_point("serve")
train = _entry_point("train")
translate = _entry_point("translate")
