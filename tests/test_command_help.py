"""Issue 59: every console command's --help lists --verbose (which shows the libraries' warnings and progress bars
that a command holds back), and answers without importing the heavy libraries that only its work needs."""

import contextlib
import importlib
import io
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
with open(REPO / "pyproject.toml", "rb") as file:
    CONSOLE_SCRIPTS = tomllib.load(file)["project"]["scripts"]


def help_text(target: str) -> str:
    """What the console script `target` ("module:function") prints for --help, called as its entry point."""
    module, function = target.split(":")
    output = io.StringIO()
    with contextlib.redirect_stdout(output), pytest.raises(SystemExit) as exit_info:
        getattr(importlib.import_module(module), function)(["--help"])
    assert exit_info.value.code == 0
    return output.getvalue()


@pytest.mark.parametrize(("command", "target"), sorted(CONSOLE_SCRIPTS.items()))
def test_every_commands_help_lists_verbose(command: str, target: str) -> None:
    text = help_text(target)
    assert f"usage: {command}" in text
    (line,) = [line for line in text.splitlines() if line.strip().startswith("--verbose")]
    assert "progress bars" in line and "SUPPRESS" not in text
