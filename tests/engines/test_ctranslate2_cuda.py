"""CTranslate2 on CUDA: its wheels load cuBLAS 12 by name at the first batch on a GPU; the package opens
it from the nvidia-cublas-cu12 wheel itself, or refuses --engine ctranslate2 --device cuda before loading anything,
naming the fix. On the CPU machine CTranslate2's GPU count is stood in for; the real thing is the gpu test."""

import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.cli import evaluate as evaluate_cli
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.engines import EngineOptions, ctranslate2_cuda, load_engine
from vaswani_transformer.engines.ctranslate2_cuda import CUBLAS_12, library_error
from vaswani_transformer.engines.ctranslate2_engine import CTranslate2Translator
from vaswani_transformer.engines.ctranslate2_export import to_ctranslate2

# `.[dev]` installs it (so CI always has it); the lent GPU machine's image does not, and `pytest -m gpu` there
# must still collect the other GPU tests
ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="needs the ctranslate2 extra: pip install -e '.[ctranslate2]'"
)

REPO = Path(__file__).resolve().parents[2]


def run_command(command, argv: list[str], capsys) -> tuple[int, str]:
    try:
        status = command.main(argv)
    except SystemExit as exit_:  # argparse's own errors
        status = exit_.code
    return status, capsys.readouterr().err


@pytest.fixture
def a_gpu_without_cublas_12(monkeypatch) -> None:
    """A machine whose GPU CTranslate2 sees (its CUDA 12 runtime runs on a newer driver) without cuBLAS 12: not
    on the library path, no nvidia-cublas-cu12 wheel."""
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    monkeypatch.setattr(ctranslate2, "get_supported_compute_types", lambda device: {"float32", "bfloat16"})
    real_loads = ctranslate2_cuda._loads
    monkeypatch.setattr(ctranslate2_cuda, "_loads", lambda name: "cublas" not in name and real_loads(name))
    monkeypatch.setattr(ctranslate2_cuda, "pip_cublas_12_folders", list)


@pytest.mark.parametrize("command", [translate_cli, evaluate_cli])
@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_ctranslate2_on_a_gpu_without_cublas_12_is_refused_before_loading(
    command, device, a_gpu_without_cublas_12, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("I love you.\n"))
    sources = tmp_path / "in.en"
    sources.write_text("I love you.\n")
    argv = [str(tmp_path / "no-model"), "--engine", "ctranslate2", "--device", device]
    argv += ["--ctranslate2_cache", str(tmp_path / "cache")]
    if command is evaluate_cli:
        argv += ["--source", str(sources), "--references", str(sources), "--name", "x"]
    status, err = run_command(command, argv, capsys)
    assert status == 2
    assert f"--engine ctranslate2 --device {device} cannot load libcublas.so.12" in err
    assert "pip install nvidia-cublas-cu12" in err and f"--device cpu instead of --device {device}" in err
    assert "Traceback" not in err and "no such model folder" not in err  # refused before the model loads
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.en"]  # no cache made, nothing written


def test_the_python_translator_on_a_gpu_without_cublas_12_names_the_fix(
    a_gpu_without_cublas_12, tmp_path
) -> None:
    with pytest.raises(ValueError, match="cannot load libcublas.so.12: install cuBLAS for CUDA 12"):
        CTranslate2Translator(tmp_path / "not-read", device="cuda")  # refused before the folder is read


def test_a_gpu_ctranslate2_cannot_see_is_named_as_a_driver_problem(monkeypatch, tmp_path, capsys) -> None:
    """PyTorch sees a GPU, CTranslate2's CUDA 12 runtime none (a driver older than CUDA 12): not "no GPU here"."""
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    argv = [str(tmp_path / "no-model"), "--engine", "ctranslate2", "--device", "cuda:1"]
    status, err = run_command(translate_cli, argv, capsys)
    assert status == 2
    assert "--device cuda:1: CTranslate2 sees no CUDA GPU where PyTorch sees 2" in err
    assert "NVIDIA driver for CUDA 12 or newer" in err and "Traceback" not in err


