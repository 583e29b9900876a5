"""Decoding speed: our generate() against MarianMTModel.generate() (and our CTranslate2 export), same run.

    python benchmarks/bench_decoding.py                                  # CPU: d512 6+6, vocabulary 8k
    python benchmarks/bench_decoding.py --device cuda --dtype bfloat16 --vocab_size 37000 --batch 64
    python benchmarks/bench_decoding.py --device cuda --dtype bfloat16 --vocab_size 37000 --batch 64 --compile
    python benchmarks/bench_decoding.py --model runs/tatoeba-en-de/final --ctranslate2   # its test split, BLEU
    python benchmarks/bench_decoding.py --model runs/multi30k/final --recipe multi30k --ctranslate2 --onnx

Fixed-length run (default): both models get the same random weights (Marian with our interleaved position table,
zero attention biases), --batch source sentences of --source_length tokens, and decode exactly --new_tokens tokens
(min = max), so both do the same work; beam 4 (the paper's) and greedy.
Trained model (--model): the model in every engine of `vaswani-translate` (`engines.load_engine`: the default
precision, float32, bfloat16 weights, int8 linear layers, with --onnx its ONNX export in ONNX Runtime (float32,
our search), and with --ctranslate2 its CTranslate2 export, float and int8) and its MarianMTModel copies translate the --recipe's test split (or --source) with the model's decoding
settings in the same length-sorted batches; with references, each one's sacreBLEU and tokenised BLEU. Marian's
length penalty (and CTranslate2's) is |Y|^α, ours GNMT, so their outputs can differ slightly.
Precision: ours decodes as the package does by default (--dtype auto: on a CPU where bfloat16 is faster, float32 weights
under bf16 autocast; on a GPU, bfloat16 weights); MarianMTModel decodes in float32 (what its users get by default)
and in ours's precision (like for like). The machine's own float32 and bfloat16 matrix-product peaks are measured
first, and each run's FLOP/s (matrix products counted by torch's FlopCounterMode on one run) is given as a share of
the peak of its precision (MFU).
--compile (fixed-length run): both models decode with transformers' static cache and a torch.compile'd forward
(CUDA graphs on a GPU); the untimed first round of each shape pays the compiling. With --model: also ours through
translate()'s compiled path (`cuda_graphs=True`: a static cache and one graph per bucket of shapes; on a CPU
compiled by Inductor, no CUDA graphs), its first run (compiling included) timed alone, then warm in the medians.
--ctranslate2: our model exported to CTranslate2, float and int8 weights, one thread per core (intra_threads 1,
inter_threads = cores, batches split across them: twice the throughput of all threads on one batch on 2 cores).
Figures: sentences/s, output tokens/s, single-sentence latency (batch 1), peak GPU memory; medians of --repeats.
--profile N (with --model): then the N operators that take the most time themselves in one run of ours default,
one batch at a time (torch.profiler): share of the operator time, calls, time per call.
--earlier_code DIR (with --model): also the same weights decoded by the model code in DIR (the .py files a saved
folder carries, e.g. those of an earlier commit: `git archive COMMIT vaswani_transformer/modeling | tar -x -C /tmp/x`),
through the same translate() with the same precision and batches: "ours default, earlier code" against "ours
default", before against after in one run.
--first_line (with --model): only the seconds from starting `vaswani-translate MODEL` on a 100,000-line standard
input (the test sentences over and over) to its first translated line, start-up and loading included (target: 5 s),
and the same for a one-line input (start-up, loading and one sentence).
"""

import argparse
import math
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from peers import (
    add_device_arguments,
    alternating_medians,
    compile_config,
    dtype_name,
    marian_twin,
    peak_memory_mb,
    peak_size,
    print_peaks,
    resolve_dtype,
)
from torch.utils.flop_counter import FlopCounterMode
from transformers import PreTrainedModel
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
from vaswani_transformer.decoding.translate import BATCH_SIZE, length_sorted_batches
from vaswani_transformer.engines import EngineOptions, TorchEngine, load_engine
from vaswani_transformer.evaluation import decoding_dtype, load_for_decoding, score_with_tokenizer
from vaswani_transformer.files.reading import read_text_lines
from vaswani_transformer.precision import autocast_to


