"""Decoding speed: our generate() against MarianMTModel.generate() (and our CTranslate2 export), same run.

    python benchmarks/bench_decoding.py                                  # CPU: d512 6+6, vocabulary 8k
    python benchmarks/bench_decoding.py --device cuda --dtype bfloat16 --vocab_size 37000 --batch 64
    python benchmarks/bench_decoding.py --device cuda --dtype bfloat16 --vocab_size 37000 --batch 64 --compile
    python benchmarks/bench_decoding.py --model runs/multi30k/final \\
        --source ../shared/data/multi30k/test_2016_flickr.en               # a trained model on real sentences

Fixed-length run (default): both models get the same random weights (Marian with our interleaved position table,
zero attention biases), --batch source sentences of --source_length tokens, and decode exactly --new_tokens tokens
(min = max), so both do the same work; beam 4 (the paper's) and greedy. With --model, the trained model and its
Marian copy translate the --source file with the model's decoding settings (generation_config) in length-sorted
batches, as `translate()` does; Marian's length penalty is |Y|^α, ours GNMT, so their outputs can differ slightly.
--compile (fixed-length run): both models decode with transformers' static cache and a torch.compile'd forward
(CUDA graphs on a GPU); the untimed first round of each shape pays the compiling.
Figures: sentences/s, output tokens/s, single-sentence latency (batch 1), peak GPU memory; medians of --repeats.
"""

import argparse
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
from peers import add_device_arguments, alternating_medians, marian_twin, peak_memory_mb
from transformers import PreTrainedModel

from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
from vaswani_transformer.translate import length_sorted_batches


def marian_copy(model: VaswaniTransformerForConditionalGeneration) -> PreTrainedModel:
    """A MarianMTModel computing our model's function: same weights, our position table, zero attention biases."""
    marian = marian_twin(model.config)
    state = {name.replace("feed_forward.", ""): value for name, value in model.state_dict().items()}
    state["model.shared.weight"] = model.get_input_embeddings().weight
    missing, unexpected = marian.load_state_dict(state, strict=False)
    assert not unexpected, unexpected
    positions = model.get_encoder().embed_positions(torch.arange(marian.config.max_position_embeddings))
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


def fixed_length_runs(args: argparse.Namespace) -> None:
    """Both models on random sources, exactly --new_tokens output tokens each, beam 4 and greedy."""
    torch.manual_seed(0)
    config = VaswaniTransformerConfig.from_preset(args.preset, vocab_size=args.vocab_size)
    dtype = getattr(torch, args.dtype)
    ours = VaswaniTransformerForConditionalGeneration(config).to(args.device, dtype).eval()
    models = {"vaswani": ours, "marian": marian_copy(ours)}
    if args.compile:
        # Both forwards run through one transformers wrapper, which torch.compile caches by code object: each
        # model, batch size, beam count and first/later step is an entry, more than the default limit of 8.
        torch._dynamo.config.recompile_limit = 64
        for model in models.values():
            compile_forward(model)
    sources = torch.randint(4, args.vocab_size, (args.batch, args.source_length), device=args.device)
    sources[:, -1] = config.eos_token_id
    exported = ctranslate2_twins(ours, args) if args.ctranslate2 else {}
    for beams in (4, 1):
        settings = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens, "num_beams": beams}
        if args.compile:  # the forward is compiled already: generate() must not compile its caller again
            settings |= {"cache_implementation": "static", "disable_compile": True}
        if beams > 1:
            settings["length_penalty"] = ours.generation_config.length_penalty
        batch = {
            name: partial(model.generate, input_ids=sources, **settings) for name, model in models.items()
        }
        single = {
            name: partial(model.generate, input_ids=sources[:1], **settings) for name, model in models.items()
        }
        for name, decode in exported.items():
            batch[name] = partial(decode, sources, beams, args.new_tokens)
            single[name] = partial(decode, sources[:1], beams, args.new_tokens)
        with torch.inference_mode():
            seconds = alternating_medians(batch, args.repeats, args.device)
            latency = alternating_medians(single, args.repeats, args.device)
            memory = {name: peak_memory_mb(batch[name], args.device) for name in models}
        for name in batch:
            report(name, beams, args.batch, args.new_tokens, seconds[name], latency[name], memory.get(name))
        ratios = ", ".join(
            f"{name} {seconds['marian'] / seconds[name]:.2f}x (latency {latency['marian'] / latency[name]:.2f}x)"
            for name in batch
        )
        print(f"beam {beams}: sentences/s relative to MarianMTModel: {ratios}")


def compile_forward(model: PreTrainedModel) -> None:
    """The model's forward as one compiled graph over transformers' static cache: CUDA graphs on a GPU (greedy and
    beam search alike; transformers' own compile path covers greedy search only), inductor kernels on a CPU."""
    mode = "reduce-overhead" if model.device.type == "cuda" else "default"
    model.forward = torch.compile(model.forward, mode=mode, fullgraph=True)


def report(
    name: str, beams: int, sentences: int, tokens: int, seconds: float, latency: float, memory: float | None
) -> None:
    """One line of figures."""
    extra = f"  peak {memory:7.0f} MB" if memory is not None else ""
    print(
        f"{name:12s} beam {beams}: {seconds * 1e3:8.1f} ms  {sentences / seconds:8.1f} sentences/s  "
        f"{sentences * tokens / seconds:9.0f} output tokens/s  latency (1 sentence) {latency * 1e3:7.1f} ms{extra}"
    )


