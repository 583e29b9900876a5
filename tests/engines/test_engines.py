"""Decoding engines: --engine ctranslate2 (cached conversion) and --quantize int8 in vaswani-translate and
vaswani-evaluate, and the option combinations they refuse."""

import importlib.util
import io
import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import SENTENCES, save_random_model
from vaswani_transformer import precision as precision
from vaswani_transformer.cli import evaluate as evaluate_cli
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.decoding.engine import Engine
from vaswani_transformer.engines import EngineOptions, ctranslate2_cache, load_engine
from vaswani_transformer.engines import load as engine_loading
from vaswani_transformer.engines.conversion_cache import CACHE_RECORD
from vaswani_transformer.engines.ctranslate2_cache import cached_export
from vaswani_transformer.engines.ctranslate2_engine import CTranslate2Translator
from vaswani_transformer.engines.ctranslate2_export import DECODING_FILE, to_ctranslate2
from vaswani_transformer.engines.quantization import int8_linear_layers, quantize_int8
from vaswani_transformer.evaluation import load_for_decoding
from vaswani_transformer.extras import install_command


@pytest.fixture(scope="module")
def model_dir(trained_run, tmp_path_factory) -> Path:
    """Random weights on the miniature's architecture (conftest.save_random_model): distinct, non-empty
    translations, so equal outputs mean something."""
    return save_random_model(trained_run.model_dir, tmp_path_factory.mktemp("engines") / "model")


@pytest.fixture
def conversions(monkeypatch) -> list[Path]:
    """The output folders of every CTranslate2 conversion made during the test."""
    made: list[Path] = []

    def counting(model, output_dir, **options):
        made.append(Path(output_dir))
        return to_ctranslate2(model, output_dir, **options)

    monkeypatch.setattr(ctranslate2_cache, "to_ctranslate2", counting)
    return made


