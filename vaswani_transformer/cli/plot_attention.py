r"""Draw what attention does for one sentence: every head of a layer and their average, as PNG heat maps.

The model translates the sentence with its own decoding (or takes --translation), then one forward pass with
eager attention records the weights. Writes cross_attention_layer<L>.png (rows: the translation's tokens,
columns: the source's) and encoder_self_attention_layer<L>.png, or the kinds given with --kinds.

    vaswani-plot-attention runs/tatoeba-en-de/final "Where is the train station?" --output_dir pictures
    vaswani-plot-attention runs/tatoeba-en-de/final "I love you." --translation "Ich liebe dich." --layer 1

Exit status: 0 when the pictures are written, 2 for bad options, a missing model, or an --output_dir that cannot
be written.
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..files.paths import check_apart, is_local_path
from ..files.writing import WriteError, check_writable, write_failures_named
from ..trust import TRUST_FLAG, TRUST_HELP
from .command import add_verbose_option

FILE_NAMES = {
    "cross": "cross_attention_layer{}.png",
    "encoder": "encoder_self_attention_layer{}.png",
    "decoder": "decoder_self_attention_layer{}.png",
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    parser = argparse.ArgumentParser(
        prog="vaswani-plot-attention",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", help="trained model folder or Hub id")
    parser.add_argument("sentence", help="source sentence")
    parser.add_argument("--translation", help="target sentence to force (default: the model's translation)")
    parser.add_argument("--layer", type=int, default=-1, help="layer to draw, 1 = first, -1 = last")
    parser.add_argument("--kinds", nargs="+", choices=sorted(FILE_NAMES), default=["cross", "encoder"])
    parser.add_argument(TRUST_FLAG, "--trust-remote-code", action="store_true", help=TRUST_HELP)
    parser.add_argument(
        "--output_dir",
        "--output-dir",
        type=Path,
        default=Path("."),
        help="folder for the PNGs (not the model folder or one inside it)",
    )
    add_verbose_option(parser)
    args = parser.parse_args(argv)
    if args.layer == 0:
        parser.error("--layer counts from 1 (first) or from -1 (last)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Translate, record attention, draw; returns the exit status."""
    args = parse_args(argv)
    from ..evaluation.loading import load_for_decoding
    from ..plotting import attention_maps, plot_attention

    model_folder = args.model if is_local_path(args.model) else None  # a Hub id: the Hub's cache
    try:  # pictures beside the model folder, never among its files
        check_apart(
            "--output_dir",
            args.output_dir,
            {"the model folder": model_folder},
            may_contain={"the model folder"},
        )
        check_writable(args.output_dir, "--output_dir")
        model, tokenizer = load_for_decoding(
            args.model, device="cpu", trust_remote_code=args.trust_remote_code
        )
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    translations = None if args.translation is None else [args.translation]
    (maps,) = attention_maps(model, tokenizer, [args.sentence], translations)
    print(f"{args.sentence}  ->  {tokenizer.convert_tokens_to_string(maps.target_tokens[:-1])}")
    layer = args.layer - 1 if args.layer > 0 else args.layer
    for kind in args.kinds:
        count = len(maps.of(kind)[0])
        if not -count <= layer < count:
            print(
                f"error: --layer {args.layer}: the model has {count} layers of {kind} attention.",
                file=sys.stderr,
            )
            return 2
    try:
        with write_failures_named(args.output_dir, "--output_dir"):
            args.output_dir.mkdir(parents=True, exist_ok=True)
        for kind in args.kinds:
            number = layer % len(maps.of(kind)[0]) + 1
            path = args.output_dir / FILE_NAMES[kind].format(number)
            print(f"wrote {plot_attention(maps, path, kind=kind, layer=layer, choose='--output_dir')}")
    except WriteError as error:  # the disk filled up meanwhile: no half-written picture is left
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
