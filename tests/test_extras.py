"""A command whose extra is not installed ends with exit 2 and one line naming the extra, the command and a pip
command that works where the package is (it is not on PyPI)."""

import importlib.util
import shlex
import subprocess
import sys

import pytest

from vaswani_transformer import extras
from vaswani_transformer.cli import export_onnx, serve


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch):
    """Make the named modules look uninstalled to the package's checks."""
    hidden: set[str] = set()
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        extras.importlib.util, "find_spec", lambda name, *a: None if name in hidden else find_spec(name, *a)
    )
    return hidden


@pytest.mark.parametrize(
    "main, arguments, extra, module",
    [
        (serve.main, ["some-model"], "serve", "fastapi"),
        (export_onnx.main, ["m", "out"], "onnx", "onnxscript"),
    ],
)
def test_a_missing_extra_is_one_line_with_exit_2(
    main, arguments, extra, module, without, capsys, tmp_path
) -> None:
    without.add(module)
    assert main(arguments) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "Traceback" not in error
    assert f"needs the [{extra}] extra ({module} not installed): pip install -e " in error
    assert error.endswith(f'{extras.CHECKOUT}[{extra}]"')


@pytest.mark.slow  # pip builds the checkout's metadata
def test_the_install_command_it_gives_is_one_pip_accepts_here() -> None:
    """pip resolves the checkout's extra (a dry run: nothing is installed or downloaded)."""
    command = shlex.split(extras.install_command("int8"))
    assert command[:3] == ["pip", "install", "-e"]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--no-build-isolation",
            *command[2:],
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
