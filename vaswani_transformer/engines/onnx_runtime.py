"""Decode with a model's ONNX export (`onnx_export`) in ONNX Runtime, through the PyTorch model's own search.

`load_onnx_model(folder)` gives a `VaswaniTransformerForConditionalGeneration` whose encoder and decoder are
ONNX Runtime sessions and whose output layer is part of the decoder graph: `generate()`, `translate()` and the
pipeline then run transformers' loop and this package's beam search (§6.1: beam 4, GNMT length penalty, the
output limit, one cross-attention row per sentence) unchanged, so ONNX Runtime and PyTorch choose the same
tokens up to float rounding. The decoding cache stays transformers' `EncoderDecoderCache`: the decoder step
reads the past from it and appends the step's keys/values, and beam search reorders it as in PyTorch.
The model holds no weights (the graphs do); it computes in float32 on the CPU. `OnnxRuntimeEngine` is that model
as a decoding engine (`decoding.engine.Engine`), as `engines.load_engine` loads it for `--engine onnxruntime`.
"""

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import AutoTokenizer, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions

from ..modeling.configuration_vaswani_transformer import VaswaniTransformerConfig
from ..modeling.modeling_vaswani_transformer import CACHE_NAME, VaswaniTransformerForConditionalGeneration
from ..trust import check_remote_code
from .onnx_export import GRAPHS, ONNX_EXTRA, key_value_names
from .torch_engine import TorchEngine


def _session(path: Path, threads: int | None) -> Any:
    try:
        import onnxruntime
        from onnxruntime.capi import onnxruntime_pybind11_state as state
    except ImportError as error:
        raise ImportError(f"ONNX Runtime is needed: {ONNX_EXTRA}.") from error
    # what ONNX Runtime raises for a file that is not a whole graph (its errors derive from Exception alone)
    damaged_graph_errors = (RuntimeError, state.Fail, state.InvalidProtobuf, state.InvalidGraph)
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    # Between two graph calls PyTorch runs the search on the same cores: ONNX Runtime's threads spinning there
    # for their next task made decoding twice as slow (docs/decisions/decoding-batches.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except damaged_graph_errors as error:  # e.g. a graph cut short by a full disk
        raise ValueError(
            f"{path} cannot be loaded ({error}): export the model again (vaswani-export-onnx)."
        ) from None


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().contiguous().numpy()


def _source_mask(mask: torch.Tensor | None, sources: int, source_length: int) -> np.ndarray:
    """The (sources, src_len) 0/1 mask the graphs take, from what the model passes: None (nothing padded), the
    2D mask, or the mixin's (sources, 1, 1, src_len) boolean or additive mask."""
    if mask is None:
        return np.ones((sources, source_length), dtype=np.int64)
    if mask.ndim == 4:
        mask = mask[:, 0, 0, :]
        mask = mask if mask.dtype == torch.bool else mask == 0
    return _numpy(mask.to(torch.int64))


class OnnxEncoder(nn.Module):
    """The encoder as an ONNX Runtime session, called as the PyTorch encoder is."""

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        # generate() takes the model's device and dtype from its parameters: this empty one says CPU, float32.
        self.anchor = nn.Parameter(torch.zeros(0), requires_grad=False)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **_: Any
    ) -> BaseModelOutput:
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        (hidden,) = self.session.run(
            None, {"input_ids": _numpy(input_ids), "attention_mask": _numpy(mask.long())}
        )
        return BaseModelOutput(last_hidden_state=torch.from_numpy(hidden))