def marian_copy(model: VaswaniTransformerForConditionalGeneration) -> PreTrainedModel:
    """A MarianMTModel computing our model's function: same weights, our position table, zero attention biases."""
    marian = marian_twin(model.config)
    state = {name.replace("feed_forward.", ""): value for name, value in model.state_dict().items()}
    state["model.shared.weight"] = model.get_input_embeddings().weight
    missing, unexpected = marian.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    positions = model.get_encoder().embed_positions(
        torch.arange(marian.config.max_position_embeddings, device=model.device)
    )
    with torch.no_grad():
        for name in missing:  # what Marian has and we do not: its position tables, biases we do not use
            if "embed_positions" in name:
                marian.get_parameter(name).copy_(positions)
            elif name.endswith(".bias") or name == "final_logits_bias":
                (
                    marian.get_buffer(name) if name == "final_logits_bias" else marian.get_parameter(name)
                ).zero_()
            else:
                raise ValueError(f"MarianMTModel's {name} has no counterpart in our model")
        for norm in (m for m in marian.modules() if isinstance(m, torch.nn.LayerNorm)):
            norm.eps = model.config.layer_norm_eps
    return marian.to(model.device, model.dtype).eval()


@dataclass
class Decoder:
    """A model and the precision it decodes in (autocast over its weights when they differ)."""

    model: PreTrainedModel
    precision: torch.dtype

    def generate(self, **inputs: object) -> torch.Tensor:
        with autocast_to(self.precision, self.model.dtype, self.model.device):
            return self.model.generate(**inputs)


def decoders(ours: VaswaniTransformerForConditionalGeneration, precision: torch.dtype) -> dict[str, Decoder]:
    """Ours in `precision` (the package's default with --dtype auto), MarianMTModel with our weights in float32 and
    (when it differs) in the same precision."""
    runs = {f"ours {dtype_name(precision)}": Decoder(ours, precision)}
    marian = marian_copy(ours)
    runs["marian float32"] = Decoder(marian.float(), torch.float32)
    if precision != torch.float32:
        runs[f"marian {dtype_name(precision)}"] = Decoder(marian_copy(ours), precision)
    return runs


def generation_flops(decode: Callable[[], object]) -> float:
    """The matrix-product FLOPs of one decoding call, as torch's FlopCounterMode counts them."""
    with FlopCounterMode(display=False) as counter:
        decode()
    return counter.get_total_flops()


def fixed_settings(
    args: argparse.Namespace, ours: VaswaniTransformerForConditionalGeneration, beams: int
) -> dict[str, Any]:
    """generate()'s settings for exactly --new_tokens output tokens with `beams` beams (α the model's)."""
    settings = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "num_beams": beams}
    if beams > 1:
        settings["length_penalty"] = ours.generation_config.length_penalty
    return settings


