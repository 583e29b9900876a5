"""How to decode: the engine, quantization, dtype and device the commands name (`EngineOptions`), checked before
anything is loaded, with the fix named.

It imports torch and the engines' modules only where a check needs them, so that the commands' options and --help
build without them."""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..extras import install_command, missing_modules
from ..files.paths import check_cache_folder

ENGINES = ("torch", "onnxruntime", "ctranslate2")
QUANTIZATIONS = ("none", "int8")
DTYPES = ("float32", "bfloat16", "float16")  # torch dtypes, by name
# CTranslate2's weight types (`--quantization` of vaswani-export-ctranslate2)
WEIGHT_TYPES = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16")
# The most positions an export's tables hold: 0.27 GB a stack at d_model 1,024, far beyond any sentence.
MAX_EXPORT_POSITIONS = 2**16
CTRANSLATE2_EXTRA = install_command("ctranslate2")


@dataclass(frozen=True)
class EngineOptions:
    """How to decode: the commands' --engine, --quantize, --dtype, --device, --cuda_graphs, --ctranslate2_cache,
    --onnx_cache, --verify_cache and --trust_remote_code (`trust.check_remote_code`)."""

    engine: str = "torch"
    quantize: str = "none"
    dtype: str = "auto"
    device: str = "auto"
    cuda_graphs: bool = False
    ctranslate2_cache: Path | None = None
    onnx_cache: Path | None = None
    verify_cache: bool = False
    trust_remote_code: bool = False


def check_engine_options(options: EngineOptions) -> None:
    """Refuse, before anything is loaded, options that cannot work together or on this machine (ValueError
    naming the fix)."""
    _check_choice("--engine", options.engine, ENGINES)
    _check_choice("--quantize", options.quantize, QUANTIZATIONS)
    _check_choice("--dtype", options.dtype, ("auto", *DTYPES))
    if options.cuda_graphs and options.engine != "torch":
        raise ValueError(
            f"--cuda_graphs compiles the PyTorch model's decoding step, not --engine {options.engine}'s: drop "
            "--cuda_graphs, or use --engine torch."
        )
    if options.ctranslate2_cache is not None and options.engine != "ctranslate2":
        raise ValueError("--ctranslate2_cache is the folder of --engine ctranslate2's conversions: drop it.")
    if options.onnx_cache is not None and options.engine != "onnxruntime":
        raise ValueError("--onnx_cache is the folder of --engine onnxruntime's exports: drop it.")
    if options.verify_cache and options.engine == "torch":
        raise ValueError(
            "--verify_cache checks the caches of --engine ctranslate2 and onnxruntime: drop it (or choose one)."
        )
    for flag, cache in (
        ("--ctranslate2_cache", options.ctranslate2_cache),
        ("--onnx_cache", options.onnx_cache),
    ):
        if cache is not None:
            check_cache_folder(flag, cache)
    if options.engine == "torch":
        _check_torch_options(options)
    elif options.engine == "onnxruntime":
        _check_onnxruntime_options(options)
    else:
        _check_ctranslate2_options(options)