class OnnxDecoder(nn.Module):
    """The decoder and output layer as ONNX Runtime sessions: each call is one step over the cache."""

    def __init__(self, cross_attention: Any, step: Any, layers: int, use_cache: bool) -> None:
        super().__init__()
        self.cross_attention, self.step, self.layers = cross_attention, step, layers
        self.use_cache = use_cache  # the config's default, as the PyTorch decoder's
        self.past_names = key_value_names("past", layers)
        self.cross_names = key_value_names("cross", layers)

    def _cross_cache(
        self, cache: EncoderDecoderCache, encoder_hidden_states: torch.Tensor
    ) -> list[np.ndarray]:
        """The encoder-decoder keys/values: projected once per generation, then read from the cache."""
        cross = cache.cross_attention_cache
        if not cache.is_updated.get(0):
            arrays = self.cross_attention.run(None, {"encoder_hidden_states": _numpy(encoder_hidden_states)})
            for layer in range(self.layers):
                key, value = (torch.from_numpy(array) for array in arrays[2 * layer : 2 * layer + 2])
                cross.update(key, value, layer)
                cache.is_updated[layer] = True
        return self._arrays(cross)

    def _arrays(self, cache: DynamicCache) -> list[np.ndarray]:
        """The cache's keys and values as the graphs take them: layer 0's key, value, layer 1's …"""
        return [
            _numpy(tensor) for layer in cache.layers[: self.layers] for tensor in (layer.keys, layer.values)
        ]

    def _past(self, cache: DynamicCache, rows: int, like: np.ndarray) -> list[np.ndarray]:
        if cache.get_seq_length() == 0:
            empty = np.zeros((rows, like.shape[1], 0, like.shape[3]), dtype=like.dtype)
            return [empty] * (2 * self.layers)
        return self._arrays(cache)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        use_cache: bool | None = None,
        **_: Any,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        use_cache = self.use_cache if use_cache is None else use_cache
        # Without a cache (a first step, or generate() with use_cache=False feeding the whole prefix each step),
        # the step starts from an empty past; the cache it fills is returned only when one is wanted.
        cache = past_key_values
        if cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        sources, source_length = encoder_hidden_states.shape[:2]
        cross = self._cross_cache(cache, encoder_hidden_states)
        feeds = {
            "input_ids": _numpy(input_ids),
            "encoder_attention_mask": _source_mask(encoder_attention_mask, sources, source_length),
            **dict(
                zip(
                    self.past_names,
                    self._past(cache.self_attention_cache, len(input_ids), cross[0]),
                    strict=True,
                )
            ),
            **dict(zip(self.cross_names, cross, strict=True)),
        }
        logits, *presents = self.step.run(None, feeds)
        for layer in range(self.layers):
            key, value = (torch.from_numpy(array) for array in presents[2 * layer : 2 * layer + 2])
            cache.self_attention_cache.update(key, value, layer)
        # The decoder graph ends with the output layer: its "hidden state" is the logits (lm_head is Identity).
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=torch.from_numpy(logits), **{CACHE_NAME: cache if use_cache else None}
        )


def load_onnx_model(
    folder: str | Path, *, threads: int | None = None, trust_remote_code: bool = False
) -> tuple[VaswaniTransformerForConditionalGeneration, PreTrainedTokenizerBase]:
    """The model of an ONNX export folder (`onnx_export.to_onnx`) for `generate()`, and its tokenizer.
    `threads`: ONNX Runtime's threads per graph (default: its own choice, one per core). A tokenizer that asks to
    run code of its own is refused unless `trust_remote_code` (`trust.check_remote_code`)."""
    folder = Path(folder)
    check_remote_code(folder, trust_remote_code)
    missing = [graph for graph in GRAPHS if not (folder / graph).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{folder} has no {', '.join(missing)}: export the model first (vaswani-export-onnx MODEL {folder})."
        )
    config = VaswaniTransformerConfig.from_pretrained(folder)
    with torch.device("meta"):  # the weights are in the graphs: the PyTorch modules are replaced below
        model = VaswaniTransformerForConditionalGeneration(config)
    model.model.encoder = OnnxEncoder(_session(folder / "encoder.onnx", threads))
    model.model.decoder = OnnxDecoder(
        _session(folder / "cross_attention.onnx", threads),
        _session(folder / "decoder.onnx", threads),
        config.num_decoder_layers,
        config.use_cache,
    )
    model.lm_head = nn.Identity()
    model.generation_config = GenerationConfig.from_pretrained(folder)
    return model.eval(), AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)


class OnnxRuntimeEngine(TorchEngine):
    """The model's ONNX export in ONNX Runtime (`load_onnx_model`), decoded by the PyTorch model's search in
    float32: the same search, length penalty and output limit as TorchEngine."""

    name = "onnxruntime"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        super().__init__(model, tokenizer, torch.float32)

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """TorchEngine's record, naming this engine."""
        return {**super().decoding_settings(**overrides), "engine": self.name}
