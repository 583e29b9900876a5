"""Training recipes: YAML files whose keys are `TrainOptions` fields, each a saved command line.

`defaults.yaml` holds every setting's default; a named recipe (`tatoeba`, the main job; `multi30k`; `wmt14-base`;
`wmt14-big`) or a user's YAML file names what it changes, and flags change it again. A recipe's optional `cuda:`
section holds the values that replace the others when it applies (by default, when a CUDA GPU is present): one
recipe, sized for the machine it runs on. Whether it applied is printed and kept in train_options.json
(`cuda_section`). Its optional `by_steps:` rows hold the values that replace the others where a CPU run trains
fewer steps than a row's `steps_below` within its time budget (`training.step_rate` measures the machine before
training): the settings measured best for that many steps.
"""

from pathlib import Path
from typing import Any

import yaml

RECIPES_DIR = Path(__file__).resolve().parent
DEFAULTS_FILE = RECIPES_DIR / "defaults.yaml"
CUDA_SECTION = "cuda"
BY_STEPS_SECTION = "by_steps"
STEPS_BELOW = "steps_below"  # a by_steps: row applies where the run trains fewer steps than this


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
    _by_steps(path, values.pop(BY_STEPS_SECTION, None), allowed)
    _check_keys(values, allowed, str(path))
    _check_keys(on_gpu, allowed, f"{path} ({CUDA_SECTION}: section)")
    return values, on_gpu


def _by_steps(path: Path, rows: Any, allowed: set[str]) -> list[dict[str, Any]]:
    """A recipe's `by_steps:` rows (none: an empty list), checked: a list of settings, each with a whole number
    `steps_below`, in ascending order of it."""
    if rows is None:
        return []
    where = f"{path} ({BY_STEPS_SECTION}: section)"
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise ValueError(f"{where}: a list of rows, each a mapping of settings to values with {STEPS_BELOW}")
    bounds = [row.get(STEPS_BELOW) for row in rows]
    if not all(isinstance(bound, int) and bound > 0 for bound in bounds) or bounds != sorted(bounds):
        raise ValueError(
            f"{where}: every row needs a positive whole {STEPS_BELOW}, the rows in ascending order of it"
        )
    for row in rows:
        _check_keys({name: value for name, value in row.items() if name != STEPS_BELOW}, allowed, where)
    return rows


def by_steps_rows(name: str, *, allowed: set[str]) -> list[dict[str, Any]]:
    """A recipe's `by_steps:` rows, checked (empty when it has none)."""
    path = recipe_path(name)
    return _by_steps(path, _read(path).get(BY_STEPS_SECTION), allowed)


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


def row_for(rows: list[dict[str, Any]], steps: int) -> dict[str, Any] | None:
    """The first of a recipe's `by_steps:` rows whose `steps_below` is above `steps`; None: no row, the recipe's
    own settings are the ones for that many steps."""
    return next((row for row in rows if steps < row[STEPS_BELOW]), None)


def row_settings(row: dict[str, Any] | None) -> dict[str, Any]:
    """A `by_steps:` row's settings, without its bound (none: no settings)."""
    return {name: value for name, value in (row or {}).items() if name != STEPS_BELOW}
