"""How a console command ends when it is stopped from outside (vaswani_transformer/cli/command.py): one line and
130 for Ctrl-C, 143 for SIGTERM, a quiet 141 when its reader goes away; never a traceback."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest

from vaswani_transformer.cli.command import Interrupted, command


def test_ctrl_c_is_one_line_and_130(capsys: pytest.CaptureFixture[str]) -> None:
    @command
    def main(argv: Sequence[str] | None = None) -> int:
        raise KeyboardInterrupt

    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "interrupted"


def test_an_interrupt_with_advice_says_it(capsys: pytest.CaptureFixture[str]) -> None:
    @command
    def main(argv: Sequence[str] | None = None) -> int:
        raise Interrupted("the run can continue with --resume")

    assert main([]) == 130
    assert capsys.readouterr().err.strip() == "interrupted; the run can continue with --resume"


def test_sigterm_runs_the_cleanup_on_the_way_out_and_is_143(capsys: pytest.CaptureFixture[str]) -> None:
    cleaned = []

    @command
    def main(argv: Sequence[str] | None = None) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
            return 0
        finally:
            cleaned.append(True)

    before = signal.getsignal(signal.SIGTERM)
    assert main([]) == 143
    assert cleaned == [True] and capsys.readouterr().err.strip() == "terminated"
    assert signal.getsignal(signal.SIGTERM) == before  # the command's handler does not outlive it


def test_a_closed_standard_output_ends_quietly_with_141() -> None:
    script = (
        "from vaswani_transformer.cli.command import command\n"
        "@command\n"
        "def main(argv=None):\n"
        "    for n in range(10**6):\n"
        "        print(n)\n"
        "    return 0\n"
        "raise SystemExit(main())\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert writer.stdout is not None
    writer.stdout.readline()
    writer.stdout.close()  # what `| head -1` does
    _, error = writer.communicate(timeout=60)
    assert writer.returncode == 141 and error == b""
