"""The one wrapper around every command: the console scripts (`vaswani-translate`), `python -m vaswani_transformer
translate` and a `main` called from Python all end alike when they are stopped from outside or run out of memory.

Ctrl-C (SIGINT) and SIGTERM end a command with one line on standard error ("interrupted", "terminated") and the
shell's status for the signal (130, 143), never a traceback; a reader of standard output that goes away
(`vaswani-translate ... | head -1`) ends it quietly with 141, as it ends `cat`. Both signals become exceptions,
so every `with` block and `finally` on the way out runs: temporary files and folders are removed, and what was
whole before stays whole. A failed allocation ends it with one line and status 2, naming what to lower.

This module imports only the standard library, and each command module imports torch and transformers inside its
`main`, after its options are parsed: so the handling of signals is in place before the heavy imports (seconds),
and `--help` never waits for them.

Third-party libraries' warnings and progress bars (transformers' "Loading weights" bar, torchao's and torch's
import warnings, torch.onnx's notes) concern no user of a command: they are held back while a command runs
(`quiet.quiet_libraries`), unless `--verbose` is among its options, which is taken out of the arguments before the
command's parser sees them.

A command started with SIGINT ignored (`command &` in a script without job control) keeps ignoring it, as Python
and every Unix tool do: Ctrl-C at the terminal is meant for the script in the foreground, not for its background
jobs. SIGTERM ends it all the same.
"""

import argparse
import functools
import importlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

from ..quiet import no_transformers_progress_bars, quiet_libraries

Main = Callable[[Sequence[str] | None], int]

INTERRUPTED = 130  # 128 + SIGINT
BROKEN_PIPE = 141  # 128 + SIGPIPE
TERMINATED = 143  # 128 + SIGTERM

VERBOSE_FLAG = "--verbose"
VERBOSE_HELP = (
    "show the libraries' own warnings and progress bars (transformers, torch, torchao), held back otherwise"
)
# Each console command (`vaswani-NAME`, `python -m vaswani_transformer NAME`) and its module in this folder
COMMANDS = {
    "train": "train",
    "prepare": "prepare",
    "translate": "translate",
    "evaluate": "evaluate",
    "average": "average",
    "push": "push",
    "plot-attention": "plot_attention",
    "plot-positional-encoding": "plot_positional_encoding",
    "export-ctranslate2": "export",
    "export-onnx": "export_onnx",
    "convert": "convert",
    "serve": "serve",
}


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


OUT_OF_MEMORY = 2
# What makes a command's memory smaller, by its module; the others' memory is the model's and the data's.
SMALLER = {
    "translate": "lower --batch_size or --num_beams",
    "evaluate": "lower --batch_size or --num_beams",
    "train": "lower --max_tokens",
}


def is_out_of_memory(error: BaseException) -> bool:
    """Python's MemoryError, or torch's CPU allocator's refusal (a RuntimeError "can't allocate memory")."""
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error)
    )


def out_of_memory_message(command_module: str) -> str:
    """One line: the memory the process may take (and the limit that says so) and what to change."""
    from ..decoding.memory import host_room

    room = host_room()
    free = "" if room is None else f" ({room.bytes / 2**30:,.1f} GiB free{room.limit})"
    fixes = [SMALLER.get(command_module.rpartition(".")[2], "free memory")]
    if room is not None and room.limit:
        fixes.append("raise the limit")
    return f"error: out of memory{free}: {', or '.join(fixes)}."


def command(main: Main) -> Main:
    """`main` ended as this module says (`run_command` for a command of this folder by name)."""

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int:
        return _ended(lambda: main, main.__module__, argv)

    return run


def run_command(name: str, argv: Sequence[str] | None = None) -> int:
    """The command `name` (a key of COMMANDS) on `argv` (None: the process's arguments), ended as this module
    says, from its first instruction: the command's module is imported inside it."""
    module = f"{__package__}.{COMMANDS[name]}"
    return _ended(lambda: importlib.import_module(module).main, module, argv)