def test_the_cpu_needs_no_cuda_library(a_gpu_without_cublas_12, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    argv = [str(tmp_path / "no-model"), "--engine", "ctranslate2", "--device", "cpu"]
    status, err = run_command(translate_cli, argv, capsys)
    assert status == 2 and "no-model" in err and "cublas" not in err  # past the checks, to the missing model


def test_ctranslate2s_library_error_at_the_first_batch_names_the_fix() -> None:
    """Where the check cannot look first (not Linux), the error CTranslate2 raises on opening cuBLAS is turned
    into the same advice; other errors are left alone."""
    missing = RuntimeError("Library cublas64_12.dll is not found or cannot be loaded")
    problem = library_error(missing, "cuda")
    assert isinstance(problem, ValueError)
    assert str(problem).startswith("CTranslate2 on cuda: Library cublas64_12.dll is not found")
    assert "pip install nvidia-cublas-cu12" in str(problem)
    assert library_error(RuntimeError("CUDA failed with error out of memory"), "cuda") is None


def fake_library(folder: Path, soname: str) -> None:
    """A real shared library named and with the soname of a cuBLAS 12 file (built with the C compiler)."""
    source = folder / f"{soname}.c"
    source.write_text(f"int which_library(void) {{ return {len(soname)}; }}\n")
    subprocess.run(
        ["cc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(folder / soname), str(source)],
        check=True,
    )


@pytest.mark.slow  # a fresh interpreter
def test_cublas_12_is_opened_from_the_pip_wheel_and_then_found_by_name(tmp_path) -> None:
    """The nvidia-cublas-cu12 wheel's layout (site-packages/nvidia/cublas/lib), with stand-in libraries: the
    check opens them by path, after which opening `libcublas.so.12` by name, as CTranslate2 does, finds the one
    loaded (a fresh interpreter: the process keeps what it loads)."""
    wheel = tmp_path / "site" / "nvidia" / "cublas" / "lib"
    wheel.mkdir(parents=True)
    for soname in CUBLAS_12:
        fake_library(wheel, soname)
    probe = textwrap.dedent(
        f"""
        import ctypes
        from vaswani_transformer.engines.ctranslate2_cuda import cublas_12_problem, pip_cublas_12_folders
        try:
            ctypes.CDLL("libcublas.so.12")
            raise SystemExit("libcublas.so.12 is on this machine's library path: the wheel's is not needed")
        except OSError:
            pass
        assert pip_cublas_12_folders()[0] == __import__("pathlib").Path({str(wheel)!r}), pip_cublas_12_folders()
        assert cublas_12_problem("cuda") is None
        assert ctypes.CDLL("libcublas.so.12").which_library() == len("libcublas.so.12")
        maps = open("/proc/self/maps").read()
        assert {str(wheel / CUBLAS_12[-1])!r} in maps and {str(wheel / CUBLAS_12[0])!r} in maps
        print("found by name")
        """
    )
    path = f"{tmp_path / 'site'}:{REPO}"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env={"PYTHONPATH": path, "PATH": ""}
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.strip() == "found by name"


def random_letter_model(folder: Path, tokenizer) -> Path:
    """A tiny model with large random weights over the letter tokenizer, saved: distinct, non-empty outputs."""
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), init_std=1.0))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


LETTERS = ["a b c", "h e l l o", "z y x w v u", "q"]


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (`pytest -m gpu` on the GPU machine)"
)
def test_ctranslate2_decodes_on_the_gpu_as_on_the_cpu(letter_tokenizer, tmp_path) -> None:
    """The real thing: --engine ctranslate2 --device cuda passes its checks (with nvidia-cublas-cu12 installed
    where the machine's CUDA is newer than 12) and decodes greedy float32 as on the CPU."""
    problem = ctranslate2_cuda.cublas_12_problem("cuda")
    assert problem is None, problem
    model = random_letter_model(tmp_path / "model", letter_tokenizer)
    folder = to_ctranslate2(model, tmp_path / "ct2")
    on_cpu = CTranslate2Translator(folder).translate(LETTERS, beam_size=1)
    assert len(set(on_cpu)) > 1
    on_gpu = CTranslate2Translator(folder, device="cuda", compute_type="float32")
    assert on_gpu.translate(LETTERS, beam_size=1) == on_cpu
    options = EngineOptions(engine="ctranslate2", device="cuda", ctranslate2_cache=tmp_path / "cache")
    engine = load_engine(model, options)
    assert engine.decoding_settings()["dtype"].startswith("bfloat16")
    assert len(engine.translate(LETTERS)) == len(LETTERS)
