"""The documentation works as written: README.md, the site's pages (docs/**/*.md) and benchmarks/RESULTS.md.
What their prose says (sizes, the nav, links, figures quoted from their sources) is utils/check_docs.py's to
check, not a test's.

- Every training command of their ```bash blocks parses and finds its data; launcher configs exist; benchmark
  scripts answer --help.
- The commands of README.md and the site (`vaswani-*` and `python scripts/*.py`) run in miniature, in order, in
  one fresh folder (RESULTS.md's reproduce measurements at full length, so they are only parsed).
- The README's fine-tuning snippet (stock `Seq2SeqTrainer`) runs; the Training page shows the same one.
- The site builds with `mkdocs build --strict`, and docs/hooks.py's generated parts cover what they stand for:
  every bad-input case of tests/test_bad_inputs.py, every console command.
"""

import ast
import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml

from tests.conftest import fake_hub_session
from vaswani_transformer.cli.train import parse_options
from vaswani_transformer.training import check_inputs

REPO = Path(__file__).resolve().parents[1]
README = "README.md"
QUICK_TOUR = "docs/quick-tour.md"


class MkDocsLoader(yaml.SafeLoader):
    """YAML as MkDocs reads it: `!ENV [NAME, default]` gives the default."""


MkDocsLoader.add_constructor("!ENV", lambda loader, node: loader.construct_sequence(node)[-1])


def mkdocs_config() -> dict:
    return yaml.load((REPO / "mkdocs.yml").read_text(encoding="utf-8"), Loader=MkDocsLoader)  # noqa: S506


def nav_pages(entries: object) -> list[str]:
    """The pages of (a part of) mkdocs.yml's nav, in its order; links out of the site (the paper) left out."""
    if isinstance(entries, str):
        return [] if "://" in entries else [f"docs/{entries}"]
    values = entries.values() if isinstance(entries, dict) else entries
    return [page for entry in values for page in nav_pages(entry)]


def site_pages() -> tuple[str, ...]:
    """docs/**/*.md, in the order of mkdocs.yml's nav, then the pages outside it."""
    ordered = nav_pages(mkdocs_config()["nav"])
    pages = sorted(str(path.relative_to(REPO)) for path in (REPO / "docs").rglob("*.md"))
    return (*ordered, *(page for page in pages if page not in ordered))


SITE_PAGES = site_pages()
DOCUMENTS = (README, *SITE_PAGES, "benchmarks/RESULTS.md")
RUN_IN_MINIATURE = (README, *SITE_PAGES)
FINE_TUNING_HEADING = "# Fine-tune with `Seq2SeqTrainer`"  # a section of the README, a page of the site
COMMANDS: dict[str, str] = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
# Appended to every training command: flags override the recipe, so the command runs as written, only smaller.
MINIATURE = [
    "--max_steps", "6", "--save_steps", "1", "--warmup_steps", "2", "--eval_steps", "0", "--vocab_size", "300",
    "--max_test_sentences", "3", "--max_dev_sentences", "3", "--num_beams", "1", "--examples", "A dog.",
    "--config_overrides",
    json.dumps({"d_model": 16, "d_ff": 32, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1}),
]  # fmt: skip


def script_commands() -> dict[str, str]:
    """{"scripts/X.py": the console command it is an alias of}, from the module each script runs."""
    by_target = {target: command for command, target in COMMANDS.items()}
    aliases = {}
    for script in sorted((REPO / "scripts").glob("*.py")):
        (entry,) = re.findall(
            r"^from vaswani_transformer\.cli\.command import (\w+) as main$", script.read_text(), re.M
        )
        aliases[f"scripts/{script.name}"] = by_target[f"vaswani_transformer.cli.command:{entry}"]
    return aliases


SCRIPTS = script_commands()


def shell_commands(document: str) -> list[list[str]]:
    """The commands of a document's ```bash blocks (continuations joined, comments dropped, `&&` chains split),
    as argv lists."""
    text = (REPO / document).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" # ")[0].strip()
            for part in filter(None, (piece.strip() for piece in line.split("&&"))):
                commands.append(shlex.split(part))
    return commands


