"""A command's normal run shows this package's lines, not the libraries' progress bars and warnings
(transformers' "Loading weights" bar, its tokenizer's "indexing errors" beside our "cut to 1,024", torch.onnx's
"torchvision is not installed" notes, torchao's and torch's import warnings); --verbose shows them. Each test runs
the installed entry point in a process of its own, as a user's shell does."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration

REPO = Path(__file__).resolve().parents[1]
# What the libraries print that no normal run may show
LIBRARY_NOISE = (
    "Loading weights",
    "indexing errors",
    "torchvision is not installed",
    "Failed to load",
    "_pytree",
    "it/s]",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, letter_tokenizer) -> Path:
    """A tiny model with a tokenizer that knows its model's length (1,024 positions), as trained ones do."""
    folder = tmp_path_factory.mktemp("quiet") / "model"
    torch.manual_seed(0)
    VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=30)).save_pretrained(folder)
    letter_tokenizer.model_max_length = 1024
    letter_tokenizer.save_pretrained(folder)
    return folder


def run_command(name: str, *arguments: str, text: str = "") -> subprocess.CompletedProcess:
    """`vaswani-NAME ARGUMENTS < text`, through the console script's entry point."""
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    script = f"import sys, vaswani_transformer.cli.command as c; sys.exit(c.{name}())"
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        input=text,
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )


def noise_in(stderr: str) -> list[str]:
    return [noise for noise in LIBRARY_NOISE if noise in stderr]


@pytest.mark.slow  # commands in fresh interpreters, with and without --verbose
def test_translate_shows_only_its_own_lines_and_the_libraries_with_verbose(model_dir) -> None:
    long_line = " ".join("abc" * 400)  # 1,200 words: more than the model's 1,024 positions
    text = f"a b c\n{long_line}\n"
    flags = [
        str(model_dir),
        "--num_beams",
        "1",
        "--dtype",
        "float32",
        "--device",
        "cpu",
        "--buffer_lines",
        "2",
    ]
    quiet = run_command("translate", *flags, text=text)
    assert quiet.returncode == 0, quiet.stderr
    assert len(quiet.stdout.splitlines()) == 2
    assert "were cut to 1,024" in quiet.stderr  # the package's own warning stays
    assert noise_in(quiet.stderr) == [], quiet.stderr
    verbose = run_command("translate", *flags, "--verbose", text=text)
    assert verbose.returncode == 0, verbose.stderr
    assert verbose.stdout == quiet.stdout
    assert "Loading weights" in verbose.stderr and "indexing errors" not in verbose.stderr


@pytest.mark.slow  # commands in fresh interpreters
def test_a_refused_combination_is_one_line_without_the_usage_block(model_dir) -> None:
    refused = run_command("translate", str(model_dir), "--cuda_graphs", "--engine", "ctranslate2")
    assert refused.returncode == 2
    assert "usage:" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "vaswani-translate: error: --cuda_graphs compiles the PyTorch model's decoding step, not --engine "
        "ctranslate2's: drop --cuda_graphs, or use --engine torch."
    ]


@pytest.mark.slow  # a command in a fresh interpreter
def test_a_command_that_loaded_torch_ends_on_its_own_line_without_torchs_lines_at_exit() -> None:
    """torch logs fake-tensor cache statistics at INFO when the interpreter exits, after a command has given the
    libraries' loggers their levels back: the package's INFO lines must not open that door for them."""
    refused = run_command("prepare", "--no_such_option", "x")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "error: Some specified arguments are not used by the HfArgumentParser: ['--no_such_option', 'x']"
    ]


@pytest.mark.slow  # exports the model to ONNX (dynamo): seconds to a minute
def test_the_first_onnx_use_says_it_converts_and_where_it_caches_without_torchs_notes(
    model_dir, tmp_path
) -> None:
    cache = tmp_path / "onnx"
    flags = [str(model_dir), "--engine", "onnxruntime", "--onnx_cache", str(cache), "--num_beams", "1"]
    first = run_command("translate", *flags, text="a b c\n")
    assert first.returncode == 0, first.stderr
    (entry,) = [path for path in cache.iterdir() if path.is_dir()]
    assert (
        f"converting the model for onnx, once: cached in {entry} (another folder: --onnx_cache)"
        in first.stderr
    )
    assert noise_in(first.stderr) == [], first.stderr
    again = run_command("translate", *flags, text="a b c\n")
    assert again.stdout == first.stdout and "converting" not in again.stderr