def ctranslate2_twins(
    model: VaswaniTransformerForConditionalGeneration, args: argparse.Namespace
) -> dict[str, Callable[[torch.Tensor, int, int], object]]:
    """Our model exported to CTranslate2 (token names t0 … tV-1), run in float32 and with int8 weights."""
    import ctranslate2

    from vaswani_transformer.export import ctranslate2_spec

    class NumberedTokens:  # what the export reads of a tokenizer
        unk_token = "t1"

        def convert_ids_to_tokens(self, ids: int | list[int]) -> str | list[str]:
            return [f"t{i}" for i in ids] if isinstance(ids, list) else f"t{ids}"

    folder = Path(tempfile.mkdtemp(prefix="ct2-bench-"))
    spec = ctranslate2_spec(model.float().cpu(), NumberedTokens(), 1024)
    spec.validate()
    spec.optimize()
    spec.save(str(folder))
    model.to(args.device, getattr(torch, args.dtype))
    threads = {"intra_threads": torch.get_num_threads()} if args.device == "cpu" else {}
    compute_types = {
        "ct2-" + args.dtype: args.dtype,
        "ct2-int8": "int8" if args.device == "cpu" else "int8_bfloat16",
    }
    decoders = {}
    for name, compute_type in compute_types.items():
        translator = ctranslate2.Translator(
            str(folder), device=args.device, compute_type=compute_type, **threads
        )

        def decode(sources: torch.Tensor, beams: int, new_tokens: int, translator=translator) -> object:
            tokens = [[f"t{i}" for i in row] for row in sources.tolist()]
            return translator.translate_batch(
                tokens,
                beam_size=beams,
                min_decoding_length=new_tokens,
                max_decoding_length=new_tokens,
                length_penalty=model.generation_config.length_penalty,
            )

        decoders[name] = decode
    return decoders


def trained_model_run(args: argparse.Namespace) -> None:
    """The trained model and its Marian copy translate the --source file with the model's decoding settings."""
    from vaswani_transformer.evaluation import load_for_decoding

    ours, tokenizer = load_for_decoding(args.model, device=args.device, dtype=getattr(torch, args.dtype))
    lines = Path(args.source).read_text(encoding="utf-8").splitlines()[: args.max_sentences]
    encodings = tokenizer(lines)["input_ids"]
    batches = length_sorted_batches([len(ids) for ids in encodings], args.batch)
    paper = ours.generation_config  # given to Marian too, which has its own defaults
    settings = {name: getattr(paper, name) for name in ("num_beams", "length_penalty", "early_stopping")}
    outputs: dict[str, list[torch.Tensor]] = {}
    seconds: dict[str, float] = {}
    for name, model in (("vaswani", ours), ("marian", marian_copy(ours))):

        def run(m=model, n=name):
            outputs[n] = []
            for batch in batches:
                inputs = tokenizer.pad({"input_ids": [encodings[i] for i in batch]}, return_tensors="pt")
                limit = int(inputs["attention_mask"].sum(-1).max()) + ours.config.max_length_offset
                outputs[n].append(m.generate(**inputs.to(args.device), max_new_tokens=limit, **settings))

        with torch.inference_mode():
            seconds[name] = alternating_medians({name: run}, args.repeats, args.device)[name]
        tokens = sum(int((o[:, 1:] != tokenizer.pad_token_id).sum()) for o in outputs[name])
        print(
            f"{name:8s} {len(lines)} sentences, {settings}: {seconds[name]:7.2f} s  "
            f"{len(lines) / seconds[name]:7.1f} sentences/s  {tokens / seconds[name]:8.0f} output tokens/s"
        )
    texts = {
        name: [
            text
            for batch in outputs[name]
            for text in tokenizer.batch_decode(batch, skip_special_tokens=True)
        ]
        for name in outputs
    }
    same = sum(a == b for a, b in zip(texts["vaswani"], texts["marian"], strict=True))
    print(
        f"speed-up over MarianMTModel: {seconds['marian'] / seconds['vaswani']:.2f}x "
        f"({same}/{len(lines)} translations identical: the forward passes agree exactly, Marian's length penalty is |Y|^α)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="base")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=16, help="sentences per batch")
    parser.add_argument("--source_length", type=int, default=20)
    parser.add_argument("--new_tokens", type=int, default=20, help="output tokens per sentence (fixed)")
    add_device_arguments(parser)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--ctranslate2", action="store_true", help="also time our model exported to CTranslate2"
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="both models decode with a static cache and a torch.compile'd forward (CUDA graphs on a GPU)",
    )
    parser.add_argument("--model", help="a trained model folder: translate --source with it instead")
    parser.add_argument("--source", help="source sentences, one a line (with --model)")
    parser.add_argument("--max_sentences", type=int, default=1000)
    args = parser.parse_args()
    print(
        f"device {args.device}, dtype {args.dtype}, torch {torch.__version__}, threads {torch.get_num_threads()}"
    )
    if args.model:
        if not args.source:
            parser.error("--model needs --source FILE (sentences to translate)")
        if args.compile:
            parser.error(
                "--compile times the fixed-length run only: a file's batches have many shapes to compile"
            )
        trained_model_run(args)
    else:
        fixed_length_runs(args)


if __name__ == "__main__":
    main()
