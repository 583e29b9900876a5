"""MkDocs hook: the parts of the site that are made from the code at build time, so that they cannot go stale.

A page asks for a generated part with a marker line, `<!-- generated: NAME -->`, which `on_page_markdown`
replaces with `GENERATED[NAME](page_path)`:

- `cli-reference`: each console command of pyproject.toml's [project.scripts]: its description, then a table
  of its options per argument group, each option with an anchor (`cli.md#vaswani-train--max_steps`);
- `exit-statuses`: what each command documents of its exit statuses;
- `bad-input-cases`: the cases of tests/test_bad_inputs.py, by command, with the message each must print;
- `resume-may-change`: the settings a `vaswani-train --resume` may change (training/options.py);
- `train-options`: every setting of `TrainOptions`, by group, with its default (recipes/defaults.yaml) and help;
- `config-fields`, `config-presets`: the model config's fields and defaults; each preset's sizes and changes;
- `results`: benchmarks/RESULTS.md itself;
- `changelog`: CHANGELOG.md itself.

Files outside docs/ that the site shows (benchmarks/RESULTS.md as results.md, benchmarks/*.png at the site's
root, README.md as index.md) can be linked as the repository has them (`../benchmarks/RESULTS.md` from a page in
docs/, `main_job_curve.png` from RESULTS.md): `site_links` points such links at the site's copies, so a link
reads right on GitHub and on the site alike.
"""

import argparse
import ast
import contextlib
import functools
import html
import importlib
import io
import os
import posixpath
import re
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", flags=re.M)
LINK = re.compile(r"(\]\()([^)\s#]+)")  # the target of an inline link or picture, up to any #anchor
PICTURES = sorted((REPO / "benchmarks").glob("*.png"))
# repository file outside docs/ → its path in the site
SITE_COPIES = {
    "benchmarks/RESULTS.md": "results.md",
    "README.md": "index.md",
    "CHANGELOG.md": "changelog.md",
} | {f"benchmarks/{picture.name}": picture.name for picture in PICTURES}
HELP_WIDTH = "100"  # argparse wraps --help to $COLUMNS: the same text on every machine


def console_commands() -> dict[str, str]:
    """{command: "module:function"} from pyproject.toml, in its order."""
    with open(REPO / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]["scripts"]


def entry_point(target: str) -> Callable:
    module, function = target.split(":")
    return getattr(importlib.import_module(module), function)


@functools.cache
def command_help(target: str) -> str:
    """What `COMMAND --help` prints."""
    output = io.StringIO()
    with (
        mock.patch.dict(os.environ, COLUMNS=HELP_WIDTH),
        contextlib.redirect_stdout(output),
        contextlib.suppress(SystemExit),
    ):
        entry_point(target)(["--help"])
    return output.getvalue().rstrip()


@functools.cache
def command_parser(target: str) -> argparse.ArgumentParser:
    """The parser that `COMMAND --help` prints the help of."""
    seen: list[argparse.ArgumentParser] = []

    def record(parser: argparse.ArgumentParser, file: object = None) -> None:
        seen.append(parser)

    with mock.patch.object(argparse.ArgumentParser, "print_help", record), contextlib.suppress(SystemExit):
        entry_point(target)(["--help"])
    return seen[-1]


def markdown_text(text: str) -> str:
    """Plain text as the text of a markdown paragraph or table cell: HTML's and tables' characters escaped."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|").replace("*", "\\*")


def description_markdown(text: str) -> str:
    """A command's description (its module docstring): paragraphs as paragraphs, indented blocks (its examples) as
    shell code."""
    blocks = []
    for block in re.split(r"\n\s*\n", text.strip()):
        if all(line.startswith("    ") for line in block.splitlines()):
            blocks.append(f"```bash\n{textwrap.dedent(block)}\n```")
        else:
            blocks.append(markdown_text(block))
    return "\n\n".join(blocks)


def option_cell(command: str, action: argparse.Action) -> str:
    """An option's spellings but the `-` twin of a `_` flag, with an anchor (#vaswani-train--max_steps)."""
    names = action.option_strings or [action.dest]
    shown = [names[0]] + [name for name in names[1:] if name.replace("-", "_") != names[0].replace("-", "_")]
    anchor = f"{command}--{max(names, key=len).lstrip('-')}"
    spelt = ", ".join(f'<code style="white-space: nowrap">{html.escape(name)}</code>' for name in shown)
    return f'<a id="{anchor}" href="#{anchor}">{spelt}</a>'


VALUE_KINDS = {  # the name of an option's `type` → what its value is, in words
    "int": "integer",
    "float": "number",
    "finite_float": "number",
    "Path": "path",
    "string_to_bool": "true/false",
    "JsonDict": "JSON",
}


