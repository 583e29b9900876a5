"""Named training recipes: small YAML files whose keys are `experiment.TrainOptions` fields.

A key is also the train command's flag of the same name, so a recipe is a saved command line. An optional
`cuda:` section holds the values that replace the others when a CUDA GPU is present: one recipe, sized for the
machine it runs on.
"""

from pathlib import Path
from typing import Any

import torch
import yaml

RECIPES_DIR = Path(__file__).resolve().parent
CUDA_SECTION = "cuda"


def available_recipes() -> list[str]:
    """The names of the recipes shipped with the package."""
    return sorted(path.stem for path in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name: str) -> Path:
    """The file of a named recipe, or `name` itself when it is a YAML file."""
    if name in available_recipes():
        return RECIPES_DIR / f"{name}.yaml"
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.is_file():
        return path
    raise ValueError(f"unknown recipe {name!r}: choose one of {available_recipes()} or give a .yaml file")


def _check_keys(values: dict[str, Any], allowed: set[str], where: str) -> None:
    """Raise on a key that is no setting, listing the settings there are."""
    if unknown := sorted(set(values) - allowed):
        raise ValueError(f"{where}: unknown setting(s) {unknown}; settings are {sorted(allowed)}")


def load_recipe(name: str, *, allowed: set[str], cuda: bool | None = None) -> dict[str, Any]:
    """A recipe's settings, with its `cuda:` section applied when `cuda` (default: a CUDA GPU is present)."""
    path = recipe_path(name)
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a recipe is a mapping of settings to values")
    on_gpu = values.pop(CUDA_SECTION, None) or {}
    _check_keys(values, allowed, str(path))
    _check_keys(on_gpu, allowed, f"{path} ({CUDA_SECTION}: section)")
    if torch.cuda.is_available() if cuda is None else cuda:
        values.update(on_gpu)
    return values
