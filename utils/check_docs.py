"""Checks of the documentation's prose that no test should pin: sizes, the README's first screen, the site's nav,
links, snippets that compile, figures quoted in one document that another one (or the code) owns, and the
rendered API's docstrings. CI runs it after the fast tests; run it after editing docs/, README.md or
benchmarks/RESULTS.md:

    python utils/check_docs.py

Prints each check that failed, with what it found; exit status 0 when all pass, 1 otherwise.
"""

import ast
import importlib
import inspect
import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
README = REPO / "README.md"
RESULTS = REPO / "benchmarks" / "RESULTS.md"
README_MAX_BYTES = 12_000
RESULTS_MAX_BYTES = 25_000
NAV_GROUPS = ["Get started", "How-to guides", "Concepts", "Reference"]  # as Accelerate's docs
DOCSTRING_SECTIONS = ("Args:", "Returns:", "Raises:", "Yields:")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


class MkDocsLoader(yaml.SafeLoader):
    """YAML as MkDocs reads it: `!ENV [NAME, default]` gives the default."""


MkDocsLoader.add_constructor("!ENV", lambda loader, node: loader.construct_sequence(node)[-1])


def mkdocs_config() -> dict:
    return yaml.load(text(REPO / "mkdocs.yml"), Loader=MkDocsLoader)  # noqa: S506 (SafeLoader's subclass)


def nav_pages(entries: object) -> list[str]:
    """The pages of (a part of) mkdocs.yml's nav, as docs/... paths; links out of the site left out."""
    if isinstance(entries, str):
        return [] if "://" in entries else [f"docs/{entries}"]
    values = entries.values() if isinstance(entries, dict) else entries
    return [page for entry in values for page in nav_pages(entry)]


def site_pages() -> list[Path]:
    return sorted((REPO / "docs").rglob("*.md"))


def check_readme_is_a_front_page() -> Iterator[str]:
    """At most 12 KB; its first screen says what it is, then set-up + main job, then the fast tests, with the
    switch for the whole suite."""
    readme = text(README)
    if len(readme.encode()) > README_MAX_BYTES:
        yield f"README.md is {len(readme.encode()):,} bytes, more than {README_MAX_BYTES:,}"
    first_screen = readme[: readme.index("\n## ")]
    for wanted in (
        "Attention Is All You Need",
        "pip install -e . && python scripts/train.py",
        'pip install -e ".[dev]" && HF_HUB_OFFLINE=1 python -m pytest -q',
        "RUN_SLOW=1",
    ):
        if wanted not in first_screen:
            yield f"README.md's first screen (before its first ## heading) lacks {wanted!r}"


def check_results_holds_current_figures_only() -> Iterator[str]:
    """At most 25 KB, and no list of what is owed (benchmarks/gpu_owed.py --dry_run prints that)."""
    results = text(RESULTS)
    if len(results.encode()) > RESULTS_MAX_BYTES:
        yield f"benchmarks/RESULTS.md is {len(results.encode()):,} bytes, more than {RESULTS_MAX_BYTES:,}"
    for owed in re.findall(r"^## .*(?:owed|[Nn]ot measured).*$", results, flags=re.M):
        yield f"benchmarks/RESULTS.md has a section of what is owed ({owed!r}): it belongs to gpu_owed.py"
    for older in re.findall(r"^\|[^\n]*code before[^\n]*$", results, flags=re.M):
        yield f"benchmarks/RESULTS.md has a row measured on older code: {older[:100]}"


def check_the_nav_is_grouped_and_holds_every_page() -> Iterator[str]:
    config = mkdocs_config()
    groups = [next(iter(entry)) for entry in config["nav"] if isinstance(entry, dict)]
    if groups != NAV_GROUPS:
        yield f"mkdocs.yml's nav groups are {groups}, not {NAV_GROUPS}"
    listed = nav_pages(config["nav"])
    pages = {str(path.relative_to(REPO)) for path in site_pages()}
    for page in sorted(pages - set(listed)):
        yield f"{page} is not in mkdocs.yml's nav"
    if not config["site_url"].startswith("http"):
        yield "mkdocs.yml has no site_url (the sitemap would be empty)"
    if {scheme["scheme"] for scheme in config["theme"]["palette"]} != {"default", "slate"}:
        yield "mkdocs.yml's palette lacks its light or dark scheme"
    if "https://arxiv.org/abs/1706.03762" not in json.dumps(config["nav"]):
        yield "mkdocs.yml's nav does not link the paper"


