"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a Hugging Face model."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_vaswani_transformer import PRESETS, VaswaniTransformerConfig
from .modeling_vaswani_transformer import (
    VaswaniTransformerForConditionalGeneration,
    VaswaniTransformerModel,
    VaswaniTransformerPreTrainedModel,
)

AutoConfig.register(VaswaniTransformerConfig.model_type, VaswaniTransformerConfig, exist_ok=True)
AutoModel.register(VaswaniTransformerConfig, VaswaniTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(
    VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration, exist_ok=True
)
# save_pretrained then writes `auto_map` and copies the two model files, so that
# AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True) works without this package installed.
VaswaniTransformerConfig.register_for_auto_class()
VaswaniTransformerModel.register_for_auto_class("AutoModel")
VaswaniTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "PRESETS",
    "VaswaniTransformerConfig",
    "VaswaniTransformerForConditionalGeneration",
    "VaswaniTransformerModel",
    "VaswaniTransformerPreTrainedModel",
]
