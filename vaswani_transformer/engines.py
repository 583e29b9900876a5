"""Decoding engines behind `vaswani-translate` and `vaswani-evaluate`: PyTorch, or the model's CTranslate2 export.

- torch: `translate.translate` on the model, in the precision `--dtype` names (auto: bfloat16 weights on a GPU
  that has it; float32 weights on a CPU, computed in bfloat16 autocast where the CPU multiplies it faster at the model's width,
  `precision.decoding_precision`); `--quantize int8` gives the encoder's and decoder's linear layers dynamic
  int8 (`quantization.quantize_int8`, torchao).
- onnxruntime: the model's ONNX export (`onnx_export`, exported on first use into a cache folder per model
  content) in ONNX Runtime on the CPU, in float32, driven by the PyTorch model's own search
  (`onnx_runtime.load_onnx_model`): the same beam search and length penalty as torch.
- ctranslate2: the model converted to CTranslate2 on first use and kept in a cache folder per model content
  (`export.cached_export`); `--quantize int8` is CTranslate2's int8 compute type. CTranslate2's length penalty
  is |Y|^α, not the paper's GNMT ((5 + |Y|) / 6)^α, so beam search may choose differently on close calls.

All translate in length-sorted batches, return one translation per input in input order, and report progress
alike. `load_engine` checks the options before loading anything (`check_engine_options`).
"""

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .evaluation import decoding_settings, load_for_decoding
from .export import CTranslate2Translator, cached_export
from .onnx_export import ONNX_EXTRA, cached_onnx_export
from .onnx_runtime import load_onnx_model
from .quantization import INT8_EXTRA, quantize_int8
from .translate import BATCH_SIZE, translate

ENGINES = ("torch", "onnxruntime", "ctranslate2")
QUANTIZATIONS = ("none", "int8")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CTRANSLATE2_EXTRA = "pip install 'vaswani_transformer[ctranslate2]' (or ctranslate2)"
# This package's generate() keywords as CTranslate2's translate_batch options.
CTRANSLATE2_NAMES = {"num_beams": "beam_size", "length_penalty": "length_penalty"}


@dataclass(frozen=True)
class EngineOptions:
    """How to decode: the commands' --engine, --quantize, --dtype, --device, --ctranslate2_cache and
    --onnx_cache."""

    engine: str = "torch"
    quantize: str = "none"
    dtype: str = "auto"
    device: str = "auto"
    ctranslate2_cache: Path | None = None
    onnx_cache: Path | None = None


def check_engine_options(options: EngineOptions) -> None:
    """Refuse, before anything is loaded, options that cannot work together or on this machine (ValueError
    naming the fix)."""
    _check_choice("--engine", options.engine, ENGINES)
    _check_choice("--quantize", options.quantize, QUANTIZATIONS)
    _check_choice("--dtype", options.dtype, ("auto", *DTYPES))
    if options.ctranslate2_cache is not None and options.engine != "ctranslate2":
        raise ValueError("--ctranslate2_cache is the folder of --engine ctranslate2's conversions: drop it.")
    if options.onnx_cache is not None and options.engine != "onnxruntime":
        raise ValueError("--onnx_cache is the folder of --engine onnxruntime's exports: drop it.")
    if options.engine == "torch":
        _check_torch_options(options)
    elif options.engine == "onnxruntime":
        _check_onnxruntime_options(options)
    else:
        _check_ctranslate2_options(options)