def fixed_length_runs(args: argparse.Namespace, peaks: dict[torch.dtype, float]) -> None:
    """Both models on random sources, exactly --new_tokens output tokens each, beam 4 and greedy."""
    torch.manual_seed(0)
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    precision = resolve_dtype(args.dtype, args.device)
    weights = decoding_dtype(args.device) if args.dtype == "auto" else precision
    ours = VaswaniTransformerForConditionalGeneration(config).to(args.device, weights).eval()
    runs = decoders(ours, precision)
    sources = torch.randint(4, args.vocab_size, (args.batch, args.source_length), device=args.device)
    sources[:, -1] = config.eos_token_id
    # counted eagerly, before compiling: torch.compile refuses to run under FlopCounterMode (a dispatch mode)
    with torch.inference_mode():
        flops = {
            beams: generation_flops(
                partial(
                    next(iter(runs.values())).generate, input_ids=sources, **fixed_settings(args, ours, beams)
                )
            )
            for beams in (4, 1)
        }
    if args.compile:
        # Both forwards run through one transformers wrapper, which torch.compile caches by code object: each
        # model, batch size, beam count and first/later step is an entry, more than the default limit of 8.
        torch._dynamo.config.recompile_limit = 64
        for run in runs.values():
            compile_forward(run.model)
    exported = ctranslate2_twins(ours, args) if args.ctranslate2 else {}
    for beams in (4, 1):
        settings = fixed_settings(args, ours, beams)
        if args.compile:  # the forward is compiled already: generate() must not compile its caller again
            settings |= {"cache_implementation": "static", "disable_compile": True}
        batch = {name: partial(run.generate, input_ids=sources, **settings) for name, run in runs.items()}
        single = {
            name: partial(run.generate, input_ids=sources[:1], **settings) for name, run in runs.items()
        }
        for name, decode in exported.items():
            batch[name] = partial(decode, sources, beams, args.new_tokens)
            single[name] = partial(decode, sources[:1], beams, args.new_tokens)
        with torch.inference_mode():
            seconds = alternating_medians(batch, args.repeats, args.device)
            latency = alternating_medians(single, args.repeats, args.device)
            memory = {name: peak_memory_mb(batch[name], args.device) for name in runs}
        for name in batch:
            mfu = flops[beams] / seconds[name] / 1e12 / peaks[runs[name].precision] if name in runs else None
            report(
                name, beams, args.batch, args.new_tokens, seconds[name], latency[name], memory.get(name), mfu
            )
        print(f"beam {beams}: {flops[beams] / 1e9:.1f} GFLOP per batch; " + ratios_line(seconds, latency))


def ratios_line(seconds: dict[str, float], latency: dict[str, float] | None = None) -> str:
    """Every run's sentences/s (and latency) relative to MarianMTModel in float32."""
    parts = []
    for name in seconds:
        part = f"{name} {seconds['marian float32'] / seconds[name]:.2f}x"
        if latency is not None:
            part += f" (latency {latency['marian float32'] / latency[name]:.2f}x)"
        parts.append(part)
    return "sentences/s relative to MarianMTModel float32: " + ", ".join(parts)


def compile_forward(model: PreTrainedModel) -> None:
    """The model's forward as one compiled graph over transformers' static cache: CUDA graphs on a GPU (greedy and
    beam search alike; transformers' own compile path covers greedy search only), inductor kernels on a CPU."""
    mode = "reduce-overhead" if model.device.type == "cuda" else "default"
    model.forward = torch.compile(model.forward, mode=mode, fullgraph=True)


def report(
    name: str,
    beams: int,
    sentences: int,
    tokens: int,
    seconds: float,
    latency: float,
    memory: float | None,
    mfu: float | None,
) -> None:
    """One line of figures."""
    extra = f"  peak {memory:7.0f} MB" if memory is not None else ""
    extra += f"  MFU {mfu:6.1%}" if mfu is not None else ""
    print(
        f"{name:16s} beam {beams}: {seconds * 1e3:8.1f} ms  {sentences / seconds:8.1f} sentences/s  "
        f"{sentences * tokens / seconds:9.0f} output tokens/s  latency (1 sentence) {latency * 1e3:7.1f} ms{extra}"
    )


def ctranslate2_threads(device: str) -> dict[str, int]:
    """One thread per core on a CPU, each decoding its share of the batch: small models are step-bound, and two
    1-thread translators keep both cores busy where one 2-thread translator leaves them waiting (the
    package's own CTranslate2Translator decodes so too)."""
    return {"intra_threads": 1, "inter_threads": torch.get_num_threads()} if device == "cpu" else {}


def ctranslate2_compute_types(device: str) -> dict[str, str]:
    """CTranslate2 float and int8 weights: float32 and int8 on a CPU, bfloat16 and int8_bfloat16 on a GPU."""
    if device == "cpu":
        return {"ct2 float32": "float32", "ct2 int8": "int8"}
    return {"ct2 bfloat16": "bfloat16", "ct2 int8": "int8_bfloat16"}


