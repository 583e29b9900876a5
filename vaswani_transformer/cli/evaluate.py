r"""Translate a test set with a saved model and report BLEU.

Decoding follows the model's generation config (this package: the paper's §6.1 beam 4, GNMT length penalty
α = 0.6 or the α a training run saved (the main job on a CPU chooses it on dev), max output length = input length + 50), in
length-sorted batches, a buffer at a time as vaswani-translate decodes (its default --buffer_lines); --num-beams and --length-penalty override it. The engine is PyTorch
(default), the model's ONNX export in ONNX Runtime (--engine onnxruntime) or its CTranslate2 export (--engine
ctranslate2), int8 with --quantize int8 (PyTorch, CTranslate2), with the same options as vaswani-translate.
BLEU is case-sensitive unless the model's tokenizer lowercases. Writes hypotheses.txt and scores.json (with the
decoding used: engine, quantization, precision, search) into --output_dir, by default a folder beside the model
(runs/tatoeba-en-de/final-evaluation for runs/tatoeba-en-de/final), never into the model folder, whose files
vaswani-push publishes; --name NAME writes NAME_hypotheses.txt and NAME_scores.json instead, and an earlier
evaluation's files are replaced only with --overwrite. Prints the scores for a reader, or with --json the
scores.json object alone (machine-readable stdout).

    vaswani-evaluate runs/tatoeba-en-de/final --source test.en --references test.de
    vaswani-evaluate runs/tatoeba-en-de/final --source test.en --references test.de \
        --engine ctranslate2 --quantize int8 --name ct2-int8 --output_dir evaluations/tatoeba

Multi30k test_2016_flickr, lowercased tokenised BLEU comparable to published numbers:
    vaswani-evaluate runs/multi30k/final \
        --source ../shared/data/multi30k/test_2016_flickr.en --references ../shared/data/multi30k/test_2016_flickr.de \
        --references-tokenized ../shared/data/multi30k-tok/test_2016_flickr.lc.norm.tok.de

WMT14 newstest2014 (cased, compound-split tokenised BLEU as in the paper):
    vaswani-evaluate runs/wmt14-base/final \
        --source ../shared/data/wmt14-newstest/newstest2014.sacrebleu.en \
        --references ../shared/data/wmt14-newstest/newstest2014.sacrebleu.de --split-compounds

Exit status: 0 when scored, 2 for bad options or input, a missing model, scores it would replace without
--overwrite, another evaluation of the same --name running (named by its PID and host; nothing is decoded then),
or an --output_dir that cannot take the files (read-only, or full; nothing is decoded then), or one that filled
up while decoding (the earlier files stay as they were).
"""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..engines.options import EngineOptions
from ..files.paths import check_input_file
from ..files.reading import read_text_lines
from .decoding import add_decoding_arguments, engine_options, generate_overrides


def read_lines(path: Path | None) -> list[str] | None:
    """Lines of a UTF-8 text file, split at "\\n" only (None for no file)."""
    return None if path is None else read_text_lines(path)


def default_output_dir(model_dir: Path) -> Path:
    """Where an evaluation's files go unless told: a folder beside the model, named after it."""
    return model_dir.parent / f"{model_dir.name}-evaluation"


