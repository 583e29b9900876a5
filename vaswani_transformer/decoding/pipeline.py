"""The package's `vaswani-translation` pipeline, which `import vaswani_transformer` registers for the task: the
pipeline every saved folder carries (`modeling/pipeline_vaswani_transformer.py`), plus what the package's runtime
adds: `cuda_graphs=True` (`cuda_graphs.bucketed_generate`), `src_lang`/`tgt_lang` checked against the language pair
the model's folder records, and `translate()`'s default precision (`precision.decoding_precision`).
"""

from typing import Any

import torch

from ..modeling.pipeline_vaswani_transformer import VaswaniTranslationPipeline as FolderPipeline
from ..precision import decoding_precision
from .cuda_graphs import bucketed_generate, check_cuda_graphs
from .sentences import recorded_languages
from .translation_inputs import check_languages


class VaswaniTranslationPipeline(FolderPipeline):
    """`pipeline("vaswani-translation", model=...)`, as a saved folder's (its docstring), with `cuda_graphs=True`
    (CUDA graphs over a few padded shapes, the same translations), `src_lang`/`tgt_lang` (refused when they name
    another pair than the model records) and bfloat16 decoding where `translate()` would choose it."""

    def _sanitize_parameters(
        self,
        cuda_graphs: bool | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
        **kwargs: Any,
    ) -> tuple[dict, dict, dict]:
        preprocess, forward, postprocess = super()._sanitize_parameters(**kwargs)
        generate_kwargs = {name: value for name, value in forward.items() if name != "decoding_dtype"}
        if cuda_graphs:
            check_cuda_graphs(self.model, generate_kwargs)
        if src_lang is not None or tgt_lang is not None:
            name = self.model.config._name_or_path
            check_languages(recorded_languages(name) if name else None, src_lang, tgt_lang)
        if cuda_graphs is not None:
            forward["cuda_graphs"] = cuda_graphs
        return preprocess, forward, postprocess

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cuda_graphs: bool = False,
        **generate_kwargs: Any,
    ) -> torch.Tensor:
        """The model's `generate()`, or with `cuda_graphs` its CUDA-graph decoding: the same translations.

        Args:
            input_ids: `(batch, src_len)` source ids.
            attention_mask: `(batch, src_len)` source padding mask.
            cuda_graphs: decode through `cuda_graphs.bucketed_generate` (CUDA graphs over a few padded shapes).
            **generate_kwargs: `generate()`'s options for this call.

        Returns:
            `(batch · num_return_sequences, out_len)` output ids.
        """
        if cuda_graphs:
            return bucketed_generate(self.model, input_ids, attention_mask, **generate_kwargs)
        return super().generate(input_ids, attention_mask, **generate_kwargs)

    def decoding_dtype(self, weights: torch.dtype, device: torch.device) -> torch.dtype:
        """The precision of a call that names none: `translate()`'s (`precision.decoding_precision`).

        Args:
            weights: the model's parameter dtype.
            device: where the model is.

        Returns:
            The dtype decoding computes in.
        """
        return decoding_precision(weights, device, width=self.model.config.d_model)
