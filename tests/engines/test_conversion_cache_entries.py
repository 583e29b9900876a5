"""The engines' caches prove their entries before reuse, and every export is all or nothing: a cut
model.bin or decoder.onnx, a broken decoding.json or an empty tokenizer.json is found and converted anew with a
warning naming the file; an export the machine refuses to write leaves no partial folder and names the path."""

import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SENTENCES, save_random_model
from vaswani_transformer.engines import EngineOptions, ctranslate2_cache, load_engine
from vaswani_transformer.engines.ctranslate2_cache import cached_export
from vaswani_transformer.engines.ctranslate2_engine import CTranslate2Translator
from vaswani_transformer.engines.ctranslate2_export import to_ctranslate2
from vaswani_transformer.engines.onnx_export import cached_onnx_export
from vaswani_transformer.engines.onnx_runtime import load_onnx_model
from vaswani_transformer.files import manifests


@pytest.fixture(scope="module")
def model_dir(trained_run, tmp_path_factory) -> Path:
    """Random weights on the miniature's architecture: distinct, non-empty translations (conftest)."""
    return save_random_model(trained_run.model_dir, tmp_path_factory.mktemp("cache-entries") / "model")


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


CTRANSLATE2_DAMAGES = {
    "model.bin": truncate,
    "decoding.json": lambda path: path.write_text('{"beam_size": 4,\n'),
    "tokenizer.json": lambda path: path.write_bytes(b""),
}


@pytest.mark.slow  # converts the model three times
def test_a_damaged_ctranslate2_conversion_is_converted_anew_naming_the_file(
    model_dir, tmp_path, caplog, monkeypatch
) -> None:
    cache = tmp_path / "cache"
    folder = cached_export(model_dir, cache_dir=cache)
    expected = CTranslate2Translator(folder).translate(SENTENCES)
    conversions: list[Path] = []
    monkeypatch.setattr(
        ctranslate2_cache,
        "to_ctranslate2",
        lambda model, output, **kw: (conversions.append(output), to_ctranslate2(model, output, **kw))[1],
    )
    assert (
        cached_export(model_dir, cache_dir=cache) == folder and conversions == []
    )  # a whole entry is reused
    for name, damage in CTRANSLATE2_DAMAGES.items():
        damage(folder / name)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            assert cached_export(model_dir, cache_dir=cache) == folder
        assert f"warning: {folder / name}" in caplog.text and f"rebuilding {folder}" in caplog.text, name
        assert CTranslate2Translator(folder).translate(SENTENCES) == expected
    assert len(conversions) == len(CTRANSLATE2_DAMAGES)
    assert sorted(path.name for path in cache.iterdir()) == sorted([folder.name, f"{folder.name}.lock"])


def test_verify_cache_checks_the_content_of_large_files(model_dir, tmp_path, caplog, monkeypatch) -> None:
    cache = tmp_path / "cache"
    folder = cached_export(model_dir, cache_dir=cache)
    model = folder / "model.bin"
    whole = model.read_bytes()
    monkeypatch.setattr(manifests, "HASH_ALWAYS_BYTES", 0)  # every file counts as large: checked by size
    model.write_bytes(bytes([whole[0] ^ 0xFF]) + whole[1:])
    assert cached_export(model_dir, cache_dir=cache) == folder and model.read_bytes() != whole  # size only
    options = EngineOptions(engine="ctranslate2", ctranslate2_cache=cache, device="cpu", verify_cache=True)
    with caplog.at_level(logging.WARNING):
        load_engine(model_dir, options)
    assert f"warning: {model} is damaged" in caplog.text and model.read_bytes() == whole


def test_a_damaged_export_folder_is_named_with_the_fix(model_dir, tmp_path) -> None:
    """An export made by hand (no cache to rebuild it) that was damaged afterwards: an error naming the file."""
    folder = to_ctranslate2(model_dir, tmp_path / "ct2")
    for name, damage in CTRANSLATE2_DAMAGES.items():
        whole = (folder / name).read_bytes()
        damage(folder / name)
        with pytest.raises(ValueError, match=f"{folder / name}.*export the model again"):
            CTranslate2Translator(folder)
        (folder / name).write_bytes(whole)


def test_partial_folders_of_dead_conversions_are_removed_and_live_ones_stay(model_dir, tmp_path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    host = socket.gethostname()
    dead, live = cache / f".key.partial-{host}-{ended.pid}", cache / f".other.partial-{host}-{os.getpid()}"
    for partial in (dead, live):
        partial.mkdir()
        (partial / "model.bin").write_bytes(b"half")
    cached_export(model_dir, cache_dir=cache)
    assert not dead.exists() and (live / "model.bin").read_bytes() == b"half"


@pytest.mark.slow  # two ONNX exports (dynamo): seconds each
def test_a_cut_onnx_graph_in_the_cache_is_exported_anew_naming_the_file(model_dir, tmp_path, caplog) -> None:
    cache = tmp_path / "onnx"
    folder = cached_onnx_export(model_dir, cache)
    truncate(folder / "decoder.onnx")
    with pytest.raises(ValueError, match=f"{folder / 'decoder.onnx'} cannot be loaded"):
        load_onnx_model(folder)  # what decoding from it would meet
    with caplog.at_level(logging.WARNING):
        assert cached_onnx_export(model_dir, cache) == folder
    assert f"warning: {folder / 'decoder.onnx'}" in caplog.text
    model, tokenizer = load_onnx_model(folder)
    assert model.generate(**tokenizer(SENTENCES[:1], return_tensors="pt"), max_new_tokens=3).shape[0] == 1


# Runs a command with writes beyond LIMIT bytes refused (EFBIG), as a full disk would refuse them (ENOSPC).
SIZE_LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, not a signal
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from vaswani_transformer.cli import export, export_onnx, translate
command = {"export": export.main, "export-onnx": export_onnx.main, "translate": translate.main}[sys.argv[2]]
sys.exit(command(sys.argv[3:]))
"""


def run_size_limited(command: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SIZE_LIMITED, str(64 << 10), command, *arguments],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


@pytest.mark.slow  # commands in fresh interpreters; export-onnx also exports (dynamo)
@pytest.mark.parametrize("command", ["export", "export-onnx"])
def test_an_export_the_machine_refuses_leaves_nothing_and_names_the_path(
    model_dir, tmp_path, command
) -> None:
    output = tmp_path / "exports" / "out"
    output.parent.mkdir()
    run = run_size_limited(command, str(model_dir), str(output))
    assert run.returncode == 2, run.stderr
    assert f"file size limit exceeded while writing {output} (" in run.stderr
    assert "MB free there): free space or choose another OUTPUT_DIR" in run.stderr
    assert "Traceback" not in run.stderr
    assert list(output.parent.iterdir()) == []  # no partial folder, no output


@pytest.mark.slow  # a command in a fresh interpreter
def test_a_conversion_the_machine_refuses_leaves_nothing_in_the_cache(model_dir, tmp_path) -> None:
    cache = tmp_path / "cache"
    source = tmp_path / "source.txt"
    source.write_text("I love you.\n")
    flags = ["--engine", "ctranslate2", "--ctranslate2_cache", str(cache)]
    run = run_size_limited("translate", str(model_dir), str(source), *flags)
    assert run.returncode == 2, run.stderr
    assert (
        "file size limit exceeded while writing" in run.stderr
        and "choose another --ctranslate2_cache" in run.stderr
    )
    assert "Traceback" not in run.stderr
    assert [path.name for path in cache.iterdir() if not path.name.endswith(".lock")] == []
