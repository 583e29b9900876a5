"""Decoding engines behind `vaswani-translate`, `vaswani-evaluate` and `vaswani-serve`: PyTorch, ONNX Runtime, or the
model's CTranslate2 export; each implements `decoding.engine.Engine` (re-exported here as `Engine`).

- torch (`torch_engine`): `translate()` on the model, in the precision `--dtype` names (auto: bfloat16 weights on
  a GPU that has it; float32 weights on a CPU, computed in bfloat16 autocast where the CPU multiplies it faster at
  the model's width); `--quantize int8` gives the encoder's and decoder's linear layers dynamic int8
  (`quantization`, torchao).
- onnxruntime (`onnx_export`, `onnx_runtime`): the model's ONNX export, exported on first use into the conversion
  cache, in ONNX Runtime on the CPU, in float32, driven by the PyTorch model's own search: the same beam search
  and length penalty as torch.
- ctranslate2 (`ctranslate2_export`, `ctranslate2_cache`, `ctranslate2_engine`; `ctranslate2_cuda`: the CUDA 12
  libraries its wheels load on a GPU): the model converted to CTranslate2 on first use and kept in the conversion
  cache (`conversion_cache`); `--quantize int8` is CTranslate2's int8 compute type. CTranslate2's length penalty
  is |Y|^α, not the paper's GNMT ((5 + |Y|) / 6)^α, so beam search may choose differently on close calls.

All translate in length-sorted batches, return one translation per input in input order, and report progress
alike; `translate_in_buffers` (`evaluation.streaming`) streams lines through any of them, a buffer at a time.
`load_engine` (`load`) checks the options before loading anything (`options.check_engine_options`).
"""

from ..decoding.engine import Engine
from ..evaluation.streaming import translate_in_buffers, translate_lines
from .ctranslate2_cache import cached_export
from .ctranslate2_engine import CTranslate2Engine, CTranslate2Translator
from .ctranslate2_export import CTRANSLATE2_EXTRA, to_ctranslate2
from .load import load_engine
from .onnx_export import ONNX_EXTRA, cached_onnx_export, to_onnx
from .onnx_runtime import OnnxRuntimeEngine, load_onnx_model
from .options import (
    DTYPES,
    ENGINES,
    QUANTIZATIONS,
    EngineOptions,
    check_engine_options,
    ctranslate2_compute_type,
    ctranslate2_device,
    torch_device,
)
from .quantization import INT8_EXTRA, quantize_int8
from .torch_engine import TorchEngine, decoding_settings

__all__ = [
    "CTRANSLATE2_EXTRA",
    "DTYPES",
    "ENGINES",
    "INT8_EXTRA",
    "ONNX_EXTRA",
    "QUANTIZATIONS",
    "CTranslate2Engine",
    "CTranslate2Translator",
    "Engine",
    "EngineOptions",
    "OnnxRuntimeEngine",
    "TorchEngine",
    "cached_export",
    "cached_onnx_export",
    "check_engine_options",
    "ctranslate2_compute_type",
    "ctranslate2_device",
    "decoding_settings",
    "load_engine",
    "load_onnx_model",
    "quantize_int8",
    "to_ctranslate2",
    "to_onnx",
    "torch_device",
    "translate_in_buffers",
    "translate_lines",
]