def value_cell(action: argparse.Action) -> str:
    """What an option takes: its choices, else the kind of its value ([optional], … for several)."""
    if action.nargs == 0:
        return ""
    if action.choices:
        kind = " \\| ".join(f"`{choice}`" for choice in action.choices)
    else:
        kind = f"*{action.metavar or VALUE_KINDS.get(getattr(action.type, '__name__', ''), 'text')}*"
    shapes = {"?": "[{}]", "+": "{} …", "*": "[{} …]"}
    return shapes.get(action.nargs, "{}").format(kind) if isinstance(action.nargs, str) else kind


def default_cell(action: argparse.Action) -> str:
    """An option's default, each value on a line of its own (a path is not broken at a letter), or nothing."""
    if action.default is None or action.default is False or action.default in (argparse.SUPPRESS, []):
        return ""
    values = action.default if isinstance(action.default, list) else [action.default]
    return "<br>".join(
        f'<code style="white-space: nowrap">{html.escape(str(value)).replace("|", "&#124;")}</code>'
        for value in values
    )


def option_rows(command: str, parser: argparse.ArgumentParser, actions: list[argparse.Action]) -> list[str]:
    formatter = argparse.HelpFormatter(parser.prog)
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for action in actions:
        option = " ".join(filter(None, [option_cell(command, action), value_cell(action)]))
        help_text = markdown_text(formatter._expand_help(action)) if action.help else ""
        rows.append(f"| {option} | {default_cell(action)} | {help_text} |")
    return rows


def command_reference(command: str, target: str) -> str:
    """A command's section: its description, then a table of options per argument group."""
    parser = command_parser(target)
    formatter = argparse.HelpFormatter(command)
    positionals = [
        formatter._format_args(action, action.dest) for action in parser._actions if not action.option_strings
    ]
    parts = [f"## `{command}`", f"```text\n{' '.join([command, '[options]', *positionals])}\n```"]
    parts.append(description_markdown(parser.description or ""))
    for group in parser._action_groups:
        actions = [action for action in group._group_actions if action.help != argparse.SUPPRESS]
        if actions:
            parts.append(f"**{markdown_text(group.title or '')}**")
            parts.append("\n".join(option_rows(command, parser, actions)))
    if parser.epilog:
        parts.append(markdown_text(parser.epilog))
    return "\n\n".join(parts)


def cli_reference() -> str:
    """Every console command's section, in pyproject.toml's order."""
    return "\n\n".join(command_reference(command, target) for command, target in console_commands().items())


def exit_statuses() -> str:
    """A table: each command's "Exit status: ..." paragraph of its --help, else its `main`'s docstring."""
    rows = ["| command | exit status, as the command documents it |", "| --- | --- |"]
    for command, target in console_commands().items():
        found = re.search(r"^Exit status: (.*?)(?:\n\n|\Z)", command_help(target), flags=re.M | re.S)
        text = found.group(1) if found else entry_point(target).__doc__ or ""
        rows.append(f"| `{command}` | {' '.join(text.split())} |")
    return "\n".join(rows)


