"""Decoding through CUDA graphs: `translate(..., cuda_graphs=True)`, the pipeline's and the
commands' `--cuda_graphs` give the plain path's translations, and batches of many sizes compile one graph per
bucket, none again on a second pass. On the CPU the step compiles with a recording backend (no CUDA graphs), which
counts the graphs CUDA would capture, and each bucket's static cache keeps its addresses, on which CUDA graphs
replay."""

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from transformers import CompileConfig, pipeline

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.cli import evaluate as evaluate_command
from vaswani_transformer.cli import translate as translate_command
from vaswani_transformer.decoding.cuda_graphs import bucket, padded_to_buckets
from vaswani_transformer.decoding.translate import translate
from vaswani_transformer.engines.torch_engine import TorchEngine

# 1, 3, 6 and 8 sentences: batches of 1, 4 and 8 rows once padded (three buckets); every source fits the
# shortest length bucket, so the row buckets are all the shapes there are
REPO = Path(__file__).resolve().parents[2]
SENTENCES = ["a b c", "d e", "f g h i", "j", "k l", "m n o p q", "r", "s t u"]
BATCH_SIZES = (1, 3, 6, 8)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    """dynamo's compiled code, and its recompile count, belong to the model's `forward` code object for the whole
    process: this file compiles one graph per bucket, which would leave later compile tests over their limit."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture
def model() -> VaswaniTransformerForConditionalGeneration:
    """Random weights, which never end a translation: an output limit of source + 10 (not the paper's + 50)
    keeps each decoding short, and every static cache still has the shortest length bucket."""
    torch.manual_seed(0)
    config = tiny_config(vocab_size=30, init_std=1.0, max_length_offset=10)
    return VaswaniTransformerForConditionalGeneration(config).eval()


def recording_compile_config(graphs: list) -> CompileConfig:
    """A compile_config that compiles on the CPU too, through a backend that records every graph and runs it
    as traced (cheap: no code generation)."""

    def recording_backend(graph_module: torch.fx.GraphModule, _inputs: list, **_options: object) -> Callable:
        graphs.append(graph_module)
        return graph_module.forward

    compile_config = CompileConfig(dynamic=False, backend=recording_backend)
    compile_config._compile_all_devices = True
    return compile_config


@pytest.mark.slow  # compiles a step per bucket
@pytest.mark.parametrize("num_beams", [1, 4])
def test_cuda_graph_translations_equal_the_plain_ones_with_one_graph_per_bucket(
    model, letter_tokenizer, num_beams
) -> None:
    graphs: list = []
    settings = {"num_beams": num_beams, "batch_size": 8}
    compiled = {"cuda_graphs": True, "compile_config": recording_compile_config(graphs)}
    for size in BATCH_SIZES:
        plain = translate(SENTENCES[:size], model, letter_tokenizer, **settings)
        assert translate(SENTENCES[:size], model, letter_tokenizer, **settings, **compiled) == plain
    assert len(graphs) == len({bucket(size) for size in BATCH_SIZES}) == 3
    addresses = cache_addresses(model)
    assert len(addresses) == 3  # one static cache per bucket
    for size in BATCH_SIZES:  # a second pass replays the graphs it has, on the caches it has
        translate(SENTENCES[:size], model, letter_tokenizer, **settings, **compiled)
    assert len(graphs) == 3, "a second pass recompiled"
    assert cache_addresses(model) == addresses, "a bucket's cache moved: CUDA would record its graph again"


def test_a_beam_of_one_sentence_and_greedy_four_keep_caches_of_their_own(model, letter_tokenizer) -> None:
    """One sentence with 4 beams and 4 sentences greedy both decode 4 rows, but their cross-attention caches
    hold 1 and 4 sentences: each bucket's cache is its own."""
    compile_config = recording_compile_config([])
    for num_beams, size in ((4, 1), (1, 4), (4, 1)):
        settings = {"num_beams": num_beams, "batch_size": 8}
        plain = translate(SENTENCES[:size], model, letter_tokenizer, **settings)
        graphs = translate(
            SENTENCES[:size],
            model,
            letter_tokenizer,
            cuda_graphs=True,
            compile_config=compile_config,
            **settings,
        )
        assert graphs == plain


def cache_addresses(model: VaswaniTransformerForConditionalGeneration) -> dict[tuple, list[int]]:
    """Where each bucket's static cache keeps its keys and values, layer by layer."""
    return {
        bucket_key: [
            tensor.data_ptr()
            for layer in (*cache.self_attention_cache.layers, *cache.cross_attention_cache.layers)
            for tensor in (layer.keys, layer.values)
        ]
        for bucket_key, cache in model._cuda_graph_caches.items()
    }


def test_the_pipeline_decodes_through_cuda_graphs_with_the_plain_translations(
    model, letter_tokenizer
) -> None:
    graphs: list = []
    translator = pipeline("vaswani-translation", model=model, tokenizer=letter_tokenizer)
    plain = translator(SENTENCES[:3], batch_size=3)
    compile_config = recording_compile_config(graphs)
    assert translator(SENTENCES[:3], batch_size=3, cuda_graphs=True, compile_config=compile_config) == plain
    assert len(graphs) == 1


def test_every_padded_batch_has_a_masked_position_and_its_own_rows_first() -> None:
    """Padding keeps the sentences in place, fills the bucket with copies of the last one and leaves at least one
    masked position, so no batch goes without a source mask (which would compile a graph of its own)."""
    input_ids = torch.tensor([[5, 6, 3, 0], [7, 8, 9, 3], [4, 3, 0, 0]])
    ids, mask = padded_to_buckets(input_ids, (input_ids != 0).long(), 0, 1024)
    assert ids.shape == mask.shape == (4, 16)
    assert torch.equal(ids[:3, :4], input_ids) and torch.equal(ids[3, :4], input_ids[2])
    assert (mask == 0).any(-1).all() and not ids[:, 4:].any()
    full = torch.full((1, 16), 5)
    assert padded_to_buckets(full, torch.ones_like(full), 0, 1024)[0].shape == (1, 32)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"do_sample": True}, "not sampling: drop do_sample or cuda_graphs"),
        ({}, "cuda_graphs needs the model on a CUDA GPU, not cpu"),
        ({"workers": 2, "compile": True}, "one batch at a time, not 2: drop workers"),
        ({"disable_compile": True, "compile": True}, "drop disable_compile or cuda_graphs"),
    ],
)
def test_translate_refuses_what_cuda_graphs_cannot_do_before_decoding(
    model, letter_tokenizer, monkeypatch, settings, message
) -> None:
    monkeypatch.setattr(type(model), "generate", lambda *a, **k: pytest.fail("decoding started"))
    if settings.pop("compile", False):
        settings["compile_config"] = recording_compile_config([])
    with pytest.raises(ValueError, match=message):
        translate(SENTENCES, model, letter_tokenizer, cuda_graphs=True, **settings)


