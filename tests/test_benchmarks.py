"""The benchmarks' own arithmetic: the FLOP count behind their MFU figures, the profile they print, and the
compiled decoding path they time."""

import re
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.cuda_graphs import check_cuda_graphs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_decoding import print_top_operators  # noqa: E402
from bench_training import training_flops  # noqa: E402
from peers import compile_config  # noqa: E402


@pytest.mark.parametrize("fused_loss", [True, False])
@pytest.mark.parametrize("d_k", [None, 6])
def test_training_flops_count_every_matrix_product_of_a_real_step(fused_loss: bool, d_k: int | None) -> None:
    """`training_flops` equals torch's FLOP counter over a real forward and backward (eager attention, so the
    score and weighted-sum products are visible to it), with the fused loss and without."""
    config = tiny_config(vocab_size=96, d_k=d_k, d_v=d_k, fused_loss=fused_loss)
    config._attn_implementation = "eager"
    model = VaswaniTransformerForConditionalGeneration(config).train()
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(4, 96, (3, 7), generator=generator)
    labels = torch.randint(4, 96, (3, 5), generator=generator)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=input_ids, labels=labels).loss.backward()
    assert counter.get_total_flops() == training_flops(config, batch=3, source_length=7, target_length=5)


@pytest.mark.slow
def test_the_data_benchmark_builds_aligned_pairs_of_several_tatoeba_pairs(tmp_path: Path) -> None:
    """bench_data.py's corpus: N aligned lines, each SENTENCES_PER_LINE embedded pairs joined, seeded."""
    from bench_data import SENTENCES_PER_LINE, build_corpus

    from vaswani_transformer.data import load_tatoeba

    tatoeba = load_tatoeba()[0]
    targets_of = {}
    for source, target in zip(tatoeba["source"], tatoeba["target"], strict=True):
        targets_of.setdefault(source, set()).add(target)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    source_file, target_file = build_corpus(tmp_path / "a", 50, seed=3)
    sources, targets = source_file.read_text().splitlines(), target_file.read_text().splitlines()
    assert len(sources) == len(targets) == 50
    first = next(s for s in targets_of if sources[0].startswith(s + " "))  # a Tatoeba source opens the line
    assert any(targets[0].startswith(t + " ") for t in targets_of[first])  # and its translation the target
    assert all(len(line.split()) >= SENTENCES_PER_LINE for line in sources)
    again = build_corpus(tmp_path / "b", 50, seed=3)[0].read_text()
    assert again == source_file.read_text()


def test_the_serving_benchmark_s_load_sends_each_text_and_counts_what_came_back(tmp_path: Path) -> None:
    """bench_serve.py's wrk script holds every text as a LibreTranslate request (JSON, escaped for Lua), and its
    figures count error statuses and socket errors as errors (the real server under wrk: test_bench_serve.py)."""
    import json

    from bench_serve import SENTENCES_PER_PARAGRAPH, workloads, wrk_result, wrk_script

    texts = ['He said "hi".', "Ça va ?", "a\\b ]] [[c"]
    script = wrk_script(texts, "en", "de", tmp_path).read_text(encoding="utf-8")
    bodies = script.split("local bodies = {")[1].split("}\n")[0]
    assert [json.loads(json.loads(body))["q"] for body in re.findall(r'"(?:[^"\\]|\\.)*"', bodies)] == texts
    printed = (
        "Running 15s test\nRESULT requests=120 seconds=15.010 p50=0.10000 p95=0.20000 p99=0.30000 status=4 "
        "connect=1 read=2 write=0 timeout=3\n"
    )
    result = wrk_result(printed, clients=8, per_text=3)
    assert (result.answered, result.sentences, result.errors) == (116, 348, 10)
    assert result.sentences_per_second == pytest.approx(348 / 15.01)
    assert (result.p50, result.p95, result.p99) == (0.1, 0.2, 0.3)
    paragraphs = workloads(["1.", "2.", "3.", "4.", "5.", "6.", "7."])["paragraphs"]
    assert paragraphs == ["1. 2. 3.", "4. 5. 6."] and SENTENCES_PER_PARAGRAPH == 3


def test_the_decoding_profile_names_the_operators_that_took_the_time(capsys: pytest.CaptureFixture) -> None:
    """bench_decoding --profile: the operator that does nearly all of a run's work comes first, with its calls."""
    a, b, small = torch.randn(256, 256), torch.randn(256, 256), torch.randn(4)

    def run() -> None:
        for _ in range(5):
            torch.mm(a, b)
            small.add(1)

    print_top_operators(run, 2, "a test run")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("top 2 operators of a test run: ") and len(lines) == 3
    assert lines[1].split()[0] == "aten::mm" and "5 calls" in lines[1]


def test_the_compiled_decoding_it_times_is_accepted_on_a_cpu_only_through_its_compile_config(
    tiny_model: VaswaniTransformerForConditionalGeneration,
) -> None:
    """bench_decoding --model --compile: on a CPU translate()'s compiled path runs only with a compile_config that
    compiles there (static shapes); a GPU's is the package's CUDA-graph one, which a CPU model refuses."""
    on_cpu = compile_config("inductor", "cpu")
    check_cuda_graphs(tiny_model, {"compile_config": on_cpu}, workers=1)
    assert on_cpu.dynamic is False and on_cpu.backend == "inductor"
    with pytest.raises(ValueError, match="needs the model on a CUDA GPU"):
        check_cuda_graphs(tiny_model, {"compile_config": compile_config("inductor", "cuda")}, workers=1)
