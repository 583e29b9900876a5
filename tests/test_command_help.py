"""Every console command's --help lists --verbose (which shows the libraries' warnings and progress bars that a
command holds back), and answers without importing torch, which only its work needs."""

import contextlib
import importlib
import io
import subprocess
import sys
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


def test_no_commands_help_and_no_import_of_the_package_imports_torch() -> None:
    """A fresh interpreter prints every command's --help (and imports the package) with torch never imported; a
    GPU driver's device files, where present, would make `vaswani-train --help` ask torch about CUDA."""
    script = (
        "import contextlib, io, sys\n"
        "import vaswani_transformer\n"
        "from vaswani_transformer.cli.command import COMMANDS, run_command\n"
        "from vaswani_transformer.training import options\n"
        "options.GPU_DRIVER_FILES = ()\n"
        "for name in COMMANDS:\n"
        "    with contextlib.redirect_stdout(io.StringIO()) as output, contextlib.suppress(SystemExit):\n"
        "        run_command(name, ['--help'])\n"
        "    assert f'usage: vaswani-{name}' in output.getvalue(), name\n"
        "print(sorted(module for module in sys.modules if module.split('.')[0] in ('torch', 'datasets')))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip() == "[]"
