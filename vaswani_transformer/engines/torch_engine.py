"""The model in PyTorch as a decoding engine (`decoding.engine.Engine`): `translate()` in the precision the device
computes fastest, and the record of its decoding settings that scores.json and the model card keep."""

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..decoding.translate import translate
from ..modeling.generation_vaswani_transformer import generation_setting, model_max_length
from ..precision import decoding_precision
from .quantization import INT8_DESCRIPTION, int8_linear_layers


def decoding_settings(
    model: PreTrainedModel, dtype: torch.dtype | None = None, cuda_graphs: bool = False, **overrides: Any
) -> dict[str, Any]:
    """What `translate` will use: the model's generation config with `overrides`, the precision it computes
    in (`dtype`, else `precision.decoding_precision`'s choice), its int8 layers if any
    (`quantization.quantize_int8`), whether it decodes through CUDA graphs, and its output limit as `generate`
    applies it (`model_max_length`: transformers' fallback max_length is no limit), as recorded in scores.json."""
    config = copy.deepcopy(model.generation_config)
    config.update(**overrides)
    settings: dict[str, Any] = {
        "engine": "torch",
        "quantization": INT8_DESCRIPTION if int8_linear_layers(model) else "none",
        "num_beams": config.num_beams or 1,
        "do_sample": bool(config.do_sample),
    }
    precision = decoding_precision(model.dtype, model.device, dtype, width=model.config.d_model)
    settings["dtype"] = str(precision).removeprefix("torch.")
    if precision != model.dtype:
        settings["dtype"] += f" (autocast over {str(model.dtype).removeprefix('torch.')} weights)"
    if settings["num_beams"] > 1:  # the length penalty and early stopping only act in beam search
        settings["length_penalty"] = generation_setting(config, "length_penalty")
        settings["length_penalty_type"] = getattr(model.config, "length_penalty_type", "hf")
        settings["early_stopping"] = generation_setting(config, "early_stopping")
    if cuda_graphs:
        settings["cuda_graphs"] = True
    if config.max_new_tokens is not None:
        settings["max_new_tokens"] = config.max_new_tokens
    elif (max_length := overrides.get("max_length", model_max_length(model.generation_config))) is not None:
        settings["max_length"] = max_length
    elif hasattr(model.config, "max_length_offset"):
        settings["max_new_tokens"] = f"each source + {model.config.max_length_offset}"
    return settings


class TorchEngine:
    """The model in PyTorch: `translate.translate` in `dtype` (None: `precision.decoding_precision`'s choice),
    through CUDA graphs with `cuda_graphs`."""

    name = "torch"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        dtype: torch.dtype | None = None,
        cuda_graphs: bool = False,
    ):
        self.model, self.tokenizer, self.dtype, self.cuda_graphs = model, tokenizer, dtype, cuda_graphs

    @property
    def max_source_tokens(self) -> int:
        """The model's position table: `translate` cuts longer sources to it."""
        return self.model.config.max_position_embeddings

    def translate(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        on_batch: Callable[[int], object] | None = None,
        **overrides: Any,
    ) -> list[str]:
        """Translations of `texts` in input order (`batch_size` None: `translate`'s default, which fits the memory);
        `on_batch` is called with each decoded batch's sentence count; `overrides` are generate() keywords
        (num_beams=1 …)."""
        return translate(
            texts,
            self.model,
            self.tokenizer,
            batch_size=batch_size,
            show_progress=show_progress,
            dtype=self.dtype,
            on_batch=on_batch,
            cuda_graphs=self.cuda_graphs,
            **overrides,
        )

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """What `translate` uses, as scores.json records it (engine, quantization, precision, search)."""
        return decoding_settings(self.model, self.dtype, self.cuda_graphs, **overrides)
