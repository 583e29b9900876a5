"""MkDocs hook: the parts of the site that are made from the code at build time, so that they cannot go stale.

A page asks for a generated part with a marker line, `<!-- generated: NAME -->`, which `on_page_markdown`
replaces with `GENERATED[NAME](page_path)`:

- `cli-reference`: each console command of pyproject.toml's [project.scripts], with its `--help`;
- `exit-statuses`: what each command documents of its exit statuses;
- `bad-input-cases`: the cases of tests/test_bad_inputs.py, by command, with the message each must print;
- `resume-may-change`: the settings a `vaswani-train --resume` may change (training/options.py);
- `results`: benchmarks/RESULTS.md itself;
- `changelog`: CHANGELOG.md itself.

Files outside docs/ that the site shows (benchmarks/RESULTS.md as results.md, benchmarks/*.png at the site's
root, README.md as index.md) can be linked as the repository has them (`../benchmarks/RESULTS.md` from a page in
docs/, `main_job_curve.png` from RESULTS.md): `site_links` points such links at the site's copies, so a link
reads right on GitHub and on the site alike.
"""

import ast
import contextlib
import functools
import importlib
import io
import os
import posixpath
import re
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


def cli_reference() -> str:
    sections = [
        f"## `{command}`\n\n```text\n{command_help(target)}\n```"
        for command, target in console_commands().items()
    ]
    return "\n\n".join(sections)


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
    merged into it, every dict literal assigned to a name ending in CASES), read without importing it (a message
    computed by the test shows as such)."""
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
        message = fields["message"]
        text = message.value if isinstance(message, ast.Constant) else "(computed by the test)"
        by_command.setdefault(fields["command"].value, []).append((key.value, text))
    return by_command


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