def split_across(translator: Any, count: int) -> int:
    """The sub-batch size that gives each of the translator's threads a share of `count` sentences."""
    return max(1, math.ceil(count / translator.num_translators))


def ctranslate2_twins(
    model: VaswaniTransformerForConditionalGeneration, args: argparse.Namespace
) -> dict[str, Callable[[torch.Tensor, int, int], object]]:
    """Our model exported to CTranslate2 (token names t0 … tV-1), run with float and int8 weights."""
    import ctranslate2

    from vaswani_transformer.engines.ctranslate2_cuda import cublas_12_problem
    from vaswani_transformer.engines.ctranslate2_export import ctranslate2_spec

    if args.device != "cpu" and (
        problem := cublas_12_problem(args.device)
    ):  # opens the pip wheel's cuBLAS 12
        raise SystemExit(f"error: {problem}")

    class NumberedTokens:  # what the export reads of a tokenizer
        unk_token = "t1"

        def convert_ids_to_tokens(self, ids: int | list[int]) -> str | list[str]:
            return [f"t{i}" for i in ids] if isinstance(ids, list) else f"t{ids}"

    folder = Path(tempfile.mkdtemp(prefix="ct2-bench-"))
    dtype = model.dtype
    spec = ctranslate2_spec(model.float().cpu(), NumberedTokens(), 1024)
    spec.validate()
    spec.optimize()
    spec.save(str(folder))
    model.to(args.device, dtype)
    twins = {}
    for name, compute_type in ctranslate2_compute_types(args.device).items():
        translator = ctranslate2.Translator(
            str(folder), device=args.device, compute_type=compute_type, **ctranslate2_threads(args.device)
        )

        def decode(sources: torch.Tensor, beams: int, new_tokens: int, translator=translator) -> object:
            tokens = [[f"t{i}" for i in row] for row in sources.tolist()]
            return translator.translate_batch(
                tokens,
                max_batch_size=split_across(translator, len(tokens)),
                beam_size=beams,
                min_decoding_length=new_tokens,
                max_decoding_length=new_tokens,
                length_penalty=model.generation_config.length_penalty,
            )

        twins[name] = decode
    return twins


def trained_engines(args: argparse.Namespace, cache: Path) -> dict[str, Any]:
    """The trained model in every engine of `vaswani-translate` (`engines.load_engine`), by name: ours in the
    default precision, in float32, in bfloat16 weights (CPU: the alternative to the default's autocast), with int8
    linear layers (torchao; CPU), with --onnx its ONNX export in ONNX Runtime (float32), and with --ctranslate2
    its CTranslate2 export with float and int8 weights; --int8_alternatives adds torch.ao's deprecated `quantize_dynamic`."""
    options = {"ours float32": EngineOptions(dtype="float32", device=args.device)}
    if args.dtype != "float32":
        name = "ours default" if args.dtype == "auto" else f"ours {args.dtype}"
        options[name] = EngineOptions(dtype=args.dtype, device=args.device)
    if args.device == "cpu" and args.dtype == "auto":  # the alternative to the default's autocast
        options["ours bfloat16 weights"] = EngineOptions(dtype="bfloat16", device="cpu")
    if args.device == "cpu":
        options["ours int8 (torchao)"] = EngineOptions(quantize="int8", device="cpu")
    if args.onnx:
        options["onnxruntime float32"] = EngineOptions(engine="onnxruntime", onnx_cache=cache / "onnx")
    if args.ctranslate2:
        for quantize in ("none", "int8"):
            name = f"ct2 {'int8' if quantize == 'int8' else 'float'}"
            options[name] = EngineOptions(
                engine="ctranslate2", quantize=quantize, device=args.device, ctranslate2_cache=cache
            )
    loaded = {name: load_engine(args.model, option) for name, option in options.items()}
    if args.int8_alternatives:
        loaded["ours int8 (torch.ao)"] = quantize_dynamic_engine(args.model)
    if args.earlier_code:  # the same weights under another version of the folder's code
        default = loaded.get("ours default", loaded["ours float32"])
        earlier = earlier_code_model(Path(args.model), args.earlier_code, cache).to(args.device).eval()
        loaded["ours default, earlier code"] = TorchEngine(earlier, default.tokenizer, default.dtype)
    if args.compile:  # the default precision's model, through translate()'s compiled path
        default = loaded.get("ours default", loaded["ours float32"])
        loaded["ours compiled"] = TorchEngine(
            default.model, default.tokenizer, default.dtype, cuda_graphs=True
        )
    return loaded