def console_command(argv: list[str]) -> tuple[str, list[str]] | None:
    """(console command, its arguments) of `vaswani-X ...` or its alias `python scripts/X.py ...`; else None."""
    if argv[0] in COMMANDS:
        return argv[0], argv[1:]
    if argv[0] == "python" and len(argv) > 1 and argv[1] in SCRIPTS:
        return SCRIPTS[argv[1]], argv[2:]
    return None


def train_arguments(argv: list[str]) -> list[str] | None:
    """The train command's arguments in a command (also under a launcher, and `vaswani-prepare`'s, which takes
    the same), or None for other commands."""
    for script in ("scripts/train.py", "scripts/prepare_data.py"):
        if script in argv:
            return argv[argv.index(script) + 1 :]
    found = console_command(argv)
    if found is not None and found[0] in ("vaswani-train", "vaswani-prepare"):
        return found[1]
    return None


def python_blocks(document: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (REPO / document).read_text(encoding="utf-8"), flags=re.S)


def fine_tuning_snippet(document: str) -> str:
    """The first ```python block under the fine-tuning heading (or title)."""
    text = (REPO / document).read_text(encoding="utf-8")
    section = text[text.index(FINE_TUNING_HEADING) :]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)


def load_hooks() -> ModuleType:
    """docs/hooks.py, the MkDocs hook, as a module."""
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def user_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the files the documentation's own-corpus examples name: train.en/.de (1,600 pairs, so that
    `--dev_size 1000` leaves pairs to train on) and test.en/.de (20), taken from the embedded Tatoeba corpus."""
    from vaswani_transformer.data import load_tatoeba

    folder = tmp_path_factory.mktemp("user-corpus")
    pairs = load_tatoeba()[0]
    for split, rows in (
        ("train", pairs.select(range(0, 32000, 20))),
        ("test", pairs.select(range(5, 405, 20))),
    ):
        (folder / f"{split}.en").write_text("\n".join(rows["source"]) + "\n", encoding="utf-8")
        (folder / f"{split}.de").write_text("\n".join(rows["target"]) + "\n", encoding="utf-8")
    return folder


def fresh_workspace(tmp_path: Path, user_corpus: Path) -> Path:
    """A folder as a reader's checkout looks to the documented commands: scripts/, and their own corpus files."""
    (tmp_path / "scripts").symlink_to(REPO / "scripts")
    for file in user_corpus.iterdir():
        (tmp_path / file.name).write_bytes(file.read_bytes())
    return tmp_path


