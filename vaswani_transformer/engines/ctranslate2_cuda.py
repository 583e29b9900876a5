"""CTranslate2 on a CUDA GPU: the libraries its wheels load at run time, found or refused before anything loads.

CTranslate2's Linux wheels are built for CUDA 12: the CUDA runtime is linked in, and cuBLAS 12 is opened by name
(`libcublas.so.12`) the first time a batch is decoded. A machine whose CUDA is newer (the driver runs CUDA 12
code, but PyTorch cu130 brings cuBLAS 13) has no `libcublas.so.12`, and CTranslate2 would fail only once decoding
starts. The supported route is cuBLAS 12 from PyPI (`pip install nvidia-cublas-cu12`, installed beside cuBLAS 13
without touching it): this module opens it from there by its full path, after which CTranslate2's own open by
name finds the library already loaded (the dynamic loader matches it by its soname), with no LD_LIBRARY_PATH to
set before Python starts. Without it, the options are refused naming that fix.
"""

import ctypes
import importlib.util
import sys
from pathlib import Path

# Loaded in this order: libcublas.so.12 needs libcublasLt.so.12 (the wheel's RUNPATH finds it; preloading it first
# also covers a copy without one).
CUBLAS_12 = ("libcublasLt.so.12", "libcublas.so.12")
CUBLAS_12_PIP = "nvidia-cublas-cu12"
# The message CTranslate2 raises when it cannot open a library it needs on the GPU.
LIBRARY_NOT_LOADED = "is not found or cannot be loaded"


def cuda_fix(device: str) -> str:
    """What makes `--engine ctranslate2 --device DEVICE` work on a machine without cuBLAS 12."""
    return (
        f"install cuBLAS for CUDA 12, which CTranslate2's wheels load on the GPU: pip install {CUBLAS_12_PIP} "
        "(found there by itself; a CUDA 12 toolkit's lib64 folder on LD_LIBRARY_PATH works too), or decode on "
        f"the CPU (--device cpu instead of --device {device})"
    )


def pip_cublas_12_folders() -> list[Path]:
    """The folders of the nvidia-cublas-cu12 wheel (`nvidia/cublas/lib` in each place the `nvidia` namespace
    package lives) that hold libcublas.so.12."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    folders = (Path(location) / "cublas" / "lib" for location in spec.submodule_search_locations)
    return [folder for folder in folders if (folder / CUBLAS_12[-1]).is_file()]


def _loads(name: str) -> bool:
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    return True


def cublas_12_problem(device: str) -> str | None:
    """None when cuBLAS 12 is loaded in this process (found by name as CTranslate2 looks for it, or opened from
    the pip wheel's folder); otherwise why not and the fix. Only Linux is checked: elsewhere CTranslate2's own
    error at the first batch is turned into the same message (`library_error`)."""
    if not sys.platform.startswith("linux") or all(_loads(name) for name in CUBLAS_12):
        return None
    for folder in pip_cublas_12_folders():
        if all(_loads(str(folder / name)) for name in CUBLAS_12):
            return None
    return f"--engine ctranslate2 --device {device} cannot load {CUBLAS_12[-1]}: {cuda_fix(device)}."


def library_error(error: RuntimeError, device: str) -> ValueError | None:
    """CTranslate2's failure to open a GPU library, as a ValueError naming the fix; None for other errors."""
    if LIBRARY_NOT_LOADED not in str(error):
        return None
    return ValueError(f"CTranslate2 on {device}: {error}: {cuda_fix(device)}.")