def earlier_code_model(model: Path, code: Path, cache: Path) -> PreTrainedModel:
    """The model folder's weights in the model class of the code files in `code` (another version of the folder's
    code), loaded as transformers loads remote code."""
    folder = cache / "earlier-code"
    shutil.copytree(model, folder)
    for path in code.glob("*.py"):
        shutil.copyfile(path, folder / path.name)
    model_class = get_class_from_dynamic_module(
        "modeling_vaswani_transformer.VaswaniTransformerForConditionalGeneration", str(folder)
    )
    return model_class.from_pretrained(folder)


def quantize_dynamic_engine(model: str) -> TorchEngine:
    """torch.ao's dynamic int8 (fbgemm) on the encoder's and decoder's Linear layers (as torchao's engine),
    decoded in float32: the deprecated alternative `quantization.quantize_int8` was chosen against."""
    loaded, tokenizer = load_for_decoding(model, device="cpu", dtype=torch.float32)
    names = {
        name for name, m in loaded.named_modules() if isinstance(m, torch.nn.Linear) and name != "lm_head"
    }
    with warnings.catch_warnings():  # its deprecation notice, once per layer
        warnings.simplefilter("ignore")
        quantized = torch.ao.quantization.quantize_dynamic(loaded, names, dtype=torch.qint8)
    return TorchEngine(quantized, tokenizer, torch.float32)


def marian_translations(
    decoder: Decoder, lines: list[str], tokenizer: Any, batch: int, offset: int, settings: dict[str, Any]
) -> list[str]:
    """MarianMTModel translating `lines` as `translate()` batches them: length-sorted, limit longest + offset."""
    encodings = tokenizer(lines)["input_ids"]
    texts = [""] * len(lines)
    for indices in length_sorted_batches([len(ids) for ids in encodings], batch):
        inputs = tokenizer.pad({"input_ids": [encodings[i] for i in indices]}, return_tensors="pt")
        limit = int(inputs["attention_mask"].sum(-1).max()) + offset
        output = decoder.generate(**inputs.to(decoder.model.device), max_new_tokens=limit, **settings)
        for index, text in zip(
            indices, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True
        ):
            texts[index] = text.strip()
    return texts


@dataclass
class TestSet:
    """Sentences to translate, with their references (for BLEU) and tokenised references (tokenised BLEU)."""

    sources: list[str]
    references: list[str] | None = None
    references_tokenized: list[str] | None = None


def test_set(args: argparse.Namespace) -> TestSet:
    """--source (--references, --references_tokenized), or the --recipe's test split with its references."""
    if args.source is not None:
        sources = read_text_lines(args.source)[: args.max_sentences]
        return TestSet(
            sources,
            *(
                read_text_lines(path)[: len(sources)] if path else None
                for path in (args.references, args.references_tokenized)
            ),
        )
    from vaswani_transformer.training import TrainOptions, load_corpora

    corpora = load_corpora(TrainOptions.from_recipe(args.recipe))
    count = min(len(corpora.test), args.max_sentences)
    tokenized = corpora.test_references_tokenized
    return TestSet(
        list(corpora.test["source"])[:count],
        list(corpora.test["target"])[:count],
        tokenized[:count] if tokenized is not None else None,
    )


