"""ONNX export (encoder, cross-attention, decoder step with past) and the ONNX Runtime engine: the graphs give the
PyTorch model's logits at any batch and length, generate() over them gives its tokens (greedy and beam 4), and
`vaswani-translate --engine onnxruntime` exports once into its cache and translates as PyTorch in float32."""

import io
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import constants

from tests.conftest import SENTENCES, save_random_model
from vaswani_transformer.cli import export as export_cli
from vaswani_transformer.cli import export_onnx as export_onnx_cli
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.decoding.engine import Engine
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.engines import EngineOptions, load_engine, onnx_export
from vaswani_transformer.engines.onnx_export import GRAPHS, cached_onnx_export, to_onnx
from vaswani_transformer.engines.onnx_runtime import OnnxRuntimeEngine, load_onnx_model
from vaswani_transformer.evaluation import load_for_decoding

pytestmark = pytest.mark.slow  # every test exports a model to ONNX (dynamo): seconds each


@pytest.fixture(scope="module")
def model_dir(trained_run, tmp_path_factory) -> Path:
    """Random weights on the miniature's architecture: distinct, non-empty translations (conftest)."""
    return save_random_model(trained_run.model_dir, tmp_path_factory.mktemp("onnx") / "model")


@pytest.fixture(scope="module")
def exported(model_dir, tmp_path_factory) -> Path:
    return to_onnx(model_dir, tmp_path_factory.mktemp("onnx") / "export")


@pytest.fixture(scope="module")
def pytorch(model_dir):
    return load_for_decoding(model_dir, device="cpu", dtype=torch.float32)


def test_export_folder_holds_graphs_tokenizer_and_decoding(exported, pytorch) -> None:
    assert all((exported / graph).is_file() for graph in GRAPHS)
    model, tokenizer = load_onnx_model(exported)
    assert model.generation_config.num_beams == pytorch[0].generation_config.num_beams
    assert model.generation_config.length_penalty == pytorch[0].generation_config.length_penalty
    assert tokenizer(SENTENCES[0]).input_ids == pytorch[1](SENTENCES[0]).input_ids
    assert sum(parameter.numel() for parameter in model.parameters()) == 0  # the weights live in the graphs


@pytest.mark.parametrize(("sentences", "target_length"), [(1, 3), (5, 7), (2, 1)])
def test_graphs_give_the_models_logits_at_any_batch_and_length(
    exported, pytorch, sentences, target_length
) -> None:
    model, tokenizer = pytorch
    onnx_model, _ = load_onnx_model(exported)
    batch = tokenizer(SENTENCES[:sentences], return_tensors="pt", padding=True)
    generator = torch.Generator().manual_seed(sentences)
    decoder_input_ids = torch.randint(
        4, model.config.vocab_size, (sentences, target_length), generator=generator
    )
    with torch.no_grad():
        expected = model(**batch, decoder_input_ids=decoder_input_ids).logits
        got = onnx_model(**batch, decoder_input_ids=decoder_input_ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("num_beams", "use_cache"), [(1, True), (4, True), (4, False)])
def test_generate_over_the_graphs_gives_pytorchs_tokens(exported, pytorch, num_beams, use_cache) -> None:
    """With the cache, each step feeds one token and the keys/values so far; without, the whole prefix."""
    model, tokenizer = pytorch
    onnx_model, _ = load_onnx_model(exported)
    batch = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        expected = model.generate(**batch, num_beams=num_beams, use_cache=use_cache)
        got = onnx_model.generate(**batch, num_beams=num_beams, use_cache=use_cache)
    assert len({tuple(row.tolist()) for row in expected}) == len(
        SENTENCES
    )  # distinct: equality means something
    assert torch.equal(got, expected)


def test_translate_over_the_graphs_equals_float32_pytorch(exported, pytorch) -> None:
    onnx_model, tokenizer = load_onnx_model(exported)
    expected = translate(SENTENCES, *pytorch, batch_size=3, dtype=torch.float32)
    assert translate(SENTENCES, onnx_model, tokenizer, batch_size=3, dtype=torch.float32) == expected


