"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017) as a Hugging Face model."""

from .quiet_imports import quiet_import_warnings

with quiet_import_warnings():  # transformers imports torchao where it is installed (the int8 extra)
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
    from transformers.pipelines import PIPELINE_REGISTRY

from .decoding.pipeline import VaswaniTranslationPipeline
from .decoding.translate import translate
from .modeling.configuration_vaswani_transformer import PIPELINE_TASK, PRESETS, VaswaniTransformerConfig
from .modeling.modeling_vaswani_transformer import (
    VaswaniTransformerForConditionalGeneration,
    VaswaniTransformerModel,
    VaswaniTransformerPreTrainedModel,
)

AutoConfig.register(VaswaniTransformerConfig.model_type, VaswaniTransformerConfig, exist_ok=True)
AutoModel.register(VaswaniTransformerConfig, VaswaniTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(
    VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration, exist_ok=True
)
# save_pretrained then writes `auto_map` and copies the model's files, so that
# AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True) works without this package installed.
VaswaniTransformerConfig.register_for_auto_class()
VaswaniTransformerModel.register_for_auto_class("AutoModel")
VaswaniTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
# pipeline("vaswani-translation", model=...): transformers v5 has no translation pipeline of its own.
if PIPELINE_TASK not in PIPELINE_REGISTRY.get_supported_tasks():
    PIPELINE_REGISTRY.register_pipeline(
        PIPELINE_TASK, pipeline_class=VaswaniTranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
    )

__all__ = [
    "PIPELINE_TASK",
    "PRESETS",
    "VaswaniTransformerConfig",
    "VaswaniTransformerForConditionalGeneration",
    "VaswaniTransformerModel",
    "VaswaniTransformerPreTrainedModel",
    "VaswaniTranslationPipeline",
    "translate",
]