def trained_model_run(args: argparse.Namespace) -> None:
    """The trained model in each engine and its MarianMTModel copies translate the same sentences with the model's
    decoding settings in the same length-sorted batches; sentences/s against Marian float32, and BLEU."""
    sentences = test_set(args)
    lines = sentences.sources
    with tempfile.TemporaryDirectory() as cache:
        engines = trained_engines(args, Path(cache))
        ours = engines["ours float32"]
        precision = resolve_dtype(args.dtype, args.device)
        paper = ours.model.generation_config  # given to Marian too, which has its own defaults
        settings = {name: getattr(paper, name) for name in ("num_beams", "length_penalty", "early_stopping")}
        runs: dict[str, Callable[[], list[str]]] = {
            name: partial(engine.translate, lines, batch_size=args.batch) for name, engine in engines.items()
        }
        if "ours default" in engines:  # the default decodes two batches at once on a multi-core CPU
            runs["ours default, 1 worker"] = partial(
                engines["ours default"].translate, lines, batch_size=args.batch, workers=1
            )
        if "ours compiled" in engines:  # its first run compiles, so it is timed alone before the medians
            # CUDA graphs on a GPU, Inductor's kernels elsewhere
            inductor = compile_config("inductor", args.device)
            runs["ours compiled"] = partial(runs["ours compiled"], compile_config=inductor)
            start = time.perf_counter()
            runs["ours compiled"]()
            print(
                f"ours compiled: the first run took {time.perf_counter() - start:.1f} s, compiling included"
            )
        marians = {
            name: d for name, d in decoders(ours.model, precision).items() if name.startswith("marian")
        }
        offset = ours.model.config.max_length_offset
        for name, decoder in marians.items():
            runs[name] = partial(
                marian_translations, decoder, lines, ours.tokenizer, args.batch, offset, settings
            )
        texts: dict[str, list[str]] = {}
        timed = {
            name: (lambda name=name, run=run: texts.__setitem__(name, run())) for name, run in runs.items()
        }
        with torch.inference_mode():
            seconds = alternating_medians(timed, args.repeats, args.device)
    print(f"{len(lines):,} sentences, {settings}, batches of {args.batch}, medians of {args.repeats}")
    for name in runs:
        line = f"{name:22s} {seconds[name]:7.2f} s  {len(lines) / seconds[name]:7.1f} sentences/s"
        if sentences.references is not None:
            bleu = score_with_tokenizer(
                texts[name],
                sentences.references,
                ours.tokenizer,
                target_lang="de",
                references_tokenized=sentences.references_tokenized,
            )
            line += f"  sacreBLEU {bleu['sacrebleu']['score']:6.2f}  tokenised {bleu['tokenized_bleu']['score']:6.2f}"
        same = sum(a == b for a, b in zip(texts[name], texts["ours float32"], strict=True))
        engine = engines.get(name.removesuffix(", 1 worker"))
        precision_used = (
            engine.decoding_settings()["dtype"] if engine else dtype_name(marians[name].precision)
        )
        print(f"{line}  same as ours float32 {same}/{len(lines)}  ({precision_used})")
    print(ratios_line(seconds))
    if args.profile:
        name = "ours default" if "ours default" in engines else "ours float32"
        run = partial(engines[name].translate, lines, batch_size=args.batch, workers=1)
        print_top_operators(run, args.profile, f"{name}, one batch at a time")


