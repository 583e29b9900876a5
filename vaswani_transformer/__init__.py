"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a Hugging Face model.

`import vaswani_transformer` is instant: it imports neither torch nor transformers. Each name below is imported when
first used (PEP 562), and taking any of them registers the model with transformers' Auto classes and its pipeline
registry (`register_auto_classes`), as does calling that function yourself (docs/decisions/lazy-import.md).
"""

from typing import TYPE_CHECKING

import lazy_loader

_getattr, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "auto": ["register_auto_classes"],
        "decoding.pipeline": ["VaswaniTranslationPipeline"],
        "decoding.translate": ["translate"],
        "modeling.configuration_vaswani_transformer": [
            "PIPELINE_TASK",
            "PRESETS",
            "VaswaniTransformerConfig",
        ],
        "modeling.modeling_vaswani_transformer": [
            "VaswaniTransformerForConditionalGeneration",
            "VaswaniTransformerModel",
            "VaswaniTransformerPreTrainedModel",
        ],
    },
)

if TYPE_CHECKING:
    from .auto import register_auto_classes as register_auto_classes
    from .decoding.pipeline import VaswaniTranslationPipeline as VaswaniTranslationPipeline
    from .decoding.translate import translate as translate
    from .modeling.configuration_vaswani_transformer import PIPELINE_TASK as PIPELINE_TASK
    from .modeling.configuration_vaswani_transformer import PRESETS as PRESETS
    from .modeling.configuration_vaswani_transformer import (
        VaswaniTransformerConfig as VaswaniTransformerConfig,
    )
    from .modeling.modeling_vaswani_transformer import (
        VaswaniTransformerForConditionalGeneration as VaswaniTransformerForConditionalGeneration,
    )
    from .modeling.modeling_vaswani_transformer import VaswaniTransformerModel as VaswaniTransformerModel
    from .modeling.modeling_vaswani_transformer import (
        VaswaniTransformerPreTrainedModel as VaswaniTransformerPreTrainedModel,
    )


def __getattr__(name: str) -> object:
    """The public `name`, imported on first use (lazy_loader), once the model is registered with transformers."""
    if name in __all__:
        _getattr("register_auto_classes")()
    return _getattr(name)
