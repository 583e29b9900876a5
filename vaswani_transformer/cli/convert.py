"""Convert published weights of the paper's architecture into a model folder of this package.

    vaswani-convert fsmt facebook/wmt19-de-en wmt19-de-en
    vaswani-convert fairseq wmt16.en-de.joined-dict.transformer wmt16-en-de

`fsmt` takes a transformers FSMT model (folder or Hub id), `fairseq` a released fairseq Transformer folder
(model.pt, dict.*.txt, bpecodes). The folder then loads with AutoModelForSeq2SeqLM and translates, scores,
fine-tunes, exports and pushes as a trained one does (docs/published-models.md). What this model cannot hold
(separate source and target vocabularies, pre-norm layers, other activations, layer drop, learned positions) is
refused before anything is written, naming what differs; so is a model whose files name code of their own (an
`auto_map`): the conversion reads FSMT models with transformers' own classes and runs no folder's code.

Written all or nothing: into a temporary sibling folder, moved into place as a whole at the end.
One writer at a time: a second command writing the same folder meanwhile exits 2 naming the first (its PID and host).

Exit status: 0 when converted, 2 for a model this package cannot hold, an unreadable input, a refused output
folder (one another command is writing, too), or a write the machine refused (a full disk: nothing is left, the
message names the path).
"""

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .command import add_verbose_option

OVERWRITE_HELP = (
    "write into a non-empty OUT: the converted files replace those of the same name, other files stay"
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments."""
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(prog="vaswani-convert", description=__doc__, formatter_class=formatter)
    sources = parser.add_subparsers(dest="source", required=True, metavar="{fsmt,fairseq}")
    fsmt = sources.add_parser("fsmt", help="a transformers FSMT model: folder or Hub id")
    fsmt.add_argument("model", help="FSMT model folder or Hub id (e.g. facebook/wmt19-de-en)")
    fairseq = sources.add_parser("fairseq", help="a released fairseq Transformer checkpoint folder")
    fairseq.add_argument("checkpoint_dir", type=Path, help="folder with model.pt, dict.*.txt and bpecodes")
    for subcommand in (fsmt, fairseq):
        subcommand.add_argument(
            "out", type=Path, help="folder for the converted model (new or empty; apart from the input)"
        )
        subcommand.add_argument("--overwrite", action="store_true", help=OVERWRITE_HELP)
    for each in (parser, fsmt, fairseq):
        add_verbose_option(each)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Convert and print the output folder; exit status 2 for a refused model or folder."""
    args = parse_args(argv)
    from ..convert import convert_fairseq, convert_fsmt

    try:
        if args.source == "fsmt":  # each checks OUT apart from its input before reading it
            output = convert_fsmt(args.model, args.out, overwrite=args.overwrite)
        else:
            output = convert_fairseq(args.checkpoint_dir, args.out, overwrite=args.overwrite)
    except (OSError, ValueError, ImportError) as error:  # a refused model or folder, an unreadable input
        print(f"vaswani-convert: {error}", file=sys.stderr)
        return 2
    print(output)
    return 0