# --- what every document says: cheap checks


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_documented_train_command_parses_and_finds_its_data(
    document: str, shared_data: Path, user_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(user_corpus)  # train.en, test.de, ... as the documents name them
    for argv in shell_commands(document):  # launcher configs named in a command ship with the repo
        if "--config_file" in argv:
            assert (REPO / argv[argv.index("--config_file") + 1]).is_file(), shlex.join(argv)
    for argv in shell_commands(document):
        arguments = train_arguments(argv)
        if arguments is None or "--help" in arguments:
            continue
        # a fresh --output_dir: the documented one may hold a run in this checkout
        options = parse_options(
            [*arguments, "--data_dir", str(shared_data), "--output_dir", str(tmp_path / "run")]
        )
        check_inputs(dataclasses.replace(options, resume=False))  # local files exist, the model config builds


@pytest.mark.slow  # a fresh interpreter per benchmark script: imports torch and transformers each time
def test_benchmark_commands_answer_help() -> None:
    scripts = {argv[1] for document in DOCUMENTS for argv in shell_commands(document)
               if argv[0] == "python" and argv[1].startswith("benchmarks/")}  # fmt: skip
    assert scripts
    for script in sorted(scripts):
        subprocess.run([sys.executable, script, "--help"], cwd=REPO, check=True, capture_output=True)


# --- docs/hooks.py: the generated parts


def test_the_errors_page_lists_every_bad_input_case_with_its_message() -> None:
    from tests.test_bad_inputs import CASES, Template

    hooks = load_hooks()
    listed = {
        name: (command, message)
        for command, rows in hooks.bad_input_cases().items()
        for name, message in rows
    }
    assert set(listed) == set(CASES)
    for name, case in CASES.items():
        message = case.message.text if isinstance(case.message, Template) else case.message
        assert listed[name] == (case.command, message), name
    table = hooks.bad_input_table()
    assert all(f"| {name} |" in table for name in CASES)
    assert f"{len(CASES)} cases over" in table


def test_a_case_message_the_errors_page_cannot_show_stops_the_build() -> None:
    """A message computed by the test would show nothing readable: only strings and Templates of them pass."""
    hooks = load_hooks()
    assert hooks.case_message(ast.parse('Template("{refused} while writing {root}/x (")').body[0].value) == (
        "{refused} while writing {root}/x ("
    )
    with pytest.raises(ValueError, match="must be a string or a Template"):
        hooks.case_message(ast.parse("lambda ws: f'{ws.root} is a file'").body[0].value)


def test_the_cli_reference_is_every_console_command_with_its_help_and_exit_statuses() -> None:
    hooks = load_hooks()
    reference = hooks.cli_reference()
    statuses = hooks.exit_statuses()
    for command, target in hooks.console_commands().items():
        assert f"## `{command}`" in reference and f"| `{command}` |" in statuses
        assert f'<a id="{command}--verbose" href="#{command}--verbose">' in reference
        for action in hooks.command_parser(target)._actions:  # every option in a table, with its anchor
            anchor = f"{command}--{max(action.option_strings or [action.dest], key=len).lstrip('-')}"
            assert f'<a id="{anchor}" href="#{anchor}">' in reference, anchor
    assert set(hooks.console_commands()) == set(COMMANDS)
    assert "\n**data**\n" in reference and "\n**engine**\n" in reference  # the commands' argument groups
    assert "python scripts/train.py" not in reference and "\nvaswani-train --recipe multi30k " in reference
    assert "3 when training diverged" in statuses  # vaswani-train's "Exit status:" paragraph


def test_the_api_pages_show_the_settings_and_the_config_as_tables() -> None:
    """TrainOptions' settings (not its signature) and the config's fields and presets, made from the code."""
    from vaswani_transformer import PRESETS
    from vaswani_transformer.training.options import DEFAULTS, option_names

    hooks = load_hooks()
    settings = hooks.train_options()
    for name in option_names():
        assert f"[`--{name}`](../cli.md#vaswani-train--{name})" in settings, name
    assert f"| `{DEFAULTS['max_steps']}` | optimiser updates |" in settings and "_setting(" not in settings
    assert "| `d_model` | int | `512` |" in hooks.config_fields()
    assert "| `vocab_size` | int | `37000` |" in hooks.config_fields()
    presets = hooks.config_presets()
    assert all(f"| `{name}` |" in presets for name in PRESETS)
    assert "| `big` | 1024 | 4096 | 16 | 64 | 6 | 6 | 0.3 |" in presets


def test_links_into_the_repository_are_pointed_at_the_sites_copies() -> None:
    hooks = load_hooks()
    markdown = "[r](../benchmarks/RESULTS.md#quality) ![c](../benchmarks/main_job_curve.png) [d](other.md) [w](https://x.org/a.md)"
    assert hooks.site_links(markdown, "training.md", "docs") == (
        "[r](results.md#quality) ![c](main_job_curve.png) [d](other.md) [w](https://x.org/a.md)"
    )
    assert (
        hooks.site_links("![c](main_job_curve.png)", "results.md", "benchmarks") == "![c](main_job_curve.png)"
    )
    assert hooks.site_links("[i](../../benchmarks/RESULTS.md)", "decisions/x.md", "docs/decisions") == (
        "[i](../results.md)"
    )


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    completed = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-5000:]
    site = tmp_path / "site"
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert 'id="vaswani-train--max_steps"' in cli and 'id="vaswani-serve--max_batch_tokens"' in cli
    training = (site / "reference" / "training" / "index.html").read_text(encoding="utf-8")
    assert "_setting(" not in training and 'href="../../cli/#vaswani-train--max_steps"' in training
    assert (site / "main_job_curve.png").is_file()  # benchmarks/ pictures, for the Results page


# --- what the documents say runs: in miniature


