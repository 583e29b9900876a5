"""How every console command ends when it is stopped from outside (Ctrl-C, SIGTERM, a reader that goes away):
as `vaswani_transformer_commands` says, which holds the rules so that the console scripts can put them in place
before they import this package (torch and transformers: seconds). `command` applies them to a `main` called
from Python or a `scripts/*.py` alias."""

import functools
from collections.abc import Sequence

from vaswani_transformer_commands import (
    BROKEN_PIPE,
    INTERRUPTED,
    TERMINATED,
    Interrupted,
    Main,
    Terminated,
    ending_on_signals,
)

__all__ = ["BROKEN_PIPE", "INTERRUPTED", "TERMINATED", "Interrupted", "Main", "Terminated", "command"]


def command(main: Main) -> Main:
    """A console command's `main`, ending on signals and a closed standard output as this module says."""

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int:
        return ending_on_signals(lambda: main(argv))

    return run
