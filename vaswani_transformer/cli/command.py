"""How every console command ends when it is stopped from outside: Ctrl-C (SIGINT) and SIGTERM end it with one
line on standard error and the shell's status for the signal (130, 143), never a traceback; a reader of standard
output that goes away (`vaswani-translate ... | head -1`) ends it quietly with 141, as it ends `cat`.

Both signals become exceptions, so every `with` block and `finally` on the way out runs: temporary files and
folders are removed, and what was whole before stays whole.
"""

import functools
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

Main = Callable[[Sequence[str] | None], int]

INTERRUPTED = 130  # 128 + SIGINT
BROKEN_PIPE = 141  # 128 + SIGPIPE
TERMINATED = 143  # 128 + SIGTERM


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


def command(main: Main) -> Main:
    """A console command's `main`, ending on signals and a closed standard output as this module says."""

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int:
        try:
            with _sigterm_raises():
                return main(argv)
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

    return run
