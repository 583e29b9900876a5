"""How every console command ends when it is stopped from outside (Ctrl-C, SIGTERM, a reader that goes away):
as `vaswani_transformer_commands` says, which holds the rules so that the console scripts can put them in place
before they import this package (torch and transformers: seconds). `command` applies them to a `main` called
from Python or a `scripts/*.py` alias, and ends a command that runs out of memory with one line and status 2.
"""

import argparse
import functools
import sys
from collections.abc import Sequence

from vaswani_transformer_commands import (
    BROKEN_PIPE,
    INTERRUPTED,
    TERMINATED,
    VERBOSE_FLAG,
    VERBOSE_HELP,
    Interrupted,
    Main,
    Terminated,
    ending_on_signals,
    is_verbose,
    quiet_libraries,
)

from ..decoding.memory import host_room
from ..quiet_imports import no_transformers_progress_bars

__all__ = [
    "BROKEN_PIPE",
    "INTERRUPTED",
    "TERMINATED",
    "Interrupted",
    "Main",
    "Terminated",
    "add_verbose_option",
    "command",
    "parse_intermixed_args",
]

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
    room = host_room()
    free = "" if room is None else f" ({room.bytes / 2**30:,.1f} GiB free{room.limit})"
    fixes = [SMALLER.get(command_module.rpartition(".")[2], "free memory")]
    if room is not None and room.limit:
        fixes.append("raise the limit")
    return f"error: out of memory{free}: {', or '.join(fixes)}."


def command(main: Main) -> Main:
    """A console command's `main`, ending on signals, a closed standard output and a failed allocation as this
    module says; the libraries' warnings and progress bars held back unless --verbose is given, which is taken out
    of the arguments here (`vaswani_transformer_commands.quiet_libraries`)."""

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int:
        arguments = list(sys.argv[1:] if argv is None else argv)
        verbose = is_verbose(arguments)
        if verbose:
            arguments.remove(VERBOSE_FLAG)

        def within_memory() -> int:
            try:
                if verbose:
                    return main(arguments)
                with quiet_libraries(), no_transformers_progress_bars():
                    return main(arguments)
            except (MemoryError, RuntimeError) as error:
                if not is_out_of_memory(error):
                    raise
            # said outside the except block: the failed work's frames, and their memory, are gone by now
            print(out_of_memory_message(main.__module__), file=sys.stderr)
            return OUT_OF_MEMORY

        return ending_on_signals(within_memory)

    return run


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