def print_top_operators(run: Callable[[], object], count: int, name: str) -> None:
    """The `count` operators of one run that take the most CPU time themselves (torch.profiler), with their share
    of the run's operator time, their calls and time per call: where a decoding step's time goes."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    with torch.inference_mode(), torch.profiler.profile(activities=activities) as profile:
        run()
    events = sorted(profile.key_averages(), key=lambda event: event.self_cpu_time_total, reverse=True)
    total = sum(event.self_cpu_time_total for event in events)
    print(f"top {count} operators of {name}: {total / 1e6:.2f} s of operator time")
    for event in events[:count]:
        share, per_call = event.self_cpu_time_total / total, event.self_cpu_time_total / event.count
        print(f"    {event.key[:48]:48s} {share:6.1%} {event.count:7,} calls {per_call:9.1f} us a call")


def seconds_to_first_line(model: str, sources: list[str], lines: int, device: str) -> float:
    """Seconds from starting `vaswani-translate MODEL` on `lines` lines of standard input (`sources` over and over)
    to its first translated line. A thread writes the input, as a pipe's writer would: the command reads it a
    buffer at a time."""
    command = [sys.executable, "-m", "vaswani_transformer", "translate", model, "--device", device]
    text = "".join(f"{sources[i % len(sources)]}\n" for i in range(lines)).encode()
    start = time.perf_counter()
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdin is not None and process.stdout is not None

    def feed() -> None:
        try:
            process.stdin.write(text)
            process.stdin.close()
        except (BrokenPipeError, ValueError):  # the command was ended once it had answered
            pass

    threading.Thread(target=feed, daemon=True).start()
    try:
        process.stdout.readline()
        return time.perf_counter() - start
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument(
        "--batch",
        type=int,
        help=f"sentences per batch (fixed-length run: 16; --model: translate()'s default, {BATCH_SIZE})",
    )
    parser.add_argument("--source_length", type=int, default=20)
    parser.add_argument("--new_tokens", type=int, default=20, help="output tokens per sentence (fixed)")
    add_device_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ctranslate2", action="store_true", help="also time our model exported to CTranslate2"
    )
    parser.add_argument(
        "--onnx",
        action="store_true",
        help="with --model: also its ONNX export in ONNX Runtime (float32, CPU)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="both models decode with a static cache and a torch.compile'd forward (CUDA graphs on a GPU); "
        "with --model: also ours through translate()'s compiled path (cuda_graphs; on a CPU, Inductor), its "
        "first run (compiling included) timed alone",
    )
    parser.add_argument("--model", help="a trained model folder: translate --source with it instead")
    parser.add_argument(
        "--source", type=Path, help="source sentences (with --model; default: --recipe's test)"
    )
    parser.add_argument("--references", type=Path, help="reference translations of --source: adds BLEU")
    parser.add_argument(
        "--references_tokenized", type=Path, help="tokenised references of --source (Multi30k lc.norm.tok)"
    )
    parser.add_argument("--recipe", default="tatoeba", help="with --model and no --source: its test split")
    parser.add_argument("--max_sentences", type=int, default=1000)
    parser.add_argument(
        "--int8_alternatives", action="store_true", help="with --model: also torch.ao's quantize_dynamic"
    )
    parser.add_argument(
        "--earlier_code",
        type=Path,
        help="with --model: also its weights in the model code of this folder of .py files (before/after)",
    )
    parser.add_argument(
        "--first_line",
        action="store_true",
        help="with --model: only the time to vaswani-translate's first line on a 100,000-line standard input",
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="with --model: then the N operators that take the most time in one run of ours default "
        "(one batch at a time, so every operator is in one thread)",
    )
    args = parser.parse_args()
    if args.batch is None:
        args.batch = BATCH_SIZE if args.model else 16
    if args.first_line and not args.model:
        parser.error("--first_line times vaswani-translate on a trained --model")
    if args.profile < 0 or (args.profile and not args.model):
        parser.error("--profile N (N > 0) profiles a trained --model's decoding")
    if args.earlier_code and not args.model:
        parser.error("--earlier_code decodes a trained --model's weights with other code")
    if args.onnx and not args.model:
        parser.error("--onnx times a trained --model's export")
    if (args.source or args.references or args.references_tokenized) and not args.model:
        parser.error("--source and --references are the sentences of --model")
    if (args.references or args.references_tokenized) and not args.source:
        parser.error("--references and --references_tokenized need the --source they translate")
    print(
        f"device {args.device}, dtype {args.dtype}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    if args.first_line:
        sources = test_set(args).sources
        seconds = seconds_to_first_line(args.model, sources, 100_000, args.device)
        alone = seconds_to_first_line(args.model, sources, 1, args.device)  # start-up, loading, one sentence
        print(
            f"vaswani-translate: the first of 100,000 lines translated after {seconds:.1f} s (target: 5 s); "
            f"a one-line input's after {alone:.1f} s"
        )
    elif args.model:
        trained_model_run(args)
    else:
        fixed_length_runs(args, print_peaks(args.device, peak_size(args)))


if __name__ == "__main__":
    main()
