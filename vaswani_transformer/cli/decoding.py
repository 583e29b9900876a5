"""The decoding options `vaswani-translate` and `vaswani-evaluate` share, spelt alike on both
(`--num_beams` and `--num-beams` both work)."""

import argparse
from pathlib import Path
from typing import Any

from ..decoding import BATCH_SIZE
from ..engines.options import DTYPES, ENGINES, QUANTIZATIONS, EngineOptions, check_engine_options
from ..files.manifests import HASH_ALWAYS_BYTES
from ..trust import TRUST_FLAG, TRUST_HELP
from ..values import LENGTH_PENALTY_LIMIT, check_length_penalty, finite_float
from .command import add_verbose_option

ENGINE_HELP = (
    "torch (default): the model in PyTorch. onnxruntime: the model's ONNX export (pip install "
    "-e '.[onnx]' in the checkout), exported on first use into --onnx_cache, run by ONNX Runtime on the CPU in "
    "float32 with the same search as torch. ctranslate2: the model's CTranslate2 export (pip install "
    "-e '.[ctranslate2]' in the checkout), converted on first use into --ctranslate2_cache and reused after; "
    "its beam search divides by |Y|^α, not the paper's GNMT ((5 + |Y|) / 6)^α, so close calls may differ"
)
QUANTIZE_HELP = (
    "none (default) or int8. With --engine ctranslate2: CTranslate2's int8 compute type, the fast CPU path. "
    "With --engine torch (CPU only): dynamic int8 in the encoder's and decoder's linear layers through torchao "
    "(pip install -e '.[int8]'); embeddings and the output projection, which shares their "
    "table, stay unquantized. Eager torchao int8 pays off in large layers; for small models it is slower "
    "than the bfloat16 autocast that auto gives on CPUs where it is faster (benchmarks/bench_decoding.py --model)"
)
DTYPE_HELP = (
    "auto (default): on a GPU, bfloat16 weights where it supports them; on a CPU, float32 weights that "
    "PyTorch computes in bfloat16 autocast where the CPU computes bfloat16 faster (AMX for models at least 256 "
    "wide, AMD CPUs with AVX512-BF16), else in float32. float32 keeps float32 throughout; bfloat16 or float16 "
    "loads the weights so. With "
    "--quantize int8 and --engine torch: auto or float32, for what is not int8. With --engine ctranslate2: "
    "its compute type (auto: float32 on a CPU, bfloat16 on a GPU; with int8: int8 or int8_DTYPE)"
)


CUDA_GRAPHS_HELP = (
    "decode through CUDA graphs (--engine torch on a CUDA GPU): the decoding step compiled over a static cache "
    "and replayed as one launch, one graph per batch shape; batches are padded up to a few shapes (sentences and "
    "source length to powers of two) so a few graphs serve all. The same translations; the first batches of each "
    "shape pay for compiling. Not with --quantize int8"
)


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """--num_beams, --length_penalty, --batch_size, --engine, --quantize, --dtype, --device, --cuda_graphs,
    --ctranslate2_cache, --onnx_cache, --verify_cache, --trust_remote_code, in two groups: decoding, engine;
    --verbose among the command's own options."""
    decoding = parser.add_argument_group("decoding (§6.1)")
    decoding.add_argument("--num_beams", "--num-beams", type=int, help="beam size (default: the model's, 4)")
    decoding.add_argument(
        "--length_penalty",
        "--length-penalty",
        type=finite_float,
        help="length penalty α (default: the model's: 0.6, the main job's CPU model 1.4; GNMT form with --engine torch, |Y|^α with ctranslate2), "
        f"between -{LENGTH_PENALTY_LIMIT:g} and {LENGTH_PENALTY_LIMIT:g}",
    )
    decoding.add_argument(
        "--batch_size",
        "--batch-size",
        type=int,
        help=f"sentences per batch (default {BATCH_SIZE}, fewer where a batch of the longest sentences would not "
        "fit in memory)",
    )
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", choices=ENGINES, default="torch", help=ENGINE_HELP)
    engine.add_argument("--quantize", choices=QUANTIZATIONS, default="none", help=QUANTIZE_HELP)
    engine.add_argument("--dtype", choices=["auto", *DTYPES], default="auto", help=DTYPE_HELP)
    engine.add_argument(
        "--device",
        default="auto",
        help="cpu, cuda, cuda:1, ... (default: cuda when there is one); one this machine has",
    )
    engine.add_argument("--cuda_graphs", "--cuda-graphs", action="store_true", help=CUDA_GRAPHS_HELP)
    engine.add_argument(
        "--ctranslate2_cache",
        "--ctranslate2-cache",
        type=Path,
        help="folder of --engine ctranslate2's conversions, one per model content and quantization "
        "(default: HF_HOME/vaswani_transformer/ctranslate2)",
    )
    engine.add_argument(
        "--onnx_cache",
        "--onnx-cache",
        type=Path,
        help="folder of --engine onnxruntime's exports, one per model content "
        "(default: HF_HOME/vaswani_transformer/onnx)",
    )
    engine.add_argument(
        "--verify_cache",
        "--verify-cache",
        action="store_true",
        help="before reusing a cached conversion, check every file's content (SHA-256), not only the sizes and "
        f"the files up to {HASH_ALWAYS_BYTES >> 20} MiB; a damaged one is converted anew",
    )
    engine.add_argument(TRUST_FLAG, "--trust-remote-code", action="store_true", help=TRUST_HELP)
    add_verbose_option(parser)


def engine_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> EngineOptions:
    """The parsed decoding options, checked before anything is loaded (bad ones exit 2 with the fix)."""
    for name in ("num_beams", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    try:
        check_length_penalty("--length_penalty", args.length_penalty)
    except ValueError as error:
        parser.error(str(error))
    options = EngineOptions(
        engine=args.engine,
        quantize=args.quantize,
        dtype=args.dtype,
        device=args.device,
        cuda_graphs=args.cuda_graphs,
        ctranslate2_cache=args.ctranslate2_cache,
        onnx_cache=args.onnx_cache,
        verify_cache=args.verify_cache,
        trust_remote_code=args.trust_remote_code,
    )
    try:
        check_engine_options(options)
    except ValueError as error:
        # options that parse but do not go together: the one line that says so, not the usage block before it
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    return options


def generate_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """Only the decoding settings given on the command line: the rest is the model's (§6.1)."""
    return {
        name: value for name in ("num_beams", "length_penalty") if (value := getattr(args, name)) is not None
    }
