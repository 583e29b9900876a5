"""Export a trained model folder (or Hub id) to ONNX for ONNX Runtime: encoder, cross-attention and decoder-step
graphs with dynamic batch and lengths, plus the tokenizer, config and generation config.

    vaswani-export-onnx runs/multi30k/final runs/multi30k/onnx

Decode the folder with `vaswani_transformer.engines.load_onnx_model(FOLDER)` (a model whose generate() runs
the graphs with the package's beam search), or let `vaswani-translate MODEL --engine onnxruntime` export and cache
it for you. Graph inputs and outputs are described in vaswani_transformer/onnx_export.py
(pip install -e '.[onnx]').

Written all or nothing: into a temporary sibling folder, moved into place as a whole at the end.
One writer at a time: a second command writing the same folder meanwhile exits 2 naming the first (its PID and host).

Exit status: 0 when exported, 2 for a refused output folder (one another command is writing, too), a model that
cannot be exported, or a write the machine refused (a full disk: nothing is left, the message names the path).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..extras import MissingExtra, check_extra
from ..files.paths import check_apart, is_local_path
from ..trust import TRUST_FLAG, TRUST_HELP
from .command import add_verbose_option


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="vaswani-export-onnx", description=__doc__, formatter_class=formatter
    )
    parser.add_argument("model", help="trained model folder (with its tokenizer) or Hub id user/name")
    parser.add_argument(
        "output_dir", type=Path, help="folder for the ONNX export (new or empty; apart from MODEL)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty OUTPUT_DIR: the export's files replace those of the same name, other files stay",
    )
    parser.add_argument(TRUST_FLAG, "--trust-remote-code", action="store_true", help=TRUST_HELP)
    add_verbose_option(parser)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Export and print the output folder; exit status 2 for a refused output folder or model."""
    args = parse_args(argv)
    try:
        check_extra("onnx", "vaswani-export-onnx")
    except MissingExtra as error:
        print(f"vaswani-export-onnx: {error}", file=sys.stderr)
        return 2
    from ..engines.onnx_export import to_onnx

    model_folder = args.model if is_local_path(args.model) else None  # a Hub id: the Hub's cache
    try:
        check_apart("OUTPUT_DIR", args.output_dir, {"the model folder": model_folder})
        output = to_onnx(
            args.model, args.output_dir, overwrite=args.overwrite, trust_remote_code=args.trust_remote_code
        )
    except (OSError, ValueError, ImportError) as error:  # a refused folder, a model that cannot be loaded
        print(f"vaswani-export-onnx: {error}", file=sys.stderr)
        return 2
    print(output)
    return 0