def _check_choice(flag: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{flag} {value}: choose one of {', '.join(choices)}.")


def _check_torch_options(options: EngineOptions) -> None:
    device = torch_device(options.device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {options.device}: this machine has no CUDA GPU (use --device cpu).")
    if options.quantize != "int8":
        return
    if device != "cpu":
        raise ValueError(
            f"--quantize int8 with --engine torch runs on the CPU, not {device}: add --device cpu, drop "
            "--quantize (bfloat16 is the default on a GPU), or use --engine ctranslate2 --quantize int8."
        )
    if options.dtype not in ("auto", "float32"):
        raise ValueError(
            f"--quantize int8 quantizes float32 weights, not {options.dtype} ones: use --dtype auto (the rest "
            "in bfloat16 autocast where the CPU has it) or --dtype float32."
        )
    if importlib.util.find_spec("torchao") is None:
        raise ValueError(f"--quantize int8 with --engine torch needs torchao: {INT8_EXTRA}.")


def _check_onnxruntime_options(options: EngineOptions) -> None:
    if options.device not in ("auto", "cpu"):
        raise ValueError(f"--engine onnxruntime runs on the CPU, not {options.device}: drop --device.")
    if options.quantize != "none":
        raise ValueError(
            "--engine onnxruntime decodes in float32: for int8 use --engine ctranslate2 --quantize int8."
        )
    if options.dtype not in ("auto", "float32"):
        raise ValueError(f"--engine onnxruntime decodes in float32, not {options.dtype}: drop --dtype.")
    missing = [
        name for name in ("onnxruntime", "onnxscript", "onnx") if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise ValueError(f"--engine onnxruntime needs {', '.join(missing)}: {ONNX_EXTRA}.")


def _check_ctranslate2_options(options: EngineOptions) -> None:
    if importlib.util.find_spec("ctranslate2") is None:
        raise ValueError(f"--engine ctranslate2 needs CTranslate2: {CTRANSLATE2_EXTRA}.")
    import ctranslate2

    device, _ = ctranslate2_device(options.device)
    if device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        raise ValueError(f"--device {options.device}: CTranslate2 sees no CUDA GPU (use --device cpu).")
    compute_type = ctranslate2_compute_type(options.quantize, options.dtype, device)
    supported = sorted(ctranslate2.get_supported_compute_types(device))
    if compute_type not in supported:
        raise ValueError(
            f"CTranslate2 cannot compute in {compute_type} on this {device} (it can: {', '.join(supported)}): "
            "use --dtype auto."
        )


def torch_device(device: str) -> str:
    """--device for PyTorch: "auto" is cuda when there is a GPU, else cpu."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def ctranslate2_device(device: str) -> tuple[str, int]:
    """--device as CTranslate2's device and device index ("cuda:1" → ("cuda", 1); "auto": a GPU if it sees one)."""
    if device == "auto":
        import ctranslate2

        return ("cuda" if ctranslate2.get_cuda_device_count() else "cpu"), 0
    kind, _, index = device.partition(":")
    return kind, int(index or 0)


def ctranslate2_compute_type(quantize: str, dtype: str, device: str) -> str:
    """CTranslate2's compute type for --quantize and --dtype: int8 (int8 weights and products; the rest in
    float32 on a CPU) or int8_DTYPE; without int8, DTYPE, where auto is float32 on a CPU (CTranslate2 has no
    bfloat16 there) and bfloat16 on a GPU, as PyTorch's auto."""
    if quantize == "int8":
        return "int8" if dtype == "auto" else f"int8_{dtype}"
    if dtype == "auto":
        return "float32" if device == "cpu" else "bfloat16"
    return dtype


class TorchEngine:
    """The model in PyTorch: `translate.translate` in `dtype` (None: `precision.decoding_precision`'s choice)."""

    name = "torch"

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, dtype: torch.dtype | None = None
    ):
        self.model, self.tokenizer, self.dtype = model, tokenizer, dtype

    def translate(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        **overrides: Any,
    ) -> list[str]:
        """Translations of `texts` in input order (`batch_size` None: `translate`'s default, which fits the memory);
        `overrides` are generate() keywords (num_beams=1 …)."""
        return translate(
            texts,
            self.model,
            self.tokenizer,
            batch_size=batch_size,
            show_progress=show_progress,
            dtype=self.dtype,
            **overrides,
        )

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """What `translate` uses, as scores.json records it (engine, quantization, precision, search)."""
        return decoding_settings(self.model, self.dtype, **overrides)


class OnnxRuntimeEngine(TorchEngine):
    """The model's ONNX export in ONNX Runtime (`onnx_runtime.load_onnx_model`), decoded by the PyTorch
    model's search in float32: the same search, length penalty and output limit as TorchEngine."""

    name = "onnxruntime"

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase):
        super().__init__(model, tokenizer, torch.float32)

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """TorchEngine's record, naming this engine."""
        return {**super().decoding_settings(**overrides), "engine": self.name}


class CTranslate2Engine:
    """The model's CTranslate2 export (`export.CTranslate2Translator`), with this package's keyword names."""

    name = "ctranslate2"

    def __init__(self, translator: CTranslate2Translator, quantize: str = "none"):
        self.translator, self.quantize = translator, quantize
        self.tokenizer = translator.tokenizer

    def translate(
        self,
        texts: Sequence[str],
        *,
        batch_size: int | None = None,
        show_progress: bool = False,
        **overrides: Any,
    ) -> list[str]:
        """Translations of `texts` in input order (`batch_size` None: `BATCH_SIZE`); `overrides` as for PyTorch
        (num_beams, length_penalty: |Y|^α)."""
        return self.translator.translate(
            texts,
            batch_size=BATCH_SIZE if batch_size is None else batch_size,
            show_progress=show_progress,
            **self._options(overrides),
        )

    def decoding_settings(self, **overrides: Any) -> dict[str, Any]:
        """What `translate` uses, as scores.json records it, in the keys `evaluation.decoding_settings` uses."""
        options = {**self.translator.decoding, **self._options(overrides)}
        settings: dict[str, Any] = {
            "engine": self.name,
            "quantization": self.quantize,
            "num_beams": options["beam_size"],
            "do_sample": False,
            "dtype": f"{self.translator.translator.compute_type} (CTranslate2 compute type)",
        }
        if options["beam_size"] > 1:
            settings["length_penalty"] = options["length_penalty"]
            settings["length_penalty_type"] = "hf"  # CTranslate2 divides by |Y|^α, not GNMT's form
            settings["early_stopping"] = True  # the search ends when beam_size hypotheses have finished
        settings["max_new_tokens"] = f"longest source in the batch + {options['max_length_offset']}"
        return settings

    @staticmethod
    def _options(overrides: dict[str, Any]) -> dict[str, Any]:
        return {CTRANSLATE2_NAMES.get(name, name): value for name, value in overrides.items()}


Engine = TorchEngine | OnnxRuntimeEngine | CTranslate2Engine


def load_engine(model: str | Path, options: EngineOptions = EngineOptions()) -> Engine:
    """The engine `options` name, loaded for a saved model folder or Hub id (checked first:
    `check_engine_options`). The CTranslate2 and ONNX Runtime engines convert the model on first use
    (`export.cached_export`, `onnx_export.cached_onnx_export`)."""
    check_engine_options(options)
    if options.engine == "ctranslate2":
        return _load_ctranslate2(model, options)
    if options.engine == "onnxruntime":
        return OnnxRuntimeEngine(*load_onnx_model(cached_onnx_export(model, options.onnx_cache)))
    device = torch_device(options.device)
    explicit = DTYPES.get(options.dtype)
    if options.quantize == "int8":
        loaded, tokenizer = load_for_decoding(model, device="cpu", dtype=torch.float32)
        return TorchEngine(quantize_int8(loaded), tokenizer, explicit)
    loaded, tokenizer = load_for_decoding(model, device=device, dtype=explicit)
    return TorchEngine(loaded, tokenizer, explicit)


def _load_ctranslate2(model: str | Path, options: EngineOptions) -> CTranslate2Engine:
    device, index = ctranslate2_device(options.device)
    quantization = "int8" if options.quantize == "int8" else None
    folder = cached_export(model, quantization=quantization, cache_dir=options.ctranslate2_cache)
    compute_type = ctranslate2_compute_type(options.quantize, options.dtype, device)
    translator = CTranslate2Translator(folder, device=device, device_index=index, compute_type=compute_type)
    return CTranslate2Engine(translator, options.quantize)


def translate_lines(lines: Sequence[str], engine: Engine, **options: Any) -> list[str]:
    """Translations of the non-blank lines, with blank lines kept blank, in input order (one per line)."""
    filled = [index for index, line in enumerate(lines) if line.strip()]
    translations = engine.translate([lines[index] for index in filled], **options)
    output = [""] * len(lines)
    for index, translation in zip(filled, translations, strict=True):
        output[index] = translation
    return output