def run_translate(monkeypatch, capsys, text: str, *argv: str) -> tuple[list[str], str]:
    """vaswani-translate on `text` as standard input: (output lines, standard error)."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8"))
    assert translate_cli.main(list(argv)) == 0
    captured = capsys.readouterr()
    assert captured.out.endswith("\n")
    return captured.out.split("\n")[:-1], captured.err


def test_ctranslate2_engine_translates_as_the_export_and_keeps_blank_lines(
    model_dir, tmp_path, monkeypatch, capsys
) -> None:
    exported = CTranslate2Translator(to_ctranslate2(model_dir, tmp_path / "ct2"))
    expected = exported.translate(SENTENCES, batch_size=2)
    assert len(set(expected)) == len(SENTENCES) and all(expected)  # distinct, non-empty translations
    text = "\n".join([SENTENCES[0], "", *SENTENCES[1:3], "  ", *SENTENCES[3:]]) + "\n"
    cache = tmp_path / "cache"
    engine = ["--engine", "ctranslate2", "--ctranslate2_cache", str(cache), "--batch_size", "2"]
    engine += [
        "--buffer_lines",
        "100",
    ]  # one buffer, so the batches are the export's own (not the first's one)
    lines, err = run_translate(monkeypatch, capsys, text, str(model_dir), *engine)
    assert lines == [expected[0], "", *expected[1:3], "", *expected[3:]]
    assert "translating" in err  # progress on standard error, as with PyTorch
    greedy = exported.translate(SENTENCES, beam_size=1, batch_size=2)
    lines, _ = run_translate(monkeypatch, capsys, text, str(model_dir), *engine, "--num-beams", "1")
    assert lines == [greedy[0], "", *greedy[1:3], "", *greedy[3:]]


def test_ctranslate2_greedy_engine_gives_pytorchs_float32_lines(
    model_dir, tmp_path, monkeypatch, capsys
) -> None:
    """Greedy search has no length penalty to differ in: the command's lines are PyTorch float32's."""
    text = "\n".join(SENTENCES) + "\n"
    torch_lines, _ = run_translate(
        monkeypatch, capsys, text, str(model_dir), "--num_beams", "1", "--dtype", "float32", "--device", "cpu"
    )
    cache = ["--ctranslate2-cache", str(tmp_path / "cache")]
    ct2_lines, _ = run_translate(
        monkeypatch, capsys, text, str(model_dir), "--engine", "ctranslate2", "--num_beams", "1", *cache
    )
    assert ct2_lines == torch_lines


def test_the_cache_converts_once_per_model_content_and_quantization(model_dir, tmp_path, conversions) -> None:
    cache = tmp_path / "cache"
    first = cached_export(model_dir, cache_dir=cache)
    assert cached_export(model_dir, cache_dir=cache) == first and len(conversions) == 1  # reused
    options = EngineOptions(engine="ctranslate2", ctranslate2_cache=cache, device="cpu")
    load_engine(model_dir, options).translate(SENTENCES[:1])
    assert len(conversions) == 1
    assert json.loads((first / CACHE_RECORD).read_text())["quantization"] == "float32"
    int8 = cached_export(model_dir, quantization="int8", cache_dir=cache)
    assert int8 != first and len(conversions) == 2
    # Retraining into the same folder (here: new decoding settings) makes a new export.
    changed = tmp_path / "changed"
    shutil.copytree(model_dir, changed)
    generation = json.loads((changed / "generation_config.json").read_text())
    (changed / "generation_config.json").write_text(json.dumps({**generation, "num_beams": 2}))
    other = cached_export(changed, cache_dir=cache)
    assert other not in (first, int8) and len(conversions) == 3
    assert json.loads((other / DECODING_FILE).read_text())["beam_size"] == 2
    assert not [path for path in cache.iterdir() if path.name.startswith(".")]  # no staging folder left
    assert all(path.parent == cache and path.name.startswith(".") for path in conversions)  # hidden at first


def test_a_half_written_export_is_never_used(model_dir, tmp_path, conversions, monkeypatch) -> None:
    cache = tmp_path / "cache"
    folder = cached_export(model_dir, cache_dir=cache)
    expected = CTranslate2Translator(folder).translate(SENTENCES)
    # A conversion that dies half-way leaves nothing under the export's name ...
    shutil.rmtree(folder)

    def dies(model, output_dir, **options):
        (Path(output_dir) / "model.bin").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(ctranslate2_cache, "to_ctranslate2", dies)
    with pytest.raises(KeyboardInterrupt):
        cached_export(model_dir, cache_dir=cache)
    assert not folder.exists()
    monkeypatch.undo()
    # ... and a folder under that name without its record (copied in and cut short) is replaced.
    folder.mkdir()
    (folder / "model.bin").write_bytes(b"half")
    (cache / f".{folder.name}.killed").mkdir()  # what a killed process leaves: hidden, never read
    assert cached_export(model_dir, cache_dir=cache) == folder
    assert CTranslate2Translator(folder).translate(SENTENCES) == expected


def test_int8_engine_uses_int8_layers_and_keeps_the_tied_embeddings(trained_run) -> None:
    """On the trained miniature (realistic activations): the engine's encoder and decoder compute in int8, its
    logits stay within 1% of float32's with the same argmax wherever float32's choice is clear of the error, and
    lm_head still is the float embedding table."""
    reference, tokenizer = load_for_decoding(trained_run.model_dir, device="cpu")
    engine = load_engine(trained_run.model_dir, EngineOptions(quantize="int8", dtype="float32", device="cpu"))
    model = engine.model
    linear = [n for n, m in reference.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    # 2 encoder layers × (Q, K, V, out + 2 feed-forward), 2 decoder layers × (2 × 4 attention + 2 feed-forward)
    assert int8_linear_layers(model) == linear and len(linear) == 2 * 6 + 2 * 10
    assert model.lm_head.weight is model.get_input_embeddings().weight  # still one table, float32
    assert model.lm_head.weight.dtype == torch.float32
    torch.testing.assert_close(model.lm_head.weight, reference.lm_head.weight)
    inputs = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    labels = tokenizer(text_target=SENTENCES, return_tensors="pt", padding=True)["input_ids"]
    with torch.no_grad():  # teacher-forced logits
        ours = model(**inputs, labels=labels).logits
        full = reference(**inputs, labels=labels).logits
    assert not torch.equal(ours, full)  # int8 products really ran
    assert ((ours - full).norm() / full.norm()).item() < 0.01
    # The argmax may only change where float32's best two logits are closer than twice the int8 error there.
    top2 = full.topk(2, dim=-1).values
    clear = (top2[..., 0] - top2[..., 1]) > 2 * (ours - full).abs().amax(-1)
    assert clear.float().mean() > 0.5  # most positions are clear calls
    assert torch.equal(ours.argmax(-1)[clear], full.argmax(-1)[clear])
    settings = engine.decoding_settings()
    assert settings["quantization"].startswith("int8 (torchao") and settings["dtype"] == "float32"


def test_int8_through_the_command_decodes_as_float32_on_the_trained_model(
    trained_run, monkeypatch, capsys
) -> None:
    quantized: list[torch.nn.Module] = []
    monkeypatch.setattr(
        engine_loading, "quantize_int8", lambda model: quantized.append(quantize_int8(model)) or model
    )
    text = "\n".join([SENTENCES[0], "", *SENTENCES[1:]]) + "\n"
    model = str(trained_run.model_dir)
    float32, _ = run_translate(monkeypatch, capsys, text, model, "--dtype", "float32", "--num_beams", "2")
    assert not quantized
    int8, err = run_translate(monkeypatch, capsys, text, model, "--quantize", "int8", "--num-beams", "2")
    assert len(quantized) == 1 and int8_linear_layers(quantized[0])
    assert len(int8) == len(float32) and int8[1] == "" and "translating" in err
    # int8 products round otherwise than float32's (on AMX the kernels differ again), and the miniature's near-ties
    # between two tokens may fall the other way: a line of the five may differ (one did on an AMX Xeon)
    assert sum(ours != theirs for ours, theirs in zip(int8, float32, strict=True)) <= 1


def test_quantizing_leaves_the_embedding_a_float_table_shared_with_lm_head(model_dir) -> None:
    model, tokenizer = load_for_decoding(model_dir, device="cpu")
    ids = tokenizer(SENTENCES[:2], return_tensors="pt", padding=True)["input_ids"]
    embedded = model.get_input_embeddings()(ids)
    quantize_int8(model)
    assert "lm_head" not in int8_linear_layers(model)
    torch.testing.assert_close(model.get_input_embeddings()(ids), embedded, rtol=0, atol=0)
    assert model.get_decoder().embed_tokens is model.get_encoder().embed_tokens


@pytest.mark.parametrize("command", [translate_cli, evaluate_cli])
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--quantize", "int8", "--dtype", "float16"], "use --dtype auto"),
        (["--quantize", "int8", "--dtype", "bfloat16"], "or --dtype float32"),
        (["--engine", "ctranslate2", "--dtype", "float16"], "CTranslate2 cannot compute in float16"),
        (["--engine", "ctranslate2", "--quantize", "int8", "--dtype", "float16"], "int8_float16"),
        (["--ctranslate2_cache", "cache"], "--ctranslate2_cache is the folder of --engine ctranslate2"),
        (["--num-beams", "0"], "--num_beams must be at least 1"),
        (["--engine", "onnx"], "invalid choice"),
    ],
)
def test_meaningless_combinations_exit_2_before_loading(
    command, arguments, message, tmp_path, capsys
) -> None:
    """A model that does not exist: had the command loaded anything, it would have said so instead."""
    files = [str(tmp_path / "in.en")]
    (tmp_path / "in.en").write_text("I love you.\n")
    argv = [str(tmp_path / "no-model"), *files] if command is translate_cli else [str(tmp_path / "no-model")]
    if command is evaluate_cli:
        argv += ["--source", files[0], "--references", files[0]]
    with pytest.raises(SystemExit) as exit_info:
        command.main([*argv, *arguments])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err
    assert "Traceback" not in err and "no such model folder" not in err


@pytest.mark.parametrize(
    ("missing", "arguments", "install"),
    [
        ("torchao", ["--quantize", "int8"], install_command("int8")),
        ("ctranslate2", ["--engine", "ctranslate2"], install_command("ctranslate2")),
    ],
)
def test_a_missing_engine_library_is_named_with_its_install_command(
    missing, arguments, install, monkeypatch, capsys
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == missing else find_spec(name, *a)
    )
    with pytest.raises(SystemExit) as exit_info:
        translate_cli.main(["no-model", "--device", "cpu", *arguments])
    assert exit_info.value.code == 2 and install in capsys.readouterr().err


def test_dtype_float32_keeps_float32_throughout(trained_run, monkeypatch) -> None:
    model_dir = trained_run.model_dir
    monkeypatch.setattr(precision, "cpu_bf16_decodes_faster", lambda width: True)
    auto = load_engine(model_dir, EngineOptions(device="cpu"))
    assert auto.decoding_settings()["dtype"] == "bfloat16 (autocast over float32 weights)"
    kept = load_engine(model_dir, EngineOptions(dtype="float32", device="cpu"))
    assert isinstance(kept, Engine) and kept.name == "torch"
    assert kept.dtype == torch.float32 and kept.decoding_settings()["dtype"] == "float32"
    seen: list[torch.dtype] = []
    kept.model.lm_head.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    kept.translate(SENTENCES[:2], num_beams=2)
    assert set(seen) == {torch.float32}


@pytest.mark.parametrize(
    ("arguments", "engine", "quantization", "dtype"),
    [
        (["--engine", "ctranslate2", "--quantize", "int8"], "ctranslate2", "int8", "int8"),
        (["--engine", "ctranslate2"], "ctranslate2", "none", "float32"),
        (["--quantize", "int8", "--dtype", "float32"], "torch", "int8 (torchao", "float32"),
    ],
)
def test_evaluate_records_engine_quantization_and_precision(
    trained_run, tmp_path, arguments, engine, quantization, dtype, capsys
) -> None:
    folder = tmp_path / "model"  # a copy of the trained miniature: its evaluation goes beside it
    shutil.copytree(trained_run.model_dir, folder)
    evaluation = tmp_path / "model-evaluation"
    source, references = tmp_path / "test.en", tmp_path / "test.de"
    source.write_text("\n".join(SENTENCES) + "\n")
    references.write_text("\n".join(["Ich liebe dich."] * len(SENTENCES)) + "\n")
    cache = ["--ctranslate2_cache", str(tmp_path / "cache")] if engine == "ctranslate2" else []
    argv = [str(folder), "--source", str(source), "--references", str(references), "--name", "engine"]
    assert evaluate_cli.main([*argv, "--num_beams", "2", "--batch-size", "2", *arguments, *cache]) == 0
    assert "sacreBLEU" in capsys.readouterr().out
    decoding = json.loads((evaluation / "engine_scores.json").read_text())["decoding"]
    assert decoding["engine"] == engine and decoding["quantization"].startswith(quantization)
    assert decoding["dtype"].startswith(dtype) and decoding["num_beams"] == 2
    assert decoding["length_penalty_type"] == ("hf" if engine == "ctranslate2" else "gnmt")
    hypotheses = (evaluation / "engine_hypotheses.txt").read_text().splitlines()
    options = EngineOptions(
        engine=engine,
        quantize="int8" if quantization.startswith("int8") else "none",
        dtype="float32" if engine == "torch" else "auto",
        device="cpu",
        ctranslate2_cache=tmp_path / "cache" if engine == "ctranslate2" else None,
    )
    assert hypotheses == load_engine(folder, options).translate(SENTENCES, num_beams=2, batch_size=2)


@pytest.mark.parametrize("name", ["../../escape", "/tmp/escape", "sub/dir", "..", " "])
def test_evaluate_names_are_file_names_never_paths(trained_run, tmp_path, name, capsys) -> None:
    """`--name ../../escape` must not write two levels above the model folder, nor `--name sub/dir` decode
    everything and then crash: a name that is not a plain file-name part exits 2 before anything is loaded or written."""
    source, references = tmp_path / "test.en", tmp_path / "test.de"
    source.write_text("I love you.\n")
    references.write_text("Ich liebe dich.\n")
    before = sorted(path.name for path in trained_run.model_dir.iterdir())
    argv = [str(trained_run.model_dir), "--source", str(source), "--references", str(references)]
    with pytest.raises(SystemExit) as stopped:
        evaluate_cli.main([*argv, "--name", name])
    assert stopped.value.code == 2 and "a name, not a path" in capsys.readouterr().err
    assert sorted(path.name for path in trained_run.model_dir.iterdir()) == before
    assert not list(tmp_path.rglob("*escape*")) and not Path("/tmp/escape_scores.json").exists()


def test_evaluate_prints_json_alone_with_json_and_says_which_references_it_tokenised(
    trained_run, tmp_path, capsys
) -> None:
    """stdout is never JSON and text mixed: text for a reader (saying whether tokenised BLEU used
    the test set's own tokenised references), or with --json the scores file's object alone."""
    folder = tmp_path / "model"
    shutil.copytree(trained_run.model_dir, folder)
    source, references, tokenised = tmp_path / "test.en", tmp_path / "test.de", tmp_path / "test.tok.de"
    source.write_text("\n".join(SENTENCES[:2]) + "\n")
    references.write_text("Ich liebe dich.\nWo ist der Bahnhof?\n")
    tokenised.write_text("ich liebe dich .\nwo ist der bahnhof ?\n")
    argv = [str(folder), "--source", str(source), "--references", str(references), "--num-beams", "1"]
    assert evaluate_cli.main([*argv, "--name", "machine", "--json"]) == 0
    written = json.loads((tmp_path / "model-evaluation" / "machine_scores.json").read_text())
    assert json.loads(capsys.readouterr().out) == written
    assert evaluate_cli.main([*argv, "--name", "own", "--references-tokenized", str(tokenised)]) == 0
    text = capsys.readouterr().out
    assert f"against {tokenised}" in text and "nrefs:1" in text and "{" not in text
    assert evaluate_cli.main([*argv, "--name", "here"]) == 0
    assert "Moses-tokenised here" in capsys.readouterr().out
    assert not {"machine_scores.json", "own_scores.json", "here_scores.json"} & {
        p.name for p in folder.iterdir()
    }


def test_evaluate_writes_beside_the_model_by_default_and_its_help_example_runs_on_the_jobs_folder(
    trained_run, tmp_path, capsys
) -> None:
    """The first --help example exited 2 on the main job's folder (it holds the job's scores.json) and wrote into
    the model folder, which a later push published: now it runs as written, and the files go beside the folder."""
    run = tmp_path / "runs" / "tatoeba-en-de"
    shutil.copytree(trained_run.model_dir, run / "final")
    before = sorted(path.name for path in (run / "final").iterdir())
    (tmp_path / "test.en").write_text("I love you.\n")
    (tmp_path / "test.de").write_text("Ich liebe dich.\n")
    example = next(line for line in evaluate_cli.__doc__.splitlines() if "vaswani-evaluate runs/" in line)
    argv = example.split()[1:] + ["--num_beams", "1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        assert evaluate_cli.main(argv) == 0
    assert sorted(path.name for path in (run / "final").iterdir()) == before
    assert (run / "final-evaluation" / "scores.json").is_file()
    assert f"written to {Path('runs/tatoeba-en-de/final-evaluation')}" in capsys.readouterr().out


def test_a_device_this_machine_lacks_is_named_with_what_it_has() -> None:
    """--device mps or tpu is refused with the fix named, not a RuntimeError traceback once the model moved
    there."""
    from vaswani_transformer.engines.options import check_device

    for device in ("auto", "cpu", "cuda", "cuda:0", "cuda:1"):
        check_device(device, cuda_count=2)
    check_device("mps", cuda_count=0, mps=True)
    with pytest.raises(
        ValueError, match=r"--device mps: this machine has only cpu \(no CUDA GPU\): use --device cpu"
    ):
        check_device("mps", cuda_count=0)
    with pytest.raises(ValueError, match=r"--device cuda:7: this machine has cpu and cuda \(cuda:0\.\.1\)"):
        check_device("cuda:7", cuda_count=2)
    for device in ("tpu", "cuda:x", "gpu", ""):
        with pytest.raises(ValueError, match="give one of them, or auto"):
            check_device(device, cuda_count=1)


def test_export_positions_are_bounded_before_anything_loads() -> None:
    from vaswani_transformer.engines.options import MAX_EXPORT_POSITIONS, check_max_positions

    check_max_positions(1)
    check_max_positions(MAX_EXPORT_POSITIONS)
    for count in (0, -5, MAX_EXPORT_POSITIONS + 1, 10**8):
        with pytest.raises(ValueError, match=f"--max_positions {count:,}: give 1 to 65,536 tokens"):
            check_max_positions(count, "--max_positions")