def check_relative_links_lead_to_files() -> Iterator[str]:
    """The README's and the home page's links (mkdocs --strict checks the site's pages)."""
    for document in (README, REPO / "docs" / "index.md"):
        for target in re.findall(r"\]\(([^)#\s]+)", text(document)):
            if "://" not in target and not (document.parent / target).exists():
                yield f"{document.relative_to(REPO)} links {target}, which does not exist"


def check_python_snippets_compile() -> Iterator[str]:
    for document in (README, *site_pages()):
        for block in re.findall(r"```python\n(.*?)```", text(document), flags=re.S):
            try:
                compile(block, str(document), "exec")
            except SyntaxError as error:
                yield f"{document.relative_to(REPO)}: a python snippet does not compile: {error}"


def check_readme_documents_training_commands() -> Iterator[str]:
    bash = "\n".join(re.findall(r"```bash\n(.*?)```", text(README), flags=re.S))
    if "python scripts/train.py" not in bash:
        yield "README.md's commands do not include the main job, `python scripts/train.py`"
    if "--train_source" not in bash:
        yield "README.md's commands do not include training on your own corpus (--train_source)"


def check_the_fine_tuning_page_shows_the_readmes_snippet() -> Iterator[str]:
    """The site's fine-tuning page and the README give the same code (tests/test_docs.py runs the README's)."""

    def snippet(path: Path) -> str:
        page = text(path)
        found = re.search(
            r"```python\n(.*?)```", page[page.index("# Fine-tune with `Seq2SeqTrainer`") :], re.S
        )
        return found.group(1) if found else ""

    if snippet(REPO / "docs" / "fine-tuning.md") != snippet(README):
        yield "docs/fine-tuning.md's snippet is not README.md's \"Fine-tune with `Seq2SeqTrainer`\" snippet"


def decoding_rows() -> list[str]:
    """RESULTS.md's decoding rows: each `| D<n> |` row and its continuation rows (`| | |`), with the row's label
    prefixed to each continuation."""
    rows: list[str] = []
    label = ""
    for line in text(RESULTS).splitlines():
        if re.match(r"\| D\d+ \|", line):
            label = line
            rows.append(line)
        elif line.startswith("| | |") and label:
            rows.append(label.split(" | ")[0] + " " + line)
    return rows


def results_rows(label: str) -> list[list[str]]:
    """The cells of RESULTS.md's table row `label` (D1, ...) and of the rows that continue it (first cell empty)."""
    rows, inside = [], False
    for line in text(RESULTS).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] == label:
            inside = True
        elif not line.startswith("|") or cells[0]:
            inside = False
        if inside:
            rows.append(cells)
    return rows


def bfloat16_weights_bleu_costs() -> list[float]:
    """How much lower bfloat16 weights scored than our float32, in each RESULTS decoding row that measured both
    (one row per engine, or one row with engines and scores separated by " / ")."""
    costs = []
    labels = re.findall(r"^\| (D\d+) \|", text(RESULTS), flags=re.M)
    for label in labels:
        bleu = {}
        for row in results_rows(label):
            engines, scores = row[2].split(" / "), row[5].split(" / ")
            if len(engines) != len(scores):
                engines, scores = [row[2]], [row[5]]
            bleu |= {
                engine.strip(): float(score.split()[0])
                for engine, score in zip(engines, scores, strict=True)
                if re.match(r"\d", score.strip())
            }
        weights = [bleu[engine] for engine in bleu if "bfloat16 weights" in engine]
        single = [bleu[engine] for engine in bleu if engine.startswith(("ours float32", "float32"))]
        if weights and single:
            costs.append(round(single[0] - weights[0], 2))
    return costs