@pytest.mark.parametrize(
    "settings", [{"num_beams": 1, "max_new_tokens": 3}, {"num_beams": 3, "length_penalty": 1.0}], ids=str
)
def test_onnx_engine_takes_translates_decoding_names(exported, pytorch, settings) -> None:
    """Every engine's translate takes num_beams, length_penalty and max_new_tokens."""
    expected = translate(SENTENCES, *pytorch, dtype=torch.float32, **settings)
    assert OnnxRuntimeEngine(*load_onnx_model(exported)).translate(SENTENCES, **settings) == expected


def run_translate(monkeypatch, capsys, text: str, *argv: str) -> list[str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8"))
    assert translate_cli.main(list(argv)) == 0
    return capsys.readouterr().out.split("\n")[:-1]


def test_translate_command_exports_once_and_matches_torch(model_dir, tmp_path, monkeypatch, capsys) -> None:
    exports: list[Path] = []
    write = onnx_export._write_export
    monkeypatch.setattr(onnx_export, "_write_export", lambda *a: (exports.append(a[2]), write(*a))[1])
    text = "\n".join([SENTENCES[0], "", *SENTENCES[1:]]) + "\n"
    cache = tmp_path / "cache"
    torch_lines = run_translate(monkeypatch, capsys, text, str(model_dir), "--dtype", "float32")
    onnx_args = (str(model_dir), "--engine", "onnxruntime", "--onnx_cache", str(cache))
    assert run_translate(monkeypatch, capsys, text, *onnx_args) == torch_lines
    assert torch_lines[1] == "" and len(exports) == 1
    assert run_translate(monkeypatch, capsys, text, *onnx_args) == torch_lines
    assert len(exports) == 1  # the second run reused the cached export
    assert cached_onnx_export(model_dir, cache) in cache.iterdir()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--engine", "onnxruntime", "--quantize", "int8"], "--engine ctranslate2 --quantize int8"),
        (["--engine", "onnxruntime", "--dtype", "bfloat16"], "decodes in float32"),
        (["--engine", "onnxruntime", "--device", "cuda"], "runs on the CPU"),
        (["--onnx_cache", "somewhere"], "--onnx_cache is the folder of --engine onnxruntime"),
    ],
)
def test_translate_refuses_what_the_onnx_engine_cannot_do(model_dir, capsys, flags, message) -> None:
    with pytest.raises(SystemExit) as stopped:
        translate_cli.parse_args([str(model_dir), *flags])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_export_command_refuses_a_folder_in_use_and_changes_nothing(model_dir, tmp_path, capsys) -> None:
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    assert export_onnx_cli.main([str(model_dir), str(output)]) == 2
    assert "is not empty" in capsys.readouterr().err
    assert [path.name for path in output.iterdir()] == ["keep.txt"]
    assert list(tmp_path.iterdir()) == [output]  # no temporary folder left beside it


def test_onnx_engine_records_itself_and_float32_for_scores_json(model_dir, tmp_path) -> None:
    engine = load_engine(model_dir, EngineOptions(engine="onnxruntime", onnx_cache=tmp_path / "cache"))
    assert isinstance(engine, Engine) and engine.name == "onnxruntime"
    settings = engine.decoding_settings(num_beams=2)
    assert settings["engine"] == "onnxruntime" and settings["dtype"] == "float32"
    assert settings["num_beams"] == 2 and settings["length_penalty_type"] == "gnmt"


def test_export_overwrite_replaces_its_files_and_keeps_the_rest(model_dir, tmp_path, capsys) -> None:
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    (output / "decoder.onnx").write_text("stale")
    assert export_onnx_cli.main([str(model_dir), str(output), "--overwrite"]) == 0
    assert capsys.readouterr().out.strip() == str(output)
    assert (output / "keep.txt").read_text() == "mine"
    assert all((output / graph).stat().st_size > 1000 for graph in GRAPHS)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]  # no temporary folder left


def test_export_command_refuses_a_file_as_output(model_dir, tmp_path, capsys) -> None:
    target = tmp_path / "model.onnx"
    target.write_text("mine")
    assert export_onnx_cli.main([str(model_dir), str(target)]) == 2
    assert "is a file" in capsys.readouterr().err and target.read_text() == "mine"


@pytest.mark.parametrize("command", [export_onnx_cli, export_cli])
def test_export_commands_refuse_a_model_they_cannot_load(command, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # a Hub id that is not cached: fails at once
    monkeypatch.chdir(tmp_path)
    assert command.main(["someone/no-such-model", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "someone/no-such-model" in error and "Traceback" not in error
    assert list(tmp_path.iterdir()) == []  # nothing written
