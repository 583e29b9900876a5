"""Decoding engines behind `vaswani-translate`, `vaswani-evaluate` and `vaswani-serve`: PyTorch, ONNX Runtime, or the
model's CTranslate2 export; each implements `decoding.engine.Engine`.

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

import lazy_loader

# Each name is imported from its module on first use (PEP 562), so that importing one module of the package
# does not import them all.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submod_attrs={
        "ctranslate2_cache": ["cached_export"],
        "ctranslate2_engine": ["CTranslate2Engine", "CTranslate2Translator"],
        "ctranslate2_export": ["to_ctranslate2"],
        "load": ["load_engine"],
        "onnx_export": ["ONNX_EXTRA", "cached_onnx_export", "to_onnx"],
        "onnx_runtime": ["OnnxRuntimeEngine", "load_onnx_model"],
        "options": [
            "CTRANSLATE2_EXTRA",
            "DTYPES",
            "ENGINES",
            "EngineOptions",
            "QUANTIZATIONS",
            "check_engine_options",
            "ctranslate2_compute_type",
            "ctranslate2_device",
            "torch_device",
        ],
        "quantization": ["INT8_EXTRA", "quantize_int8"],
        "torch_engine": ["TorchEngine", "decoding_settings"],
    },
)
