"""Export a trained model folder (or Hub id) and its tokenizer to CTranslate2, for fast serving.

    vaswani-export-ctranslate2 runs/multi30k/final runs/multi30k/ct2 --quantization int8

Use it to serve translations in production: CTranslate2 decodes on CPU (int8 weights) and GPU without PyTorch,
in C++ (pip install -e '.[ctranslate2]'). Translate with
`vaswani_transformer.engines.CTranslate2Translator(FOLDER).translate([...])`, which reads the tokenizer and the
model's decoding settings from FOLDER. Training, evaluation and the reported BLEU stay with the PyTorch model:
CTranslate2's length penalty is |Y|^α, not the paper's GNMT form, so beam search can differ on close calls.

Written all or nothing: into a temporary sibling folder, moved into place as a whole at the end.
One writer at a time: a second command writing the same folder meanwhile exits 2 naming the first (its PID and host).

Exit status: 0 when exported, 2 for a refused output folder (one another command is writing, too), a model that
cannot be exported, or a write the machine refused (a full disk: nothing is left, the message names the path).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..engines.options import MAX_EXPORT_POSITIONS, WEIGHT_TYPES, check_max_positions
from ..extras import MissingExtra, check_extra
from ..files.paths import check_apart, is_local_path
from ..trust import TRUST_FLAG, TRUST_HELP
from .command import add_verbose_option


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="vaswani-export-ctranslate2", description=__doc__, formatter_class=formatter
    )
    parser.add_argument("model", help="trained model folder (with its tokenizer) or Hub id user/name")
    parser.add_argument(
        "output_dir", type=Path, help="folder for the CTranslate2 model (new or empty; apart from MODEL)"
    )
    parser.add_argument(
        "--quantization",
        choices=WEIGHT_TYPES,
        help="weight type (default float32; int8 for fast CPU serving)",
    )
    parser.add_argument(
        "--max_positions",
        "--max-positions",
        type=int,
        default=1024,
        help=f"longest sentence in tokens, source and output (1024; at most {MAX_EXPORT_POSITIONS:,})",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a non-empty OUTPUT_DIR: the export's files replace those of the same name, other files stay",
    )
    parser.add_argument(TRUST_FLAG, "--trust-remote-code", action="store_true", help=TRUST_HELP)
    add_verbose_option(parser)
    args = parser.parse_args(argv)
    try:
        check_max_positions(args.max_positions, "--max_positions")
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Export and print the output folder; exit status 2 for a refused output folder or model."""
    args = parse_args(argv)
    try:
        check_extra("ctranslate2", "vaswani-export-ctranslate2")
    except MissingExtra as error:
        print(f"vaswani-export-ctranslate2: {error}", file=sys.stderr)
        return 2
    from ..engines.ctranslate2_export import to_ctranslate2

    model_folder = args.model if is_local_path(args.model) else None  # a Hub id: the Hub's cache
    try:
        check_apart("OUTPUT_DIR", args.output_dir, {"the model folder": model_folder})
        output = to_ctranslate2(
            args.model,
            args.output_dir,
            quantization=args.quantization,
            max_positions=args.max_positions,
            overwrite=args.overwrite,
            trust_remote_code=args.trust_remote_code,
        )
    except (OSError, ValueError, ImportError) as error:  # a refused folder, a model that cannot be loaded
        print(f"vaswani-export-ctranslate2: {error}", file=sys.stderr)
        return 2
    print(output)
    return 0
