"""Every command in README.md and benchmarks/RESULTS.md runs as written (training ones in miniature)."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from vaswani_transformer.cli.train import parse_options
from vaswani_transformer.experiment import check_inputs

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "benchmarks/RESULTS.md")
# Appended to every training command: flags override the recipe, so the command runs as written, only smaller.
MINIATURE = [
    "--max_steps", "6", "--save_steps", "1", "--warmup_steps", "2", "--eval_steps", "0", "--vocab_size", "300",
    "--max_test_sentences", "3", "--max_dev_sentences", "3", "--num_beams", "1", "--examples", "A dog.",
    "--config_overrides",
    json.dumps({"d_model": 16, "d_ff": 32, "num_heads": 2, "num_encoder_layers": 1, "num_decoder_layers": 1}),
]  # fmt: skip


def shell_commands(document: str) -> list[list[str]]:
    """The commands of a document's ```bash blocks (continuations joined, `&&` chains split), as argv lists."""
    text = (REPO / document).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" # ")[0].strip()
            for part in filter(None, (piece.strip() for piece in line.split("&&"))):
                commands.append(shlex.split(part))
    return commands


def train_arguments(argv: list[str]) -> list[str] | None:
    """The arguments of scripts/train.py in a command (python or a launcher), or None for other commands."""
    if "scripts/train.py" in argv:
        return argv[argv.index("scripts/train.py") + 1 :]
    return None


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_documented_train_command_parses_and_finds_its_data(
    document: str, shared_data: Path, tmp_path: Path
) -> None:
    for argv in shell_commands(document):  # launcher configs named in a command ship with the repo
        if "--config_file" in argv:
            assert (REPO / argv[argv.index("--config_file") + 1]).is_file(), shlex.join(argv)
    commands = [
        arguments for argv in shell_commands(document) if (arguments := train_arguments(argv)) is not None
    ]
    assert commands, f"{document} documents no training command"
    for arguments in commands:
        if "--help" in arguments:
            continue
        # a fresh --output_dir: the documented one may hold a run in this checkout
        options = parse_options(
            [*arguments, "--data_dir", str(shared_data), "--output_dir", str(tmp_path / "run")]
        )
        check_inputs(options)  # local files of the recipe exist, the model config builds


def test_benchmark_commands_answer_help() -> None:
    scripts = {argv[1] for document in DOCUMENTS for argv in shell_commands(document) if argv[:2] != ["python", "scripts/train.py"]
               and argv[0] == "python" and argv[1].startswith("benchmarks/")}  # fmt: skip
    assert scripts
    for script in sorted(scripts):
        subprocess.run([sys.executable, script, "--help"], cwd=REPO, check=True, capture_output=True)


def test_readme_commands_run_in_miniature(shared_data: Path, tmp_path: Path) -> None:
    """The README's python commands, in order, in a fresh folder (`runs/...` relative to it): the main job,
    translating, the Hub folder, the pictures, the Multi30k recipe, averaging its last 5 checkpoints, and
    evaluating the average."""
    (tmp_path / "scripts").symlink_to(REPO / "scripts")
    ran = []
    for argv in shell_commands("README.md"):
        stdin = None
        if argv[:1] == ["echo"] and "|" in argv:  # echo TEXT | python scripts/...
            stdin, argv = " ".join(argv[1 : argv.index("|")]) + "\n", argv[argv.index("|") + 1 :]
        if argv[:1] != ["python"] or not argv[1].startswith("scripts/") or "--help" in argv:
            continue
        command = [sys.executable, *argv[1:]]
        if argv[1] == "scripts/train.py":
            command += [*MINIATURE, "--data_dir", str(shared_data)]
        command = [part.replace("../shared/data", str(shared_data)) for part in command]
        completed = subprocess.run(
            command, cwd=tmp_path, input=stdin, capture_output=True, text=True, timeout=600
        )
        assert completed.returncode == 0, f"{shlex.join(argv)}\n{completed.stderr[-3000:]}"
        ran.append(argv[1])
    assert {
        "scripts/train.py",
        "scripts/average_checkpoints.py",
        "scripts/evaluate_model.py",
        "scripts/translate.py",
        "scripts/push_to_hub.py",
        "scripts/plot_attention.py",
        "scripts/plot_positional_encoding.py",
        "scripts/export_ctranslate2.py",
        "scripts/export_onnx.py",
    } <= set(ran)
    assert (tmp_path / "runs" / "tatoeba-en-de" / "ct2" / "model.bin").is_file()
    assert (tmp_path / "runs" / "tatoeba-en-de" / "onnx" / "decoder.onnx").is_file()
    assert (tmp_path / "hub" / "tatoeba-en-de" / "README.md").is_file()
    assert (tmp_path / "pictures" / "positional_encoding.png").is_file()


def test_readme_lists_the_bad_input_suite_case_for_case() -> None:
    """The README's list of tests/test_bad_inputs.py's cases, by command, is the suite's own list."""
    from tests.test_bad_inputs import CASES

    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text[text.index(f"The {len(CASES)} cases of `tests/test_bad_inputs.py`") :].split("\n\n")[1]
    listed: set[str] = set()
    for item in " ".join(block.split()).removeprefix("- ").split(" - "):
        command, names = item.split(": ", 1)
        listed |= {f"{command} {name}" for name in names.removesuffix(".").split("; ")}
    assert listed == set(CASES)
