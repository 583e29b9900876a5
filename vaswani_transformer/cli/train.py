r"""Train the paper's Transformer, build the final model, and report BLEU on a held-out test set.

Every flag is a setting of `TrainOptions` and a key of the recipe files (`--max_steps` or `--max-steps`). A
recipe sets the defaults for one job; flags given after it override them. Without --recipe the `tatoeba`
recipe runs: a model on the embedded Tatoeba English-German corpus, sized for a CPU (bigger on a CUDA GPU).

    vaswani-train                                   # the main job (recipe tatoeba)
    vaswani-train --recipe multi30k                 # Multi30k En-De from ../shared/data
    vaswani-train --recipe multi30k --data_dir DIR  # ... from DIR/multi30k, DIR/multi30k-tok
    vaswani-train --recipe multi30k --preset base --lr_scale 0.72 --output_dir runs/m30k-base
    vaswani-train --push_to_hub you/tatoeba-en-de --report_to tensorboard   # share, live curves
    accelerate launch --multi_gpu --num_processes 8 -m vaswani_transformer train --recipe wmt14-base  # 8 GPUs

Exit status: 0 on success, 2 for bad options or inputs (found before any training), 3 when training diverged or
collapsed (the message says what to change; nothing is scored), 4 when --push_to_hub failed (the model is
saved and scored; the message says how to retry), 5 when a write failed once the run started (a full disk, a
read-only folder: the message names the path; what was half-written is removed, the last whole checkpoint is
kept, and the same command with --resume continues once there is room).
"""

import argparse
import json
import logging
import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path

from transformers import HfArgumentParser
from transformers.hf_argparser import string_to_bool

from ..files.manifests import CacheError
from ..files.writing import WriteError
from ..training.options import (
    DEFAULT_RECIPE,
    TrainOptions,
    applies_cuda_section,
    by_steps_note,
    cuda_section_note,
    fitted_to_steps,
    option_groups,
    option_names,
    recorded_settings,
)
from ..training.recipes import available_recipes, load_recipe
from .command import Interrupted, add_verbose_option, log_to_stderr

WRITE_FAILED = 5  # the exit status of a run that a full disk or read-only folder stopped


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the docstring's layout and shows every default (the recipe's, when one is given), but a `--no_FLAG`'s,
    which is its `--FLAG`'s."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if isinstance(action, argparse._StoreFalseAction):
            return action.help
        return super()._get_help_string(action)


class GroupedArgumentParser(HfArgumentParser):
    """HfArgumentParser with TrainOptions' settings in their groups (`option_groups`), and a `--no_FLAG` that says
    what it does rather than repeating `--FLAG`'s help."""

    def _add_dataclass_arguments(self, dtype: type) -> None:
        hints = typing.get_type_hints(dtype)
        for title, group_fields in option_groups().items():
            group = self.add_argument_group(title)
            for option in group_fields:
                option.type = hints[option.name]
                self._parse_dataclass_field(group, option)
        for action in self._actions:
            if action.option_strings[0].startswith("--no_"):
                action.help = f"--{action.dest} false"


def parse_options(
    argv: Sequence[str] | None = None, prog: str = "vaswani-train", description: str | None = __doc__
) -> TrainOptions:
    """Options from the command line: the recipe's values (its cuda: section where it applies) as defaults,
    given flags on top. With --resume, the run's recorded settings are the defaults instead (unless --recipe or
    --cuda_section names another source than the run's): the flags given are then what is compared with them."""
    first = argparse.ArgumentParser(prog=prog, add_help=False)
    first.add_argument("--recipe")
    first.add_argument("--cuda_section", "--cuda-section", type=string_to_bool, nargs="?", const=True)
    known = first.parse_known_args(argv)[0]
    cuda = applies_cuda_section(known.cuda_section)
    parser = GroupedArgumentParser(
        TrainOptions, prog=prog, description=description, formatter_class=HelpFormatter
    )
    parser.epilog = (
        f"recipes: {', '.join(available_recipes())} (vaswani_transformer/training/recipes/*.yaml; every "
        "default: defaults.yaml there)"
    )
    _accept_none(parser)
    add_verbose_option(parser)
    name = known.recipe or DEFAULT_RECIPE
    recipe = load_recipe(name, allowed=option_names(), cuda=cuda)
    parser.set_defaults(**recipe, recipe=name, cuda_section=cuda)
    (options,) = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    if fitted := fitted_to_steps(
        options
    ):  # the recipe's values for the steps this run trains, under the flags
        parser.set_defaults(**fitted)
        (options,) = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    from ..training.run_folder import read_run_record

    record = read_run_record(options.output_dir) if options.resume else None
    if record is not None and _same_source(known, cuda, record):
        parser.set_defaults(**recorded_settings(record))
        (options,) = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    return options


