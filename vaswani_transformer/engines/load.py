"""`load_engine`: the engine `EngineOptions` name (a `decoding.engine.Engine`), loaded for a saved model folder or
Hub id (translating lines with it, blank lines kept, buffer by buffer: `evaluation.streaming`)."""

from pathlib import Path

import torch

from ..decoding.engine import Engine
from ..evaluation.loading import load_for_decoding
from .ctranslate2_cache import cached_export
from .ctranslate2_engine import CTranslate2Engine, CTranslate2Translator
from .onnx_export import cached_onnx_export
from .onnx_runtime import OnnxRuntimeEngine, load_onnx_model
from .options import (
    EngineOptions,
    check_engine_options,
    ctranslate2_compute_type,
    ctranslate2_device,
    torch_device,
)
from .quantization import quantize_int8
from .torch_engine import TorchEngine


def load_engine(model: str | Path, options: EngineOptions | None = None) -> Engine:
    """The engine `options` name, loaded for a saved model folder or Hub id (checked first:
    `check_engine_options`). The CTranslate2 and ONNX Runtime engines convert the model on first use
    (`ctranslate2_cache.cached_export`, `onnx_export.cached_onnx_export`)."""
    options = options or EngineOptions()
    check_engine_options(options)
    if options.engine == "ctranslate2":
        return _load_ctranslate2(model, options)
    if options.engine == "onnxruntime":
        trust = options.trust_remote_code
        folder = cached_onnx_export(model, options.onnx_cache, options.verify_cache, trust_remote_code=trust)
        return OnnxRuntimeEngine(*load_onnx_model(folder, trust_remote_code=trust))
    device = torch_device(options.device)
    explicit = None if options.dtype == "auto" else getattr(torch, options.dtype)
    if options.quantize == "int8":
        loaded, tokenizer = load_for_decoding(
            model, device="cpu", dtype=torch.float32, trust_remote_code=options.trust_remote_code
        )
        return TorchEngine(quantize_int8(loaded), tokenizer, explicit)
    loaded, tokenizer = load_for_decoding(
        model, device=device, dtype=explicit, trust_remote_code=options.trust_remote_code
    )
    return TorchEngine(loaded, tokenizer, explicit, options.cuda_graphs)


def _load_ctranslate2(model: str | Path, options: EngineOptions) -> CTranslate2Engine:
    device, index = ctranslate2_device(options.device)
    quantization = "int8" if options.quantize == "int8" else None
    folder = cached_export(
        model,
        quantization=quantization,
        cache_dir=options.ctranslate2_cache,
        verify_cache=options.verify_cache,
        trust_remote_code=options.trust_remote_code,
    )
    compute_type = ctranslate2_compute_type(options.quantize, options.dtype, device)
    translator = CTranslate2Translator(
        folder,
        device=device,
        device_index=index,
        compute_type=compute_type,
        trust_remote_code=options.trust_remote_code,
    )
    return CTranslate2Engine(translator, options.quantize)
