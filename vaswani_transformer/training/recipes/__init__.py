"""Training recipes: YAML files whose keys are `TrainOptions` fields, each a saved command line.

`defaults.yaml` holds every setting's default; a named recipe (`tatoeba`, the main job; `multi30k`; `wmt14-base`;
`wmt14-big`) or a user's YAML file names what it changes, and flags change it again. A recipe's optional `cuda:`
section holds the values that replace the others when it applies (by default, when a CUDA GPU is present): one
recipe, sized for the machine it runs on. Whether it applied is printed and kept in train_options.json
(`cuda_section`).
"""

from pathlib import Path
from typing import Any

import yaml

RECIPES_DIR = Path(__file__).resolve().parent
DEFAULTS_FILE = RECIPES_DIR / "defaults.yaml"
CUDA_SECTION = "cuda"


def _read(path: Path) -> dict[str, Any]:
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a recipe is a mapping of settings to values")
    return values


def setting_defaults() -> dict[str, Any]:
    """Every setting's default value (defaults.yaml)."""
    return _read(DEFAULTS_FILE)


def available_recipes() -> list[str]:
    """The names of the recipes shipped with the package."""
    return sorted(path.stem for path in RECIPES_DIR.glob("*.yaml") if path != DEFAULTS_FILE)


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


def _sections(name: str, allowed: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A recipe's settings and its `cuda:` section (empty when it has none), both checked."""
    path = recipe_path(name)
    values = _read(path)
    on_gpu = values.pop(CUDA_SECTION, None) or {}
    _check_keys(values, allowed, str(path))
    _check_keys(on_gpu, allowed, f"{path} ({CUDA_SECTION}: section)")
    return values, on_gpu


def cuda_settings(name: str, *, allowed: set[str]) -> dict[str, Any]:
    """A recipe's `cuda:` section (empty when it has none)."""
    return _sections(name, allowed)[1]


def load_recipe(name: str, *, allowed: set[str], cuda: bool) -> dict[str, Any]:
    """A recipe's settings, with its `cuda:` section applied when `cuda`; a key that is no setting is an error in
    either part, whether the section applies or not."""
    values, on_gpu = _sections(name, allowed)
    if cuda:
        values.update(on_gpu)
    return values
