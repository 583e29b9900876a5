r"""Publish a trained model on the Hugging Face Hub, with a model card filled from its config, options and scores.

The upload holds the weights (safetensors), configs, tokenizer, the model's code and the `vaswani-translation`
pipeline as remote code, scores, training curve and the card (README.md): it loads with
`AutoModelForSeq2SeqLM`, `AutoModel`, `AutoTokenizer` and `pipeline("vaswani-translation", ...)` with
`trust_remote_code=True`, without this package installed. The token comes from --token, HF_TOKEN or
`hf auth login`. --local_dir writes exactly the uploaded files to a folder instead (no network). A folder whose
files name code of their own (an `auto_map` in tokenizer_config.json, say) is refused: it publishes only this
package's code, and runs no folder's code.

    vaswani-push runs/tatoeba-en-de/final --repo_id you/tatoeba-en-de
    vaswani-push runs/tatoeba-en-de/final --repo_id you/tatoeba-en-de --private --revision v1
    vaswani-push runs/tatoeba-en-de/final --repo_id you/tatoeba-en-de --local_dir hub/tatoeba-en-de

A folder that records less than a training run's (a Seq2SeqTrainer fine-tune, any save_pretrained folder) is
described by flags: --source_lang and --target_lang (written into the published config.json too, so the published
folder serves and splits sentences by them), --dataset (its training data on the Hub), --license, and --scores
(a scores.json of vaswani-evaluate, published as the folder's scores):

    vaswani-push fine-tuned/ --repo_id you/fine-tuned --source_lang en --target_lang de \
        --dataset Helsinki-NLP/tatoeba --license cc-by-2.0 --scores fine-tuned-evaluation/scores.json

Exit status: 0 when pushed (or the --local_dir folder is written), 2 for bad options, an incomplete model
folder, an occupied --local_dir (or one another command is writing), a --local_dir the machine refuses (read-only,
or full: nothing is left, the message names the folder and the free space there) or a failed push.
"""

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from huggingface_hub.utils import HFValidationError, validate_repo_id

from ..files.paths import check_apart, check_input_file
from .command import add_verbose_option

CODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*")  # a language code (en, pt-BR) or a Hub licence id (cc-by-4.0)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line arguments (`--repo_id` and `--repo-id` both work)."""
    parser = argparse.ArgumentParser(
        prog="vaswani-push", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model_dir", type=Path, help="trained model folder (e.g. runs/tatoeba-en-de/final)")
    parser.add_argument("--repo_id", "--repo-id", required=True, help="Hub repo, user/name or org/name")
    parser.add_argument("--private", action="store_true", help="create the repo private")
    parser.add_argument("--revision", help="branch to commit to (created if missing; default main)")
    parser.add_argument("--commit_message", "--commit-message", help="commit message")
    parser.add_argument("--token", help="Hub token (default: HF_TOKEN or `hf auth login`)")
    parser.add_argument(
        "--local_dir",
        "--local-dir",
        type=Path,
        help="write the files to this new folder (apart from MODEL_DIR) instead of uploading",
    )
    card = parser.add_argument_group("what the card says of a folder that does not record it")
    card.add_argument("--source_lang", "--source-lang", help="the model's source language code, e.g. en")
    card.add_argument("--target_lang", "--target-lang", help="the model's target language code, e.g. de")
    card.add_argument("--dataset", help="its training data: a Hub dataset id, e.g. Helsinki-NLP/tatoeba")
    card.add_argument(
        "--license", help="its licence, as the Hub names licences, e.g. apache-2.0 or cc-by-4.0"
    )
    card.add_argument("--scores", type=Path, help="its evaluation: a scores.json that vaswani-evaluate wrote")
    add_verbose_option(parser)
    args = parser.parse_args(argv)
    for flag in ("repo_id", "dataset"):
        try:
            if getattr(args, flag) is not None:
                validate_repo_id(getattr(args, flag))
        except HFValidationError as error:
            parser.error(f"--{flag}: {error}")
    if (args.source_lang is None) != (args.target_lang is None):
        parser.error("give --source_lang and --target_lang together (a model translates one pair)")
    for flag in ("source_lang", "target_lang", "license"):
        value = getattr(args, flag)
        if value is not None and not CODE.fullmatch(value):
            parser.error(
                f"--{flag} {value!r}: give a code of letters, digits, '-' and '.', e.g. en or apache-2.0"
            )
    if args.scores is not None:
        try:
            check_input_file(args.scores)
        except OSError as error:
            parser.error(str(error))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Write the Hub folder or push it; returns the exit status (2 for a bad folder or arguments)."""
    args = parse_args(argv)
    from ..hub import CardFacts, push_to_hub, write_hub_folder

    facts = CardFacts(args.source_lang, args.target_lang, args.dataset, args.license, args.scores)
    try:
        if args.local_dir is not None:
            check_apart("--local_dir", args.local_dir, {"the model folder": args.model_dir})
            files = write_hub_folder(args.model_dir, args.local_dir, args.repo_id, facts=facts)
            print(f"wrote {len(files)} files to {args.local_dir}: {', '.join(path.name for path in files)}")
        else:
            url = push_to_hub(
                args.model_dir,
                args.repo_id,
                private=args.private,
                revision=args.revision,
                commit_message=args.commit_message,
                token=args.token,
                facts=facts,
            )
            print(f"pushed {args.model_dir} to {url}")
    except (OSError, ValueError) as error:  # an incomplete or mismatched folder, an occupied --local_dir
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
