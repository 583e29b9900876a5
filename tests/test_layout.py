"""The package's layout (docs/architecture.md): layers that import only those below them, and a saved folder's code
that stands on torch and transformers' public APIs alone."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import GenerationMixin

import vaswani_transformer
from vaswani_transformer.modeling.saving_vaswani_transformer import FOLDER_CODE

PACKAGE = Path(vaswani_transformer.__file__).parent
REPO = PACKAGE.parent
MODELING = PACKAGE / "modeling"
# What a file of a saved folder may import besides its siblings: what transformers itself brings
FOLDER_IMPORTS = {"torch", "transformers", "huggingface_hub"}
# transformers' generation internals: any underscore member GenerationMixin defines
PRIVATE_GENERATION = {
    name for name in dir(GenerationMixin) if name.startswith("_") and not name.startswith("__")
}


def imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    return [
        node
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]


def test_import_linter_contracts_hold() -> None:
    """Layers, the saved folder's rule and no import circles (pyproject.toml's [tool.importlinter])."""
    command = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    completed = subprocess.run([command], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert "0 broken" in completed.stdout


def test_the_folder_code_is_the_modeling_folder() -> None:
    """`FOLDER_CODE`, which saving, pushing and the card list, names every file of modeling/ but its __init__."""
    assert set(FOLDER_CODE) == {path.name for path in MODELING.glob("*.py")} - {"__init__.py"}


@pytest.mark.parametrize("name", FOLDER_CODE)
def test_folder_code_imports_only_its_siblings_and_what_transformers_brings(name: str) -> None:
    """A saved model folder holds these files flat, beside each other: a sibling is imported relatively (one
    dot), anything else must be installed wherever transformers is; never transformers' dynamic-module loader."""
    for node in imports(MODELING / name):
        if isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and f"{node.module}.py" in FOLDER_CODE, ast.unparse(node)
            continue
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
        for module in names:
            assert module.split(".")[0] in FOLDER_IMPORTS | sys.stdlib_module_names, f"{name}: {module}"
            assert "dynamic_module_utils" not in module, f"{name}: {module}"


def private_generation_names(source: str) -> set[str]:
    """The underscore members of GenerationMixin that `source` names: as attributes, names, definitions
    (overrides) or strings (getattr)."""
    named = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            named.add(node.attr)
        elif isinstance(node, ast.Name):
            named.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            named.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            named.add(node.value)
    return named & PRIVATE_GENERATION


def test_a_private_generation_member_is_found_where_code_names_one() -> None:
    source = "class M(GenerationMixin):\n    def _beam_search(self):\n        return self._prefill(getattr(self, '_cache'))"
    assert private_generation_names(source) >= {"_beam_search", "_prefill"}


@pytest.mark.parametrize("name", FOLDER_CODE)
def test_folder_code_names_no_private_generation_member(name: str) -> None:
    """No override, call or lookup of an underscore member of GenerationMixin, and no reading of transformers'
    source: a transformers release may change those, and a folder on the Hub cannot be mended."""
    source = (MODELING / name).read_text(encoding="utf-8")
    assert private_generation_names(source) == set()
    assert "getsource" not in source