def bad_input_cases(path: Path = REPO / "tests" / "test_bad_inputs.py") -> dict[str, list[tuple[str, str]]]:
    """{command: [(case, message it must print)]} from the case tables of the test file (CASES and the tables
    merged into it, every dict literal assigned to a name ending in CASES), read without importing it. A message
    is a string, or a `Template("...")` whose text names paths of the test's workspace (shown as written)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tables = [
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and ast.unparse(node.target).endswith("CASES")
        and isinstance(node.value, ast.Dict)
    ]
    by_command: dict[str, list[tuple[str, str]]] = {}
    pairs = [pair for table in tables for pair in zip(table.keys, table.values, strict=True)]
    for key, case in pairs:  # Case(command, arguments, message, ...)
        fields = dict(zip(("command", "arguments", "message"), case.args, strict=False))
        fields |= {keyword.arg: keyword.value for keyword in case.keywords}
        text = case_message(fields["message"])
        by_command.setdefault(fields["command"].value, []).append((key.value, text))
    return by_command


def case_message(node: ast.expr) -> str:
    """The text of a case's message: a string literal, or the literal of a `Template(...)`."""
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "Template" and len(node.args) == 1:
        node = node.args[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    raise ValueError(
        f"tests/test_bad_inputs.py line {node.lineno}: a case's message must be a string or a Template of one, "
        f"so that docs/errors.md can show it; got {ast.unparse(node)}"
    )


def bad_input_table() -> str:
    def cell(text: str) -> str:
        return "`" + text.replace("|", "\\|").replace("`", "'") + "`"

    cases = bad_input_cases()
    parts = [f"{sum(map(len, cases.values()))} cases over {len(cases)} commands."]
    for command, rows in cases.items():
        lines = [
            f"### {command} ({len(rows)} cases)",
            "",
            "| case | its message contains |",
            "| --- | --- |",
        ]
        lines += [f"| {name} | {cell(message)} |" for name, message in rows]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def resume_may_change() -> str:
    """A table: the settings a --resume may change, with why (training/options.py's MAY_CHANGE_ON_RESUME)."""
    from vaswani_transformer.training.options import MAY_CHANGE_ON_RESUME

    rows = ["| may change on `--resume` | why |", "| --- | --- |"]
    rows += [f"| `--{name}` | {why} |" for name, why in MAY_CHANGE_ON_RESUME.items()]
    return "\n".join(rows)


def train_options() -> str:
    """Tables, one per group: each setting of TrainOptions with its default (recipes/defaults.yaml) and help."""
    from vaswani_transformer.training.options import DEFAULTS, option_groups

    parts = []
    for title, group in option_groups().items():
        rows = [
            f"**{markdown_text(title)}**",
            "",
            "| setting | default | what it sets |",
            "| --- | --- | --- |",
        ]
        for option in group:
            flag = f'[`--{option.name}`](../cli.md#vaswani-train--{option.name}){{ style="white-space: nowrap" }}'
            default = DEFAULTS.get(option.name, option.default)
            shown = "" if default is None else markdown_text(f"`{default}`").replace("\\*", "*")
            rows.append(f"| {flag} | {shown} | {markdown_text(option.metadata['help'])} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def config_fields() -> str:
    """A table: each field of the model's config, its type and its default (the paper's base model)."""
    import dataclasses

    from vaswani_transformer import VaswaniTransformerConfig

    own = VaswaniTransformerConfig.__annotations__  # not transformers' PreTrainedConfig's
    rows = ["| field | type | default |", "| --- | --- | --- |"]
    for option in dataclasses.fields(VaswaniTransformerConfig):
        if option.name in own and not option.name.startswith("_"):
            kind = getattr(option.type, "__name__", str(option.type)).replace(" | ", " or ")
            rows.append(f"| `{option.name}` | {kind} | `{option.default!r}` |")
    return "\n".join(rows)


PRESET_SIZES = (
    "d_model",
    "d_ff",
    "num_heads",
    "head_dim_k",
    "num_encoder_layers",
    "num_decoder_layers",
    "dropout",
)


def config_presets() -> str:
    """A table: each preset's sizes (as its config computes them) and what it changes from the base model."""
    from vaswani_transformer import PRESETS, VaswaniTransformerConfig

    rows = [f"| preset | {' | '.join(PRESET_SIZES)} | changes |", "| --- " * (len(PRESET_SIZES) + 2) + "|"]
    for name, changes in PRESETS.items():
        config = VaswaniTransformerConfig.from_preset(name)
        sizes = " | ".join(str(getattr(config, size)) for size in PRESET_SIZES)
        changed = ", ".join(f"`{key}={value!r}`" for key, value in changes.items()) or "(the base model)"
        rows.append(f"| `{name}` | {sizes} | {changed} |")
    return "\n".join(rows)


def results(page_path: str) -> str:
    return site_links(
        (REPO / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8"), page_path, "benchmarks"
    )


def changelog(page_path: str) -> str:
    return site_links((REPO / "CHANGELOG.md").read_text(encoding="utf-8"), page_path, ".")


GENERATED: dict[str, Callable[[str], str]] = {  # marker name → its markdown, for the page at a path
    "cli-reference": lambda page_path: cli_reference(),
    "exit-statuses": lambda page_path: exit_statuses(),
    "bad-input-cases": lambda page_path: bad_input_table(),
    "resume-may-change": lambda page_path: resume_may_change(),
    "train-options": lambda page_path: train_options(),
    "config-fields": lambda page_path: config_fields(),
    "config-presets": lambda page_path: config_presets(),
    "results": results,
    "changelog": changelog,
}


def site_links(markdown: str, page_path: str, source_folder: str) -> str:
    """Links of a page at `page_path` (in docs/) whose text lives in `source_folder` (of the repository),
    pointed at the site's copies of the files they name."""

    def site_target(link: re.Match) -> str:
        target = link.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return link.group(0)
        in_repo = posixpath.normpath(posixpath.join(source_folder, target))
        in_site = in_repo.removeprefix("docs/") if in_repo.startswith("docs/") else SITE_COPIES.get(in_repo)
        if in_site is None:  # not in the site: left for mkdocs to report
            return link.group(0)
        return link.group(1) + posixpath.relpath(in_site, posixpath.dirname(page_path) or ".")

    return LINK.sub(site_target, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    page_path = page.file.src_uri
    markdown = site_links(markdown, page_path, posixpath.dirname(f"docs/{page_path}"))
    return MARKER.sub(lambda marker: GENERATED[marker.group(1)](page_path), markdown)


def on_files(files: Files, config) -> Files:
    """The pictures of benchmarks/, at the site's root."""
    for picture in PICTURES:
        files.append(
            File(picture.name, str(picture.parent), config["site_dir"], config["use_directory_urls"])
        )
    return files