def parse_args(argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, EngineOptions]:
    """Command-line arguments and the engine they name, checked before anything is loaded."""
    parser = argparse.ArgumentParser(
        prog="vaswani-evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "model_dir",
        type=Path,
        help="model folder, e.g. the final/ of a vaswani-train run (model + tokenizer)",
    )
    parser.add_argument("--source", type=Path, required=True, help="source sentences, one a line")
    parser.add_argument("--references", type=Path, required=True, help="reference translations, one a line")
    parser.add_argument(
        "--references_tokenized",
        "--references-tokenized",
        type=Path,
        help="tokenised references (e.g. Multi30k lc.norm.tok)",
    )
    parser.add_argument(
        "--target_lang", "--target-lang", default="de", help="target language for Moses tokenisation"
    )
    parser.add_argument(
        "--split_compounds", "--split-compounds", action="store_true", help="WMT14 ##AT## compound splitting"
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--name",
        default="",
        help="write NAME_hypotheses.txt and NAME_scores.json (NAME: ASCII letters, digits, '.', '_' and '-', "
        "starting with a letter or digit)",
    )
    parser.add_argument(
        "--output_dir",
        "--output-dir",
        type=Path,
        help="folder for the hypotheses and scores (default: MODEL_DIR-evaluation, beside the model; never inside "
        "it: vaswani-push publishes the model folder)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an earlier evaluation's files")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the scores as one JSON object (what NAME_scores.json holds), only",
    )
    args = parser.parse_args(argv)
    for path in (args.source, args.references, args.references_tokenized):
        try:
            if path is not None:
                check_input_file(path)
        except OSError as error:
            parser.error(str(error))
    from ..evaluation.scoring import evaluation_prefix

    try:
        prefix = evaluation_prefix(args.name)
    except ValueError as error:
        parser.error(str(error))
    args.output_dir = args.output_dir or default_output_dir(args.model_dir)
    if args.output_dir.resolve().is_relative_to(args.model_dir.resolve()):
        parser.error(
            f"--output_dir {args.output_dir} is inside the model folder {args.model_dir}, whose files vaswani-push "
            f"publishes (an evaluation's scores would replace the training run's on the card): give a folder "
            f"beside it (default: {default_output_dir(args.model_dir)})"
        )
    written = {(args.output_dir / f"{prefix}{name}").resolve() for name in ("hypotheses.txt", "scores.json")}
    for flag in ("source", "references", "references_tokenized"):
        path = getattr(args, flag)
        if path is not None and path.resolve() in written:  # an output never lands on an input
            parser.error(
                f"--{flag} {path} is a file this evaluation writes: copy it elsewhere first, or give --name another name"
            )
    return args, engine_options(parser, args)


def evaluate(
    args: argparse.Namespace, options: EngineOptions, sources: list[str], references: list[str]
) -> dict:
    """Refuse to replace earlier scores (before loading), load the engine, and evaluate_model with the
    command's scoring, decoding and output options."""
    from ..engines.load import load_engine
    from ..evaluation.scoring import evaluate_model, scores_file

    scores_file(args.output_dir, args.name, overwrite=args.overwrite)
    return evaluate_model(
        load_engine(args.model_dir, options),
        args.output_dir,
        sources,
        references,
        target_lang=args.target_lang,
        references_tokenized=read_lines(args.references_tokenized),
        split_compounds=args.split_compounds,
        batch_size=args.batch_size,
        name=args.name,
        overwrite=args.overwrite,
        show_progress=True,
        **generate_overrides(args),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Decode, score, and print the scores; returns the exit status (2: bad arguments, a missing model, or it
    would replace earlier scores)."""
    args, options = parse_args(argv)
    try:
        sources, references = read_lines(args.source), read_lines(args.references)
        if not sources:
            raise ValueError(f"{args.source} is empty: give a test set of at least one line.")
        if len(sources) != len(references):
            raise ValueError(
                f"{args.source} has {len(sources)} lines but {args.references} has {len(references)}: a test "
                "set's sources and references must be line-aligned."
            )
        scores = evaluate(args, options, sources, references)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(scores, indent=2))
    else:
        print(summary(scores, args))
    return 0


def summary(scores: dict, args: argparse.Namespace) -> str:
    """The scores for a reader: sacreBLEU with its signature, tokenised BLEU with the references it used, and
    where the files went."""
    from ..evaluation.scoring import evaluation_prefix

    tokenised_against = (
        f"against {args.references_tokenized}"
        if args.references_tokenized is not None
        else "against the references Moses-tokenised here; give --references_tokenized for a test set's own"
    )
    prefix = evaluation_prefix(args.name)
    return "\n".join(
        [
            f"sacreBLEU {scores['sacrebleu']['score']:.2f}  ({scores['sacrebleu']['signature']})",
            f"tokenised BLEU {scores['tokenized_bleu']['score']:.2f}  ({tokenised_against})",
            f"{prefix}hypotheses.txt and {prefix}scores.json written to {args.output_dir}",
        ]
    )