def _ended(load: Callable[[], Main], module: str, argv: Sequence[str] | None) -> int:
    """`load()`'s `main` on the arguments, less --verbose: the libraries held back unless it was given, the end on
    a signal, a closed standard output or a failed allocation said in one line."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    verbose = is_verbose(arguments)
    if verbose:
        arguments.remove(VERBOSE_FLAG)

    def within_memory() -> int:
        try:
            if verbose:
                return load()(arguments)
            with quiet_libraries(), no_transformers_progress_bars():
                return load()(arguments)
        except (MemoryError, RuntimeError) as error:
            if not is_out_of_memory(error):
                raise
        # said outside the except block: the failed work's frames, and their memory, are gone by now
        print(out_of_memory_message(module), file=sys.stderr)
        return OUT_OF_MEMORY

    return ending_on_signals(within_memory)


def console_script(name: str) -> Main:
    """The console script `vaswani-NAME` (pyproject.toml's [project.scripts]); `argv` None: the process's."""

    def script(argv: Sequence[str] | None = None) -> int:
        return run_command(name, argv)

    script.__name__ = script.__qualname__ = COMMANDS[name]
    script.__doc__ = (
        f"`vaswani-{name}`: `vaswani_transformer.cli.{COMMANDS[name]}.main`, ended as `run_command` says."
    )
    return script


class _StandardError(logging.StreamHandler):
    """A handler writing to standard error as it is when a line is logged (a test may have replaced it since)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def log_to_stderr(level: int | str = logging.INFO, line: str = "%(message)s") -> None:
    """This package's log lines from `level` up (a run's progress, where it wrote) on standard error, formatted as
    `line`. Set on the package's logger, not the root: the root stays at Python's WARNING, so the libraries' own
    INFO lines stay hidden, also those they log at exit (torch's fake-tensor cache statistics), after
    `quiet_libraries` has given their loggers their levels back."""
    package = logging.getLogger(__package__.partition(".")[0])
    package.setLevel(level.upper() if isinstance(level, str) else level)
    handler = next((handler for handler in package.handlers if isinstance(handler, _StandardError)), None)
    if handler is None:
        handler = _StandardError()
        package.addHandler(handler)
    handler.setFormatter(logging.Formatter(line))


def add_verbose_option(parser: argparse.ArgumentParser) -> None:
    """--verbose among the parser's options, so that every command's --help lists it. `command` takes it out of the
    arguments before the parser sees them, so it never reaches the parsed namespace (its default is no value)."""
    parser.add_argument(VERBOSE_FLAG, action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)


def parse_intermixed_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_intermixed_args(argv)` (positionals among the options), where `--` ends the options as it
    does in every command: what follows it is positional even if it starts with "-" (`vaswani-translate -- -m`).
    Python 3.11's own drops the `--` between its two passes when no positional comes before it, so the strings
    after it go to argparse as stand-ins that cannot look like options, and come back whole after the parse."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if "--" not in arguments:
        return parser.parse_intermixed_args(arguments)
    cut = arguments.index("--")
    stand_ins = {f"\0{index}": text for index, text in enumerate(arguments[cut + 1 :])}
    namespace = parser.parse_intermixed_args(arguments[:cut] + list(stand_ins))
    for action in parser._actions:
        if action.option_strings or action.dest == argparse.SUPPRESS:
            continue

        def restored(value: object, action: argparse.Action = action) -> object:
            text = stand_ins.get(str(value))
            if text is None:
                return value
            return action.type(text) if callable(action.type) else text

        value = getattr(namespace, action.dest, None)
        setattr(
            namespace, action.dest, [*map(restored, value)] if isinstance(value, list) else restored(value)
        )
    return namespace


average = console_script("average")
convert = console_script("convert")
evaluate = console_script("evaluate")
export = console_script("export-ctranslate2")
export_onnx = console_script("export-onnx")
plot_attention = console_script("plot-attention")
plot_positional_encoding = console_script("plot-positional-encoding")
prepare = console_script("prepare")
push = console_script("push")
serve = console_script("serve")
train = console_script("train")
translate = console_script("translate")