@pytest.fixture(scope="module")
def tiny_model_dir(user_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved one-layer model with a joint BPE of the user corpus: a stand-in for the main job's model."""
    import torch

    from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration
    from vaswani_transformer.data import train_bpe

    lines = [
        line for name in ("train.en", "train.de") for line in (user_corpus / name).read_text().splitlines()
    ]
    tokenizer = train_bpe(lines, 300)
    config = VaswaniTransformerConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), d_model=16, d_ff=32, num_heads=2, num_encoder_layers=1,
        num_decoder_layers=1,
    )  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-model")
    VaswaniTransformerForConditionalGeneration(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_the_readmes_fine_tuning_snippet_runs_with_the_stock_trainer(
    tiny_model_dir: Path, user_corpus: Path, tmp_path: Path
) -> None:
    """The snippet as written, on a tiny saved model in its `model_dir` and 2 steps instead of 1,000."""
    code = fine_tuning_snippet(README)
    assert "Seq2SeqTrainer(" in code and "max_steps=1000," in code
    code = code.replace("max_steps=1000,", "max_steps=2,")
    workspace = fresh_workspace(tmp_path, user_corpus)
    (workspace / "runs" / "tatoeba-en-de").mkdir(parents=True)
    (workspace / "runs" / "tatoeba-en-de" / "final").symlink_to(tiny_model_dir)
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=workspace, capture_output=True, text=True, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert (workspace / "runs" / "fine-tuned" / "final" / "model.safetensors").is_file()
    assert completed.stdout.strip().splitlines()[-1].startswith("['")  # the translation printed at the end


def stdin_and_redirections(argv: list[str]) -> tuple[list[str], str | None, str | None, str | None]:
    """(the command, text piped in by `echo TEXT |`, file of `< FILE`, file of `> FILE`)."""
    text = source = target = None
    if argv[0] == "echo" and "|" in argv:
        text, argv = " ".join(argv[1 : argv.index("|")]) + "\n", argv[argv.index("|") + 1 :]
    for sign in ("<", ">"):
        if sign in argv:
            index = argv.index(sign)
            source, target = (argv[index + 1], target) if sign == "<" else (source, argv[index + 1])
            argv = argv[:index] + argv[index + 2 :]
    return argv, text, source, target


SERVERS = {"vaswani-serve"}  # documented commands that run until stopped


def runs_here(command: str, arguments: list[str]) -> bool:
    """Whether a documented command runs in miniature: not --help, not the WMT14 recipes (the Hub's corpus and 8
    GPUs), not a conversion of a released fairseq checkpoint (gigabytes from fairseq's servers), which are only
    parsed, not what needs a CUDA GPU on a machine without one (the refusals have tests of their own), and not
    the server, which runs until it is stopped (tests/serving starts it as documented and talks to it)."""
    return (
        command not in SERVERS
        and "--help" not in arguments
        and (torch.cuda.is_available() or not needs_a_cuda_gpu(arguments))
        and not any("wmt14" in argument for argument in arguments)
        and not (command == "vaswani-convert" and arguments[:1] == ["fairseq"])
    )


def needs_a_cuda_gpu(arguments: list[str]) -> bool:
    """--cuda_graphs, or --device cuda[:N]."""
    devices = [value for flag, value in zip(arguments, arguments[1:], strict=False) if flag == "--device"]
    return "--cuda_graphs" in arguments or any(device.startswith("cuda") for device in devices)


def cache_published_model(hf_home: Path, arguments: list[str], workspace: Path) -> None:
    """For `vaswani-convert fsmt HUB_ID OUT`: a small random FSMT model in the Hub cache under HUB_ID, as if
    downloaded (the published one is gigabytes, and the tests run offline)."""
    from tests.convert.conftest import save_small_fsmt

    if arguments[:1] != ["fsmt"] or (workspace / arguments[1]).exists():
        return
    repo = hf_home / "hub" / f"models--{arguments[1].replace('/', '--')}"
    revision = "0" * 40
    save_small_fsmt(repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision, encoding="utf-8")


@pytest.mark.slow
def test_documented_commands_run_in_miniature(shared_data: Path, user_corpus: Path, tmp_path: Path) -> None:
    """The commands of README.md, then of each page of the site in the nav's order, in one fresh folder (`runs/...`
    relative to it, the reader's train.en/test.en beside it): trainings with MINIATURE's flags, a real push
    against a fake Hub, everything else as written."""
    workspace = fresh_workspace(tmp_path, user_corpus)
    # a fresh machine's caches (prepared data, CTranslate2 and ONNX conversions), not this one's
    environment = {**os.environ, "HF_HOME": str(tmp_path / "hf-home"), "HF_HUB_OFFLINE": "1"}
    done: set[tuple] = set()
    for document in RUN_IN_MINIATURE:
        for written in shell_commands(document):
            argv, text, source, target = stdin_and_redirections(written)
            found = console_command(argv)
            if found is None or not runs_here(*found):
                continue
            command, arguments = found
            if (key := (command, tuple(arguments), text, source, target)) in done:
                continue
            done.add(key)
            extra = (
                [*MINIATURE, "--data_dir", str(shared_data)]
                if command in ("vaswani-train", "vaswani-prepare")
                else []
            )
            arguments = [part.replace("../shared/data", str(shared_data)) for part in [*arguments, *extra]]
            if command == "vaswani-convert":
                cache_published_model(tmp_path / "hf-home", arguments, workspace)
            if command == "vaswani-push" and "--local_dir" not in arguments:
                pushed_to_fake_hub(arguments, workspace)
                continue
            if argv[0] == "python":
                run = [sys.executable, argv[1], *arguments]
            else:
                module, function = COMMANDS[command].split(":")
                run = [
                    sys.executable,
                    "-c",
                    f"import sys; from {module} import {function}; sys.exit({function}())",
                ]
                run += arguments
            stdin = text.encode() if text else (workspace / source).read_bytes() if source else b""
            completed = subprocess.run(
                run, cwd=workspace, input=stdin, capture_output=True, timeout=600, env=environment
            )
            assert completed.returncode == 0, (
                f"{document}: {shlex.join(written)}\n{completed.stderr.decode()[-3000:]}"
            )
            if target:
                (workspace / target).write_bytes(completed.stdout)
    assert {key[0] for key in done} == set(
        COMMANDS
    ) - SERVERS  # every other command is shown at work somewhere
    assert (workspace / "runs" / "tatoeba-en-de" / "final" / "scores.json").is_file()
    assert (workspace / "runs" / "my-model" / "final" / "scores.json").is_file()
    assert (workspace / "runs" / "tatoeba-en-de" / "ct2" / "model.bin").is_file()
    assert (workspace / "runs" / "tatoeba-en-de" / "onnx" / "decoder.onnx").is_file()
    assert (workspace / "hub" / "tatoeba-en-de" / "README.md").is_file()
    assert (workspace / "pictures" / "positional_encoding.png").is_file()


def pushed_to_fake_hub(arguments: list[str], workspace: Path) -> None:
    """A real push (no --local_dir), run in this process against a FakeHub: it must send one commit."""
    from vaswani_transformer.cli import push

    with pytest.MonkeyPatch.context() as patch, fake_hub_session() as hub:
        patch.chdir(workspace)
        assert push.main(arguments) == 0
    assert len(hub.commits()) == 1


@pytest.mark.slow
def test_the_quick_tours_python_runs_as_written(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Quick tour's five blocks as one program, in their order, on a tiny saved model in the main job's
    folder, fine-tuning 2 steps instead of 20 and pushing to a FakeHub."""
    blocks = python_blocks(QUICK_TOUR)
    assert len(blocks) == 5
    code = "\n".join(blocks)
    assert code.count("max_steps=20,") == 1
    code = code.replace("max_steps=20,", "max_steps=2,")
    (tmp_path / "runs" / "tatoeba-en-de").mkdir(parents=True)
    (tmp_path / "runs" / "tatoeba-en-de" / "final").symlink_to(tiny_model_dir)
    monkeypatch.chdir(tmp_path)
    printed = io.StringIO()
    with fake_hub_session() as hub, contextlib.redirect_stdout(printed):
        exec(compile(code, QUICK_TOUR, "exec"), {"__name__": "quick_tour"})  # noqa: S102 - the page's own code
    assert len(hub.commits()) == 1
    assert (tmp_path / "runs" / "quick-tour" / "final" / "model.safetensors").is_file()
    assert (tmp_path / "hub" / "quick-tour" / "README.md").is_file()
    lines = printed.getvalue().splitlines()
    assert lines[0] == "16 1 " + str(
        sum(parameter.numel() for parameter in load_tiny(tiny_model_dir).parameters())
    )
    assert isinstance(eval(lines[2]), list) and len(eval(lines[2])) == 2  # noqa: S307 - what the page printed
    assert [set(result) for result in eval(lines[3])] == [{"translation_text"}] * 2  # noqa: S307


def load_tiny(folder: Path) -> torch.nn.Module:
    from transformers import AutoModelForSeq2SeqLM

    return AutoModelForSeq2SeqLM.from_pretrained(folder)


def test_every_flag_is_spelt_with_underscores_or_dashes() -> None:
    """What docs/cli.md promises: each option with a `_` in its name takes the `-` spelling too."""
    hooks = load_hooks()
    for command, target in COMMANDS.items():
        for line in hooks.command_help(target).splitlines():
            names = re.findall(r"(?:^\s+|, )(--[a-z][a-z0-9_-]*)", line)
            option = line.startswith("  -") and not line.startswith("   ")  # argparse's option lines
            if option and any("_" in name for name in names):
                assert {name.replace("_", "-") for name in names} <= set(names), (command, line)


def svg_texts(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def test_the_model_drawing_is_the_configs_and_up_to_date(tmp_path: Path) -> None:
    """docs/figures.py draws the model from the default config (the paper's base): a fresh drawing says what the
    committed docs/model.svg says, and both name the base model's sizes."""
    from vaswani_transformer import VaswaniTransformerConfig

    spec = importlib.util.spec_from_file_location("docs_figures", REPO / "docs" / "figures.py")
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    config = VaswaniTransformerConfig()
    figures.draw(config, tmp_path / "model.svg")
    fresh = svg_texts((tmp_path / "model.svg").read_text(encoding="utf-8"))
    assert fresh == svg_texts((REPO / "docs" / "model.svg").read_text(encoding="utf-8"))
    assert f"{config.num_encoder_layers}×" in fresh and f"Embedding × √{config.d_model}" in fresh
    assert f"Multi-head self-attention ({config.num_heads} heads)" in fresh
    assert any(f"({config.vocab_size:,} × {config.d_model})" in text for text in fresh)


def test_the_training_pages_sample_log_is_what_the_job_prints(caplog: pytest.LogCaptureFixture) -> None:
    """docs/training.md's two sample lines, printed by the job's own TrainingProgress from the same figures (the
    progress line's times masked: they are the clock's)."""
    from transformers import TrainerControl, TrainerState

    from vaswani_transformer.training.monitoring import TrainingProgress

    text = (REPO / "docs" / "training.md").read_text(encoding="utf-8")
    progress_line, dev_line = re.search(r"```text\n(step .*?)\n(step .*?)\n```", text).groups()
    progress = TrainingProgress()
    state = TrainerState(global_step=500, max_steps=1500)
    caplog.set_level("INFO")
    evaluation = {"eval_loss": 3.0, "eval_degenerate": 0.0, "eval_distinct": 0.9}
    progress.on_log(None, state, TrainerControl(), logs={"eval_bleu": 10.0, **evaluation})
    state.global_step = 1000
    logs = {"loss": 3.253, "learning_rate": 1.4e-3, "target_tokens_per_second": 4300.0}
    progress.on_log(None, state, TrainerControl(), logs=logs)
    dev = {"eval_bleu": 18.34, "eval_loss": 3.157, "eval_degenerate": 0.0, "eval_distinct": 0.84}
    progress.on_log(None, state, TrainerControl(), logs=dev)

    def without_times(line: str) -> str:
        return re.sub(r"\d+:\d\d elapsed, ETA \d+:\d\d", "TIME elapsed, ETA TIME", line)

    assert without_times(caplog.messages[-2]) == without_times(progress_line)
    assert caplog.messages[-1] == dev_line