def check_quoted_figures_are_their_sources() -> Iterator[str]:
    """Figures one page quotes that RESULTS.md, a recipe or the corpus owns."""
    from vaswani_transformer.data import load_tatoeba
    from vaswani_transformer.training.recipes import recipe_path

    readme = text(README)
    paragraph = readme[readme.index("Decoding on 2 CPU cores") :].split("\n\n")[0]
    rows = decoding_rows()
    for ratio in re.findall(r"\d+\.\d+×", paragraph):
        if not any(ratio in row for row in rows):
            yield f"README.md quotes {ratio} for decoding, which no decoding row of RESULTS.md holds"
    costs = bfloat16_weights_bleu_costs()
    if costs:
        quoted = f"{min(costs):.2f}" if min(costs) == max(costs) else f"{min(costs):.2f}–{max(costs):.2f}"
        for page in ("docs/decoding-speed.md", "docs/decisions/automatic-bf16.md"):
            flat = " ".join(text(REPO / page).split())
            if not re.search(rf"bfloat16 weights[^.]* {quoted} (BLEU )?lower", flat):
                yield f"{page} does not quote bfloat16 weights' cost as RESULTS.md's {quoted} BLEU lower"
    recipe = yaml.safe_load(text(recipe_path("tatoeba")))
    gpu = recipe["cuda"]["length_penalty"]
    cpu = "chosen on dev" if recipe.get("length_penalty_choices") else recipe["length_penalty"]
    quoted = f"α {cpu} for the main job's CPU model (the paper's {gpu} elsewhere)"
    for page in (README, REPO / "docs" / "decoding.md"):
        if quoted not in text(page):
            yield f"{page.relative_to(REPO)} does not quote the recipe's length penalty as {quoted!r}"
    pairs = f"{len(load_tatoeba()[0]):,} pairs"
    if pairs not in text(REPO / "docs" / "data.md"):
        yield f"docs/data.md does not give the embedded corpus's size, {pairs}"


def rendered_objects() -> Iterator[tuple[str, object]]:
    """Every public object of the modules and objects the API pages render (`::: dotted.name`), with its
    public members: what mkdocstrings shows."""
    for page in sorted((REPO / "docs" / "reference").glob("*.md")):
        for name in re.findall(r"^::: ([\w.]+)", text(page), flags=re.M):
            target = resolve(name)
            yield name, target
            members = vars(target).items() if inspect.isclass(target) or inspect.ismodule(target) else []
            for member_name, member in members:
                if member_name.startswith("_") or not (inspect.isfunction(member) or inspect.isclass(member)):
                    continue
                if inspect.ismodule(target) and getattr(member, "__module__", None) != target.__name__:
                    continue  # imported, rendered where it is defined
                yield f"{name}.{member_name}", member
                if inspect.isclass(member) and inspect.ismodule(target):
                    for method_name, method in vars(member).items():
                        method = getattr(method, "__func__", method)  # a classmethod's or staticmethod's
                        if not method_name.startswith("_") and inspect.isfunction(method):
                            yield f"{name}.{member_name}.{method_name}", method


def resolve(name: str) -> object:
    """The module, class or function a dotted name names."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ImportError(name)


def check_docstrings_have_one_section_of_each_kind() -> Iterator[str]:
    """A rendered docstring with two `Args:` (or `Returns:`) sections shows two tables: the second one is a
    mistake (a class's and its __init__'s, merged by `merge_init_into_class`, count as one docstring)."""
    for name, target in rendered_objects():
        docstrings = [inspect.getdoc(target) or ""]
        if inspect.isclass(target) and "__init__" in vars(target):
            docstrings.append(inspect.getdoc(vars(target)["__init__"]) or "")
        joined = "\n".join(docstrings)
        for section in DOCSTRING_SECTIONS:
            count = len(re.findall(rf"^\s*{section}\s*$", joined, flags=re.M))
            if count > 1:
                yield f"{name}: {count} {section!r} sections in its rendered docstring"


def check_no_marker_names_an_unknown_part() -> Iterator[str]:
    hooks = ast.parse(text(REPO / "docs" / "hooks.py"))
    generated = next(
        node.value
        for node in hooks.body
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "GENERATED"
    )
    known = {key.value for key in generated.keys}
    for page in site_pages():
        for marker in re.findall(r"^<!-- generated: ([a-z-]+) -->$", text(page), flags=re.M):
            if marker not in known:
                yield f"{page.relative_to(REPO)} asks for a generated part docs/hooks.py does not make: {marker}"


CHECKS: tuple[Callable[[], Iterator[str]], ...] = (
    check_readme_is_a_front_page,
    check_results_holds_current_figures_only,
    check_the_nav_is_grouped_and_holds_every_page,
    check_relative_links_lead_to_files,
    check_python_snippets_compile,
    check_readme_documents_training_commands,
    check_the_fine_tuning_page_shows_the_readmes_snippet,
    check_quoted_figures_are_their_sources,
    check_docstrings_have_one_section_of_each_kind,
    check_no_marker_names_an_unknown_part,
)


def main() -> int:
    failures = 0
    for check in CHECKS:
        problems = list(check())
        failures += bool(problems)
        for problem in problems:
            print(f"{check.__name__}: {problem}")
    print(f"{len(CHECKS) - failures} of {len(CHECKS)} documentation checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
