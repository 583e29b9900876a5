"""The package's layout (docs/architecture.md): layers that import only those below them, a remote-code tier that
ships alone, modules of a readable size, and the import paths of before the layout still working."""

import ast
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vaswani_transformer
from vaswani_transformer._moved_modules import MOVED_MODULES

PACKAGE = Path(vaswani_transformer.__file__).parent
REPO = PACKAGE.parent
MODELING = PACKAGE / "modeling"
# What a file of the remote-code tier may import besides its siblings: what a saved model needs where only
# transformers (and so torch, tqdm and huggingface_hub) is installed.
REMOTE_CODE_IMPORTS = {"torch", "transformers", "tqdm", "huggingface_hub"}
MAX_MODULE_LINES = 450
MAX_JOB_LINES = 200
# The one exception: the model file reads alone, top to bottom in the paper's order (§3.1–§3.5 with transformers'
# cache API inside attention, and the two model classes transformers' Auto classes load), as Marian's does in 1,400.
MODEL_FILE = Path("modeling/modeling_vaswani_transformer.py")
MAX_MODEL_FILE_LINES = 650


def imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    return [
        node
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]


def test_import_linter_contracts_hold() -> None:
    """Layers, the remote-code tier's rule and no import circles (pyproject.toml's [tool.importlinter])."""
    command = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    completed = subprocess.run([command], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "0 broken" in completed.stdout


@pytest.mark.parametrize("path", sorted(MODELING.glob("*.py")), ids=lambda path: path.name)
def test_the_remote_code_tier_imports_only_its_siblings_and_what_transformers_brings(path: Path) -> None:
    """A saved model folder holds these files flat, beside each other: a sibling is imported relatively (one
    dot), anything else must be installed wherever transformers is."""
    for node in imports(path):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and node.module and (MODELING / f"{node.module}.py").is_file(), (
                ast.unparse(node)
            )
            continue
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
        for name in names:
            top = name.split(".")[0]
            assert top in REMOTE_CODE_IMPORTS or top in sys.stdlib_module_names, f"{path.name}: {name}"


def test_no_package_module_is_longer_than_a_reader_can_hold() -> None:
    lengths = {
        path.relative_to(PACKAGE): len(path.read_text().splitlines()) for path in PACKAGE.rglob("*.py")
    }
    too_long = {
        path: lines for path, lines in lengths.items() if lines > MAX_MODULE_LINES and path != MODEL_FILE
    }
    assert too_long == {}
    assert lengths[MODEL_FILE] <= MAX_MODEL_FILE_LINES
    assert lengths[Path("training/job.py")] <= MAX_JOB_LINES


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_MODULES.items()))
def test_every_import_path_of_before_names_its_new_module(old: str, new: str) -> None:
    moved = importlib.import_module(f"vaswani_transformer.{old}")
    assert moved is importlib.import_module(f"vaswani_transformer.{new}")
    assert moved.__spec__.name == f"vaswani_transformer.{new}"  # the module keeps its own identity


def test_old_imports_users_write_still_work() -> None:
    from vaswani_transformer.export import CTranslate2Translator
    from vaswani_transformer.modeling_vaswani_transformer import VaswaniTransformerForConditionalGeneration
    from vaswani_transformer.translate import translate as translate_function

    from vaswani_transformer import translate

    assert translate is translate_function and callable(translate)  # the package's function, not the module
    assert CTranslate2Translator.__module__ == "vaswani_transformer.engines.ctranslate2"
    assert (
        VaswaniTransformerForConditionalGeneration
        is vaswani_transformer.VaswaniTransformerForConditionalGeneration
    )