def test_the_torch_engine_decodes_through_cuda_graphs_and_records_it(model, letter_tokenizer) -> None:
    """--cuda_graphs reaches the engine of vaswani-translate and vaswani-evaluate: its translations are the plain
    engine's, and scores.json's decoding record says how they were decoded."""
    graphs: list = []
    plain = TorchEngine(model, letter_tokenizer, torch.float32)
    engine = TorchEngine(model, letter_tokenizer, torch.float32, cuda_graphs=True)
    compile_config = recording_compile_config(graphs)
    assert engine.translate(SENTENCES, compile_config=compile_config) == plain.translate(SENTENCES)
    assert len(graphs) == 1
    assert engine.decoding_settings()["cuda_graphs"] is True
    assert "cuda_graphs" not in plain.decoding_settings()


@pytest.mark.parametrize("command", [translate_command, evaluate_command])
def test_the_commands_flag_names_the_engine_option(command, monkeypatch, tmp_path) -> None:
    """--cuda_graphs (or --cuda-graphs) of both commands becomes EngineOptions.cuda_graphs, on a machine with a
    GPU (counted as one here: the options are checked before anything loads)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    source = tmp_path / "test.en"
    source.write_text("a b\n", encoding="utf-8")
    arguments = {
        translate_command: ["model", str(source)],
        evaluate_command: ["model", "--source", str(source), "--references", str(source)],
    }[command]
    for spelling in ("--cuda_graphs", "--cuda-graphs"):
        _, options = command.parse_args([*arguments, spelling, "--device", "cuda"])
        assert options.cuda_graphs
    _, options = command.parse_args([*arguments, "--device", "cuda"])
    assert not options.cuda_graphs


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (`pytest -m gpu` on the GPU machine)"
)
@pytest.mark.parametrize("num_beams", [1, 4])
def test_cuda_graph_translations_on_a_gpu_equal_the_plain_ones(model, letter_tokenizer, num_beams) -> None:
    """On a GPU, transformers' compile_config (inductor, CUDA graphs), twice: recorded, then replayed."""
    model = model.to("cuda")
    settings = {"num_beams": num_beams, "batch_size": 8, "dtype": torch.float32}
    for size in (*BATCH_SIZES, *BATCH_SIZES):
        plain = translate(SENTENCES[:size], model, letter_tokenizer, **settings)
        assert translate(SENTENCES[:size], model, letter_tokenizer, cuda_graphs=True, **settings) == plain


@pytest.mark.slow  # a fresh interpreter that imports torch and transformers, and compiles
def test_the_gpu_benchmark_runs_in_miniature_and_finds_the_plain_tokens() -> None:
    """benchmarks/bench_cuda_graphs.py, the command a GPU session times CUDA graphs with (gpu_owed.py's
    decoding-base-compiled-bf16 item), on the CPU with the eager backend: its table has a row per search and batch,
    each with the plain path's tokens, and a line per run in the format the decision run reads."""
    command = [sys.executable, "benchmarks/bench_cuda_graphs.py", "--device", "cpu", "--dtype", "float32"]
    command += [
        "--preset",
        "tiny",
        "--vocab_size",
        "200",
        "--batch",
        "3",
        "--new_tokens",
        "3",
        "--repeats",
        "1",
    ]
    done = subprocess.run(
        [*command, "--backend", "eager"], cwd=REPO, capture_output=True, text=True, check=True, timeout=600
    )
    rows = [line for line in done.stdout.splitlines() if line.startswith(("| beam 4 |", "| greedy |"))]
    assert [row.split(" | ")[1] for row in rows] == ["1", "3", "1", "3"]
    assert all(row.endswith("| yes |") for row in rows), done.stdout
    # the lines gpu_owed.py's decision run reads (bench_decoding.py's format): each run, beam 4 and greedy
    runs = [line.split(" beam ")[0].strip() for line in done.stdout.splitlines() if "sentences/s" in line]
    assert runs == ["ours float32", "plain float32", "marian float32"] * 2, done.stdout
