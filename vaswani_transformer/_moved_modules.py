"""Import paths from before the package was laid out by role keep working: each names its module's new home.

`import vaswani_transformer.translate` (or `from vaswani_transformer.export import CTranslate2Translator`) gives
the very module that now lives at the new path, so its objects are the same objects. The table is the only
record of the old paths; tests/test_layout.py imports every one of them.
"""

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

PACKAGE = __name__.rpartition(".")[0]
# old module (under the package) → its new module
MOVED_MODULES = {
    "configuration_vaswani_transformer": "modeling.configuration_vaswani_transformer",
    "modeling_vaswani_transformer": "modeling.modeling_vaswani_transformer",
    "generation_vaswani_transformer": "modeling.generation_vaswani_transformer",
    "loss_vaswani_transformer": "modeling.loss_vaswani_transformer",
    "translate": "modeling.pipeline_vaswani_transformer",
    "precision": "modeling.precision_vaswani_transformer",
    "remote_code": "modeling.remote_code_vaswani_transformer",
    "prepared": "data.prepared",
    "token_arrays": "data.token_arrays",
    "tokenization": "data.tokenization",
    "experiment": "training",
    "checkpoints": "training.checkpoints",
    "monitoring": "training.monitoring",
    "recipes": "training.recipes",
    "bleu": "evaluation.bleu",
    "export": "engines.ctranslate2",
    "onnx_export": "engines.onnx_export",
    "onnx_runtime": "engines.onnx_runtime",
    "quantization": "engines.quantization",
    "locations": "files",
}


class _MovedModuleLoader(importlib.abc.Loader):
    """Loads an old path as the module at its new one (imported there, if it is not yet)."""

    def __init__(self, new_name: str) -> None:
        self.new_name = new_name
        self.new_spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new_name)
        self.new_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module ran at its new path); the import system gave it the old path's spec, and it
        gets its own back."""
        module.__spec__ = self.new_spec


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the package's old module paths (`MOVED_MODULES`) and nothing else."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        package, _, name = fullname.rpartition(".")
        if package != PACKAGE or name not in MOVED_MODULES:
            return None
        loader = _MovedModuleLoader(f"{PACKAGE}.{MOVED_MODULES[name]}")
        return importlib.machinery.ModuleSpec(fullname, loader)


def keep_moved_modules_importable() -> None:
    """Answer the old paths from now on (once per process; the finder comes after Python's own). The old paths of
    modules already imported are entered at once: a first import through the finder would also set the package's
    attribute of that name (`vaswani_transformer.translate`, the function, would become the module)."""
    for old, new in MOVED_MODULES.items():
        if (module := sys.modules.get(f"{PACKAGE}.{new}")) is not None:
            sys.modules.setdefault(f"{PACKAGE}.{old}", module)
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
