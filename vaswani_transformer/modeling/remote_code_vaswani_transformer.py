"""The translation pipeline travels with every saved model, as remote code.

transformers 5 has no `translation` pipeline, so `pipeline("vaswani-translation", model=folder,
trust_remote_code=True)` needs the pipeline's code (pipeline_vaswani_transformer.py and what it imports) in the
folder and declared in its config.json. The model's `save_pretrained` (`RemoteCodeSavingMixin`; and so `Trainer.save_model`,
`Trainer.push_to_hub`, checkpoints) calls `ship_translation_pipeline`, as `vaswani-push` does; a model loaded as
remote code takes the code from where it was loaded. Shipped beside the model file as remote code itself: it
imports only transformers and the configuration, never the pipeline (a model must load without it).
"""

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers.dynamic_module_utils import get_relative_imports
from transformers.utils import cached_file

from .configuration_vaswani_transformer import PIPELINE_TASK

PIPELINE_FILE = "pipeline_vaswani_transformer.py"
PIPELINE_CLASS = "VaswaniTranslationPipeline"
HANDLER_FILE = "handler.py"  # Inference Endpoints' custom handler: it imports none of the other files


def imported_files(code_file: Path, locate: Callable[[str], Path | None]) -> dict[str, Path | None]:
    """The files `code_file` imports, directly or through each other (relative imports), each where `locate`
    finds it (None: not found)."""
    found: dict[str, Path | None] = {}
    reading = [code_file]
    while reading:
        for module in get_relative_imports(reading.pop()):
            if (name := f"{module}.py") not in found:
                found[name] = locate(name)
                if found[name] is not None:
                    reading.append(found[name])
    return found


def sibling_imports(code_file: Path) -> list[str]:
    """The files beside `code_file` that it imports, which remote code must ship with it; a missing one is named
    too (and then reported missing)."""
    if not code_file.is_file():
        return []
    beside = code_file.with_name
    return list(imported_files(code_file, lambda name: beside(name) if beside(name).is_file() else None))


def pipeline_code(loaded_from: str | None) -> list[Path]:
    """The pipeline's file and the files it imports: the package's own, or, for a model loaded as remote code (whose
    module folder holds only the model's files), those of the folder or Hub repo it was loaded from; [] when any
    is missing there."""
    package_copy = Path(__file__).with_name(PIPELINE_FILE)
    if package_copy.is_file():
        names = (PIPELINE_FILE, *sibling_imports(package_copy), HANDLER_FILE)
        return [package_copy.with_name(name) for name in names]
    if not loaded_from:
        return []

    def cached(name: str) -> Path | None:
        where = cached_file(loaded_from, name, _raise_exceptions_for_missing_entries=False)
        return None if where is None else Path(where)

    if (pipeline_file := cached(PIPELINE_FILE)) is None:
        return []
    imports = imported_files(pipeline_file, cached)
    handler = (
        [] if (handler_file := cached(HANDLER_FILE)) is None else [handler_file]
    )  # older folders lack it
    return [] if None in imports.values() else [pipeline_file, *imports.values(), *handler]


def ship_translation_pipeline(folder: Path, loaded_from: str | None = None) -> None:
    """Copy the pipeline's code (`pipeline_code`) into a saved model folder and declare it in its config.json; a
    folder whose pipeline code cannot be found declares no pipeline it does not hold."""
    config_file = folder / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    if code := pipeline_code(loaded_from):
        for source in code:
            if not (folder / source.name).exists() or not (folder / source.name).samefile(source):
                shutil.copyfile(source, folder / source.name)
        impl = f"{Path(PIPELINE_FILE).stem}.{PIPELINE_CLASS}"
        config["custom_pipelines"] = {
            PIPELINE_TASK: {"impl": impl, "pt": ["AutoModelForSeq2SeqLM"], "tf": [], "type": "text"}
        }
    else:
        config.pop("custom_pipelines", None)
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


class RemoteCodeSavingMixin:
    """`save_pretrained` and the Hub upload of a remote-code model, with the pipeline's code in the folder."""

    def _model_class(self) -> type:
        """The model's own class: the first in its MRO from the model file (the one that lists this mixin).

        FSDP2 shards a model by giving it a subclass defined in torch; saved as that, the folder would get an
        `auto_map` naming torch's FSDP code instead of the model file."""
        mro = type(self).__mro__
        model_file = next(cls for cls in mro if RemoteCodeSavingMixin in cls.__bases__).__module__
        return next(cls for cls in mro if cls.__module__ == model_file)

    def save_pretrained(self, save_directory: Any, *args: Any, **kwargs: Any) -> None:
        """As transformers saves, with `AutoModel` (the encoder-decoder body) in the remote-code `auto_map` too,
        so that every saved model of this family loads with both Auto classes and `trust_remote_code=True`, and
        with the translation pipeline's code (`ship_translation_pipeline`)."""
        sharded_class = type(self)
        self.__class__ = self._model_class()
        try:
            if self._auto_class is not None:
                module = type(self).__module__.rpartition(".")[2]
                auto_map = getattr(self.config, "auto_map", None) or {}
                self.config.auto_map = {**auto_map, "AutoModel": f"{module}.VaswaniTransformerModel"}
            super().save_pretrained(save_directory, *args, **kwargs)
            if self._auto_class is not None and kwargs.get("is_main_process", args[0] if args else True):
                ship_translation_pipeline(Path(save_directory), self.config.name_or_path)
        finally:
            self.__class__ = sharded_class

    def _upload_modified_files(self, working_dir: Any, *args: Any, **kwargs: Any) -> Any:
        """transformers' upload, after the pipeline's code joins the folder: `save_pretrained(push_to_hub=True)`
        uploads from inside transformers' save, before `save_pretrained` above adds it."""
        if self._auto_class is not None:
            ship_translation_pipeline(Path(working_dir), self.config.name_or_path)
        return super()._upload_modified_files(working_dir, *args, **kwargs)