def _accept_none(parser: HfArgumentParser) -> None:
    """`--FLAG none` gives None to a number setting that takes it, as `null` does in a recipe: the way to switch
    off a recipe's value from the command line (`--max_train_minutes none`: the tatoeba recipe by steps alone)."""
    hints = typing.get_type_hints(TrainOptions)
    for action in parser._actions:
        hint = hints.get(action.dest)
        if hint is not None and type(None) in typing.get_args(hint) and action.type in (int, float):
            action.type = _number_or_none(action.type)


def _number_or_none(convert: Callable[[str], float]) -> Callable[[str], float | None]:
    def parse(text: str) -> float | None:
        return None if text.strip().lower() in ("none", "null") else convert(text)

    parse.__name__ = convert.__name__  # argparse's "invalid float value" names the type
    return parse


def _same_source(known: argparse.Namespace, cuda: bool, record: dict) -> bool:
    """Whether the run's record, rather than a recipe, gives the defaults of a --resume: no --recipe or
    --cuda_section is given that names another than the run's."""
    return known.recipe in (None, record.get("recipe")) and (
        known.cuda_section is None or cuda == record.get("cuda_section")
    )


def _report(result) -> None:
    """The scores, examples and where the model is, on stdout."""
    scores = result.scores
    print(f"trained in {result.train_seconds / 60:.1f} min")
    if result.dev_scores is not None:
        print(f"dev sacreBLEU: {result.dev_scores['sacrebleu']['score']:.2f}")
    print(f"test sacreBLEU: {scores['sacrebleu']['score']:.2f}  ({scores['sacrebleu']['signature']})")
    print(f"test tokenised BLEU: {scores['tokenized_bleu']['score']:.2f}")
    for source, translation in result.example_translations.items():
        print(f"  {source}  ->  {translation}")
    print(json.dumps({"model_dir": str(result.model_dir), "scores": str(result.model_dir / "scores.json")}))
    if result.hub_url is not None:
        print(f"pushed to the Hub: {result.hub_url}")
    print(
        f"model saved to {result.model_dir}: AutoModelForSeq2SeqLM / AutoTokenizer.from_pretrained(...) after "
        "`vaswani_transformer.register_auto_classes()`, or with trust_remote_code=True"
    )


def _how_to_continue(output_dir: Path) -> str:
    """Where --resume would continue a run that a failed write stopped."""
    from ..training.checkpoints import whole_checkpoints

    checkpoints = whole_checkpoints(output_dir, for_resume=True)[0] if output_dir.is_dir() else []
    start = f"from {checkpoints[-1]}" if checkpoints else "from the start (no checkpoint was saved whole)"
    return f"Once there is room, the same command with --resume continues the run {start}."


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, train, evaluate, report; returns the exit status."""
    log_to_stderr()
    try:
        options = parse_options(argv)
    except (ValueError, FileNotFoundError, WriteError) as error:  # bad options: nothing has run yet
        print(f"error: {error}", file=sys.stderr)
        return 2
    return train(options)


def train(options: TrainOptions) -> int:
    """Check the inputs, train, evaluate, report; returns the exit status."""
    from ..training.checks import check_inputs
    from ..training.job import train_and_evaluate
    from ..training.job_data import CorpusError
    from ..training.monitoring import TrainingFailure
    from ..training.run_folder import OPTIONS_FILE, RunFolderError

    try:
        check_inputs(options)
    except (ValueError, FileNotFoundError, WriteError) as error:  # bad inputs: nothing has run yet
        print(f"error: {error}", file=sys.stderr)
        return 2
    logger = logging.getLogger(__name__)
    logger.info(f"recipe {options.recipe}; run folder {options.output_dir}")
    for note in (cuda_section_note(options), by_steps_note(options)):
        if note is not None:
            logger.info(note)
    try:
        result = train_and_evaluate(options)
    except KeyboardInterrupt:
        if (Path(options.output_dir) / OPTIONS_FILE).is_file():
            raise Interrupted(
                f"the run can continue: the same command with --resume ({options.output_dir})"
            ) from None
        raise
    except (CorpusError, RunFolderError, FileNotFoundError, CacheError) as error:  # found before training
        print(f"error: {error}", file=sys.stderr)
        return 2
    except TrainingFailure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 3
    except WriteError as error:  # a full disk or read-only folder once the run started
        print(f"error: {error}. {_how_to_continue(Path(options.output_dir))}", file=sys.stderr)
        return WRITE_FAILED
    if result is None:  # not the main process of a multi-process run
        return 0
    _report(result)
    return 4 if options.push_to_hub is not None and result.hub_url is None else 0
