"""Decoding engines on a trained model, same run: sentences/s and BLEU of each against PyTorch float32.

    python benchmarks/bench_engines.py runs/tatoeba-en-de/final            # the Tatoeba test split, 1,000 pairs
    python benchmarks/bench_engines.py runs/multi30k/final \\
        --source ../shared/data/multi30k/test_2016_flickr.en --references ../shared/data/multi30k/test_2016_flickr.de

Engines, as `vaswani-translate` and `vaswani-evaluate` run them (`engines.load_engine`), with the model's decoding
(beam 4, α = 0.6): torch float32 (--dtype float32), torch auto (bfloat16 autocast where the CPU has it), torch
int8 (torchao, --quantize int8), CTranslate2 float32 and int8 (--engine ctranslate2). --int8_alternatives adds
torch's own deprecated `torch.ao.quantization.quantize_dynamic` (the encoder's and decoder's linear layers, as
ours) for comparison. Every engine decodes a few batches untimed first; then the engines take turns for
--repeats rounds over all sentences, and the best round counts. BLEU: sacreBLEU against the references (cased
unless the tokenizer lowercases); "same" counts the translations equal to torch float32's.
"""

import argparse
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from vaswani_transformer.data import read_text_lines
from vaswani_transformer.engines import EngineOptions, TorchEngine, load_engine
from vaswani_transformer.evaluation import load_for_decoding, score_with_tokenizer


def engines(model: str, cache: Path, alternatives: bool) -> dict[str, object]:
    """The engines to time, by name, each loaded (and CTranslate2 converted) before any timing."""
    loaded = {
        "torch float32": load_engine(model, EngineOptions(dtype="float32", device="cpu")),
        "torch auto": load_engine(model, EngineOptions(device="cpu")),
        "torch int8 (torchao)": load_engine(model, EngineOptions(quantize="int8", device="cpu")),
    }
    if alternatives:
        loaded["torch int8 (torch.ao quantize_dynamic)"] = quantize_dynamic_engine(model)
    for quantize in ("none", "int8"):
        options = EngineOptions(
            engine="ctranslate2", quantize=quantize, device="cpu", ctranslate2_cache=cache
        )
        loaded[f"ctranslate2 {'float32' if quantize == 'none' else 'int8'}"] = load_engine(model, options)
    return loaded


def quantize_dynamic_engine(model: str) -> TorchEngine:
    """torch.ao's dynamic int8 (fbgemm) on the encoder's and decoder's Linear layers, decoded in float32."""
    loaded, tokenizer = load_for_decoding(model, device="cpu", dtype=torch.float32)
    names = {
        name for name, m in loaded.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"
    }
    with warnings.catch_warnings():  # its deprecation notice, once per layer
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(loaded, names, dtype=torch.qint8)
    return TorchEngine(quantized, tokenizer, torch.float32)


def best_times(runs: dict[str, Callable[[], list[str]]], repeats: int) -> tuple[dict[str, float], dict]:
    """The best wall time of each run over `repeats` alternating rounds, and each run's last output."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    outputs: dict[str, list[str]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            outputs[name] = run()
            times[name].append(time.perf_counter() - start)
    return {name: min(values) for name, values in times.items()}, outputs


def test_split(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """--source/--references, or the --recipe's test split."""
    if args.source is not None:
        return read_text_lines(args.source), read_text_lines(args.references)
    from vaswani_transformer.experiment import TrainOptions, load_corpora

    test = load_corpora(TrainOptions.from_recipe(args.recipe)).test
    return list(test["source"]), list(test["target"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", help="trained model folder or Hub id")
    parser.add_argument("--source", type=Path, help="source sentences (default: the --recipe's test split)")
    parser.add_argument("--references", type=Path, help="references, line-aligned with --source")
    parser.add_argument("--recipe", default="tatoeba", help="whose test split, without --source (tatoeba)")
    parser.add_argument("--target_lang", default="de", help="for tokenised BLEU (de)")
    parser.add_argument("--batch_size", type=int, default=64, help="sentences per batch (64)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds; the best counts (3)")
    parser.add_argument("--int8_alternatives", action="store_true", help="also torch.ao's quantize_dynamic")
    parser.add_argument(
        "--threads",
        type=int,
        help="PyTorch's threads (default: its own choice; 1 on a machine that other jobs keep busy, where "
        "threads waiting for each other slow PyTorch down many times; CTranslate2 runs one thread per batch)",
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if (args.source is None) != (args.references is None):
        parser.error("give --source and --references together")
    sources, references = test_split(args)
    with tempfile.TemporaryDirectory() as cache:
        loaded = engines(args.model, Path(cache), args.int8_alternatives)
        for engine in loaded.values():  # untimed: first calls allocate and warm caches
            engine.translate(sources[: 2 * args.batch_size], batch_size=args.batch_size)
        runs = {
            name: lambda e=engine: e.translate(sources, batch_size=args.batch_size)
            for name, engine in loaded.items()
        }
        seconds, outputs = best_times(runs, args.repeats)
    print(f"{len(sources):,} sentences, batch {args.batch_size}, best of {args.repeats} alternating rounds, "
          f"{torch.get_num_threads()} torch threads")  # fmt: skip
    baseline = outputs["torch float32"]
    tokenizer = loaded["torch float32"].tokenizer
    for name, engine in loaded.items():
        bleu = score_with_tokenizer(outputs[name], references, tokenizer, target_lang=args.target_lang)
        same = sum(a == b for a, b in zip(outputs[name], baseline, strict=True))
        print(
            f"{name:40s} {len(sources) / seconds[name]:8.1f} sentences/s  "
            f"{seconds['torch float32'] / seconds[name]:5.2f}x torch float32  "
            f"sacreBLEU {bleu['sacrebleu']['score']:6.2f}  same {same}/{len(sources)}  "
            f"({engine.decoding_settings()['dtype']})"
        )


if __name__ == "__main__":
    main()
