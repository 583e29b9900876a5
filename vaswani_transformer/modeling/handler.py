"""Hugging Face Inference Endpoints' custom handler, shipped as `handler.py` in every saved and pushed model folder.

Inference Endpoints (a "Custom" endpoint on the model repository) builds `EndpointHandler(path)` once and calls it
with each request's JSON: `{"inputs": "I love you." or a list of texts, "parameters": {"num_beams": 4, ...}}`.
It answers `[{"translation_text": ...}]`, one per input, from the folder's `vaswani-translation` pipeline (the
model's beam search and length penalty, §6.1, unless the parameters say otherwise; `"split_sentences": true`
translates a paragraph sentence by sentence). It needs torch and transformers, and sentencex for splitting: the
folder's requirements.txt names them, and the pipeline and the model come from the folder's own code
(trust_remote_code).
"""

from typing import Any

import torch
from transformers import pipeline

BATCH_SIZE = 32  # sentences per generate() call


class EndpointHandler:
    """The folder's model on the GPU when there is one, translating what each request's `inputs` hold."""

    def __init__(self, path: str = "") -> None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.translator = pipeline("vaswani-translation", model=path, device=device, trust_remote_code=True)

    def __call__(self, data: dict[str, Any]) -> list[dict[str, str]]:
        """`data["inputs"]`: a text or a list of texts; `data["parameters"]`: generate() keywords (num_beams,
        length_penalty, max_new_tokens, ...) and `split_sentences` (true, or a language code). A ValueError names a
        request of another shape."""
        inputs, parameters = data.get("inputs"), data.get("parameters") or {}
        texts = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(texts, list) or not all(isinstance(text, str) for text in texts):
            raise ValueError('"inputs" must be a text or a list of texts.')
        if not isinstance(parameters, dict):
            raise ValueError('"parameters" must be an object of decoding options (num_beams, ...).')
        if "num_return_sequences" in parameters:
            raise ValueError('"num_return_sequences" is not served: one translation per input.')
        results = self.translator(texts, batch_size=BATCH_SIZE, **parameters)
        return [{"translation_text": result["translation_text"]} for result in results]
