"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a Hugging Face model.

`import vaswani_transformer` is instant: it imports neither torch nor transformers. Each name below is imported when
first used (PEP 562), and taking any of them registers the model with transformers' Auto classes and its pipeline
registry (`register_auto_classes`), as does calling that function yourself (docs/decisions/lazy-import.md).
"""

import importlib
from typing import TYPE_CHECKING

# Each public name and the module that defines it.
_EXPORTS = {
    "PIPELINE_TASK": ".modeling.configuration_vaswani_transformer",
    "PRESETS": ".modeling.configuration_vaswani_transformer",
    "VaswaniTransformerConfig": ".modeling.configuration_vaswani_transformer",
    "VaswaniTransformerForConditionalGeneration": ".modeling.modeling_vaswani_transformer",
    "VaswaniTransformerModel": ".modeling.modeling_vaswani_transformer",
    "VaswaniTransformerPreTrainedModel": ".modeling.modeling_vaswani_transformer",
    "VaswaniTranslationPipeline": ".decoding.pipeline",
    "register_auto_classes": ".auto",
    "translate": ".decoding.translate",
}

__all__ = [
    "PIPELINE_TASK",
    "PRESETS",
    "VaswaniTransformerConfig",
    "VaswaniTransformerForConditionalGeneration",
    "VaswaniTransformerModel",
    "VaswaniTransformerPreTrainedModel",
    "VaswaniTranslationPipeline",
    "register_auto_classes",
    "translate",
]

if TYPE_CHECKING:
    from .auto import register_auto_classes
    from .decoding.pipeline import VaswaniTranslationPipeline
    from .decoding.translate import translate
    from .modeling.configuration_vaswani_transformer import PIPELINE_TASK, PRESETS, VaswaniTransformerConfig
    from .modeling.modeling_vaswani_transformer import (
        VaswaniTransformerForConditionalGeneration,
        VaswaniTransformerModel,
        VaswaniTransformerPreTrainedModel,
    )


def __getattr__(name: str) -> object:
    """The public `name`, imported on first use, once the model is registered with transformers."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    importlib.import_module(".auto", __name__).register_auto_classes()
    value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value  # later uses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
