"""The model in transformers' registries: `AutoConfig`, `AutoModel` and `AutoModelForSeq2SeqLM` load a saved folder
with this package's classes (no remote code runs), `pipeline("vaswani-translation", ...)` builds the package's
pipeline, and `save_pretrained` writes `auto_map`, so that the saved folder loads with `trust_remote_code=True`
where this package is not installed.

Registering changes transformers' global registries, so it happens when asked (`register_auto_classes`), which
taking any name from `vaswani_transformer` does, never on `import vaswani_transformer` alone.
"""

import functools

from .quiet import quiet_import_warnings


@functools.cache
def register_auto_classes() -> None:
    """Register the config, the models and the `vaswani-translation` pipeline with transformers (once a process)."""
    with quiet_import_warnings():  # transformers imports torchao where it is installed (the int8 extra)
        from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM
        from transformers.pipelines import PIPELINE_REGISTRY

    from .decoding.pipeline import VaswaniTranslationPipeline
    from .modeling.configuration_vaswani_transformer import PIPELINE_TASK, VaswaniTransformerConfig
    from .modeling.modeling_vaswani_transformer import (
        VaswaniTransformerForConditionalGeneration,
        VaswaniTransformerModel,
    )

    AutoConfig.register(VaswaniTransformerConfig.model_type, VaswaniTransformerConfig, exist_ok=True)
    AutoModel.register(VaswaniTransformerConfig, VaswaniTransformerModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(
        VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration, exist_ok=True
    )
    # transformers v5 has no translation pipeline of its own
    if PIPELINE_TASK not in PIPELINE_REGISTRY.get_supported_tasks():
        PIPELINE_REGISTRY.register_pipeline(
            PIPELINE_TASK,
            pipeline_class=VaswaniTranslationPipeline,
            pt_model=AutoModelForSeq2SeqLM,
            type="text",
        )
