"""Hugging Face Inference Endpoints' custom handler, shipped as `handler.py` in every saved and pushed model folder.

Inference Endpoints (a "Custom" endpoint on the model repository) builds `EndpointHandler(path)` once and calls it
with each request's JSON: `{"inputs": "I love you." or a list of texts, "parameters": {"num_beams": 4, ...}}`.
It answers `[{"translation_text": ...}]`, one per input, decoded as `translate()` decodes (the model's beam search
and length penalty, §6.1, unless the parameters say otherwise). It needs only torch and transformers: the model and
`translate()` come from the folder's own code (trust_remote_code: the folder's, beside this file).
"""

import importlib
from typing import Any

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.dynamic_module_utils import get_class_from_dynamic_module

PIPELINE_CLASS = "pipeline_vaswani_transformer.VaswaniTranslationPipeline"


class EndpointHandler:
    """The folder's model on the GPU when there is one, translating what each request's `inputs` hold."""

    def __init__(self, path: str = "") -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForSeq2SeqLM.from_pretrained(path, trust_remote_code=True).to(device).eval()
        self.tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=True
        )  # else it asks (the config)
        pipeline_class = get_class_from_dynamic_module(PIPELINE_CLASS, path)
        self.translate = importlib.import_module(pipeline_class.__module__).translate

    def __call__(self, data: dict[str, Any]) -> list[dict[str, str]]:
        """`data["inputs"]`: a text or a list of texts; `data["parameters"]`: generate() keywords (num_beams,
        length_penalty, max_new_tokens, ...). A ValueError names a request of another shape."""
        inputs, parameters = data.get("inputs"), data.get("parameters") or {}
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            raise ValueError('"inputs" must be a text or a list of texts.')
        if not isinstance(parameters, dict):
            raise ValueError('"parameters" must be an object of decoding options (num_beams, ...).')
        translations = self.translate(texts, self.model, self.tokenizer, **parameters)
        return [{"translation_text": translation} for translation in translations]
