"""Saving a model with what `pipeline()` and Inference Endpoints need beside it, as remote code.

transformers copies the model file and the files it imports into every folder a model of this family saves
(`register_for_auto_class`). transformers 5 has no `translation` pipeline, so the folder also carries
pipeline_vaswani_transformer.py (declared in config.json's `custom_pipelines`, for
`pipeline("vaswani-translation", model=folder, trust_remote_code=True)`) and handler.py (Inference Endpoints'
custom handler). The model's `save_pretrained` adds them, and so `Trainer.save_model`, checkpoints and
`push_to_hub`; a model loaded as remote code takes them from where it was loaded.
"""

import json
import shutil
from pathlib import Path
from typing import Any

from transformers.utils import cached_file

from .configuration_vaswani_transformer import PIPELINE_TASK

PIPELINE_FILE = "pipeline_vaswani_transformer.py"  # it imports only the configuration among its siblings
PIPELINE_CLASS = "VaswaniTranslationPipeline"
HANDLER_FILE = "handler.py"  # it imports none of them
SHIPPED_BESIDE_THE_MODEL = (PIPELINE_FILE, HANDLER_FILE)
# The model file and the files it imports, which transformers copies: with the two above, all the folder's code
MODEL_CODE = (
    "configuration_vaswani_transformer.py",
    "presets_vaswani_transformer.py",
    "modeling_vaswani_transformer.py",
    "generation_vaswani_transformer.py",
    "loss_vaswani_transformer.py",
    "fast_path_vaswani_transformer.py",
    "saving_vaswani_transformer.py",
)
FOLDER_CODE = (*MODEL_CODE, *SHIPPED_BESIDE_THE_MODEL)
HUB_OPTIONS = (
    "repo_id",
    "commit_message",
    "commit_description",
    "private",
    "token",
    "revision",
    "create_pr",
    "tags",
)


def shipped_file(name: str, loaded_from: str | None) -> Path | None:
    """Where a shipped file is: beside this module (the package, or a folder loaded as remote code whose module
    folder holds it), else in the folder or Hub repo the model was loaded from; None if nowhere."""
    if (beside := Path(__file__).with_name(name)).is_file():
        return beside
    if not loaded_from:
        return None
    try:
        return Path(cached_file(loaded_from, name))
    except (OSError, TypeError):  # not in that folder or repo (or no longer reachable)
        return None


def declare_pipeline(config_file: Path, declared: bool = True) -> None:
    """Declare the folder's pipeline in its config.json (`custom_pipelines`), or no pipeline (`declared=False`)."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    impl = f"{Path(PIPELINE_FILE).stem}.{PIPELINE_CLASS}"
    pipelines = {PIPELINE_TASK: {"impl": impl, "pt": ["AutoModelForSeq2SeqLM"], "tf": [], "type": "text"}}
    config.pop("custom_pipelines", None)
    config_file.write_text(
        json.dumps(
            {**config, **({"custom_pipelines": pipelines} if declared else {})}, indent=2, sort_keys=True
        )
        + "\n",
        encoding="utf-8",
    )


def ship_translation_pipeline(folder: Path, loaded_from: str | None = None) -> None:
    """Copy the pipeline's and the handler's code into a saved model folder and declare the pipeline; a folder
    whose pipeline code cannot be found declares no pipeline it does not hold."""
    sources = [shipped_file(name, loaded_from) for name in SHIPPED_BESIDE_THE_MODEL]
    for source in sources if None not in sources else []:
        if not (folder / source.name).exists() or not (folder / source.name).samefile(source):
            shutil.copyfile(source, folder / source.name)
    declare_pipeline(folder / "config.json", declared=None not in sources)


class RemoteCodeSavingMixin:
    """`save_pretrained` of a remote-code model, with the pipeline's and the handler's code in the folder."""

    def _model_class(self) -> type:
        """The model's own class: the first in its MRO from the model file (the one that lists this mixin).

        FSDP2 shards a model by giving it a subclass defined in torch; saved as that, the folder would get an
        `auto_map` naming torch's FSDP code instead of the model file."""
        mro = type(self).__mro__
        model_file = next(cls for cls in mro if RemoteCodeSavingMixin in cls.__bases__).__module__
        return next(cls for cls in mro if cls.__module__ == model_file)

    def save_pretrained(
        self, save_directory: Any, *args: Any, push_to_hub: bool = False, **kwargs: Any
    ) -> None:
        """As transformers saves, with `AutoModel` (the encoder-decoder body) in the remote-code `auto_map` too, so
        that every saved model of this family loads with both Auto classes, and with the pipeline's and the
        handler's code (`ship_translation_pipeline`). `push_to_hub=True` pushes it all."""
        hub = {name: kwargs.pop(name) for name in HUB_OPTIONS if name in kwargs}
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
        if push_to_hub:  # `push_to_hub` saves (as above) into a folder of its own and uploads it
            self.push_to_hub(hub.pop("repo_id", Path(save_directory).name), **hub)