def _check_choice(flag: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{flag} {value}: choose one of {', '.join(choices)}.")


def check_device(device: str, cuda_count: int, *, mps: bool = False) -> None:
    """--device names a device this machine has: auto, cpu, cuda, cuda:N below `cuda_count`, or mps where
    Apple's GPU is there; else a ValueError saying what it has (torch would raise a RuntimeError only once the
    model moves there)."""
    cuda = ["cuda", *(f"cuda:{index}" for index in range(cuda_count))] if cuda_count else []
    if device in ("auto", "cpu", *cuda, *(["mps"] if mps else [])):
        return
    has = ["cpu"]
    if cuda_count:
        has.append(f"cuda (cuda:0..{cuda_count - 1})" if cuda_count > 1 else "cuda (cuda:0)")
    if mps:
        has.append("mps")
    if len(has) == 1:
        raise ValueError(
            f"--device {device}: this machine has only cpu (no CUDA GPU): use --device cpu or auto."
        )
    raise ValueError(
        f"--device {device}: this machine has {', '.join(has[:-1])} and {has[-1]}: give one of them, or auto."
    )


def _check_torch_options(options: EngineOptions) -> None:
    import torch

    check_device(options.device, torch.cuda.device_count(), mps=torch.backends.mps.is_available())
    device = torch_device(options.device)
    if options.cuda_graphs:
        _check_cuda_graphs_options(options, device)
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
    if missing_modules("int8"):
        from .quantization import INT8_EXTRA

        raise ValueError(f"--quantize int8 with --engine torch needs torchao: {INT8_EXTRA}.")


def _check_cuda_graphs_options(options: EngineOptions, device: str) -> None:
    if options.quantize != "none":
        raise ValueError(
            "--cuda_graphs compiles float layers on a GPU; --quantize int8 runs on the CPU: drop one of them."
        )
    if not device.startswith("cuda"):
        where = "this machine has no CUDA GPU" if options.device == "auto" else f"--device {options.device}"
        raise ValueError(
            f"--cuda_graphs replays the decoding step as CUDA graphs, on a CUDA GPU ({where}): drop --cuda_graphs, "
            "or use --device cuda on a machine with one."
        )


def _check_onnxruntime_options(options: EngineOptions) -> None:
    if options.device not in ("auto", "cpu"):
        raise ValueError(f"--engine onnxruntime runs on the CPU, not {options.device}: drop --device.")
    if options.quantize != "none":
        raise ValueError(
            "--engine onnxruntime decodes in float32: for int8 use --engine ctranslate2 --quantize int8."
        )
    if options.dtype not in ("auto", "float32"):
        raise ValueError(f"--engine onnxruntime decodes in float32, not {options.dtype}: drop --dtype.")
    if missing := missing_modules("onnx"):
        raise ValueError(f"--engine onnxruntime needs {', '.join(missing)}: {install_command('onnx')}.")


def _check_ctranslate2_options(options: EngineOptions) -> None:
    if missing_modules("ctranslate2"):
        raise ValueError(f"--engine ctranslate2 needs CTranslate2: {CTRANSLATE2_EXTRA}.")
    import ctranslate2

    from .ctranslate2_cuda import cublas_12_problem

    _check_ctranslate2_sees_the_gpu(options.device, ctranslate2.get_cuda_device_count())
    check_device(options.device, ctranslate2.get_cuda_device_count())  # what CTranslate2 sees, no mps
    device, _ = ctranslate2_device(options.device)
    if device == "cuda" and (problem := cublas_12_problem(options.device)):
        raise ValueError(problem)
    compute_type = ctranslate2_compute_type(options.quantize, options.dtype, device)
    supported = sorted(ctranslate2.get_supported_compute_types(device))
    if compute_type not in supported:
        raise ValueError(
            f"CTranslate2 cannot compute in {compute_type} on this {device} (it can: {', '.join(supported)}): "
            "use --dtype auto."
        )


def _check_ctranslate2_sees_the_gpu(device: str, ctranslate2_count: int) -> None:
    """--device cuda where PyTorch sees a GPU but CTranslate2 none: its wheels run CUDA 12 code, which needs a
    driver of CUDA 12 or newer (check_device would say the machine has no GPU)."""
    import torch

    torch_count = torch.cuda.device_count()
    if device.startswith("cuda") and not ctranslate2_count and torch_count:
        raise ValueError(
            f"--device {device}: CTranslate2 sees no CUDA GPU where PyTorch sees {torch_count}: its wheels run "
            "CUDA 12 code and need an NVIDIA driver for CUDA 12 or newer (nvidia-smi shows the driver's CUDA "
            "version); or use --device cpu, or --engine torch."
        )


def torch_device(device: str) -> str:
    """--device for PyTorch: "auto" is cuda when there is a GPU, else cpu."""
    if device == "auto":
        import torch

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


def check_max_positions(max_positions: int, name: str = "max_positions") -> None:
    """Between 1 and MAX_EXPORT_POSITIONS (ValueError): the export holds a max_positions × d_model table per stack,
    made in memory first (10^8 positions asked for 25.6 GB)."""
    if not 1 <= max_positions <= MAX_EXPORT_POSITIONS:
        raise ValueError(
            f"{name} {max_positions:,}: give 1 to {MAX_EXPORT_POSITIONS:,} tokens (the longest sentence, "
            "source and output; the default 1,024 is the model's own position table)."
        )
