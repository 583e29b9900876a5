"""The built wheel: the card template, the remote-code tier and every console command ship in it; the repo's
model_card.md is a card as `vaswani-push` writes it, not the template."""

import importlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "vaswani-train",
    "vaswani-prepare",
    "vaswani-translate",
    "vaswani-evaluate",
    "vaswani-average",
    "vaswani-push",
    "vaswani-plot-attention",
    "vaswani-plot-positional-encoding",
    "vaswani-export-ctranslate2",
    "vaswani-export-onnx",
    "vaswani-convert",
    "vaswani-serve",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """A wheel built from a copy of the sources (the build leaves nothing in the checkout)."""
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "model_card.md"):
        shutil.copy2(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(
        REPO / "vaswani_transformer", source / "vaswani_transformer", symlinks=True, ignore=ignore
    )
    dist = tmp_path_factory.mktemp("dist")
    build = [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(dist)], check=True, capture_output=True, timeout=300)
    (path,) = dist.glob("vaswani_transformer-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow  # builds the wheel with pip
def test_wheel_ships_the_model_card_template_and_the_remote_code(wheel: zipfile.ZipFile) -> None:
    template = REPO / "vaswani_transformer" / "model_card.md"
    assert wheel.read("vaswani_transformer/model_card.md") == template.read_bytes()
    names = set(wheel.namelist())
    for module in (REPO / "vaswani_transformer" / "modeling").glob("*.py"):
        assert f"vaswani_transformer/modeling/{module.name}" in names
    assert {
        "vaswani_transformer/hub.py",
        "vaswani_transformer/cli/command.py",  # the console commands' entry points
        "vaswani_transformer/training/recipes/defaults.yaml",
        "vaswani_transformer/training/recipes/tatoeba.yaml",
        "vaswani_transformer/data/embedded/tatoeba_en_de/deu.txt.gz",
        "vaswani_transformer/evaluation/metrics/sacrebleu_offline/sacrebleu_offline.py",
    } <= names


def test_the_repos_model_card_is_a_card_the_push_command_writes() -> None:
    """model_card.md is an example, not the template: a card with metadata, nothing left unrendered, and the
    template's sections in its order."""
    card = ModelCard.load(REPO / "model_card.md")
    assert card.data.library_name == "transformers" and card.data.eval_results
    assert "{{" not in card.text and "{%" not in card.text
    template = (REPO / "vaswani_transformer" / "model_card.md").read_text(encoding="utf-8")
    headings = [line for line in template.splitlines() if line.startswith("## ")]
    assert [line for line in card.text.splitlines() if line.startswith("## ")] == headings


@pytest.mark.slow  # builds the wheel with pip
def test_every_console_command_is_declared_and_answers_help(wheel: zipfile.ZipFile, capsys) -> None:
    (entry_points,) = [name for name in wheel.namelist() if name.endswith("entry_points.txt")]
    lines = wheel.read(entry_points).decode().splitlines()
    commands = dict(line.split(" = ") for line in lines if " = " in line)
    assert set(commands) == COMMANDS
    for command, target in sorted(commands.items()):
        module, function = target.split(":")
        with pytest.raises(SystemExit) as exit_info:
            getattr(importlib.import_module(module), function)(["--help"])
        assert exit_info.value.code == 0, command
        assert f"usage: {command}" in capsys.readouterr().out


@pytest.mark.slow  # a fresh interpreter that imports the package
def test_importing_the_package_prints_no_warnings_of_torchao() -> None:
    """transformers imports torchao whenever it is installed (the int8 extra), and a CPU build of torchao logs
    that its CUDA kernel libraries cannot load: nothing that concerns a user, so importing this package (every
    command does) prints nothing, and the loggers it quietens keep their levels afterwards."""
    pytest.importorskip("torchao")
    code = (
        "import logging, vaswani_transformer; "
        "print(logging.getLogger('torchao').level, logging.getLogger('torch.utils._pytree').level)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr == ""
    assert result.stdout.split() == ["0", "0"]
