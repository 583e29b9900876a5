"""Damaged model folders: every command that loads a model names the damaged file, exit 2."""

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from vaswani_transformer.cli import evaluate, export, push
from vaswani_transformer.cli import translate as translate_cli


def truncate_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a full disk, a broken copy


def edit_vocabulary_size(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": config["vocab_size"] + 7}))


def truncate_tokenizer(folder: Path) -> None:
    text = (folder / "tokenizer.json").read_text(encoding="utf-8")
    (folder / "tokenizer.json").write_text(text[: len(text) // 2], encoding="utf-8")


def remove_config(folder: Path) -> None:
    (folder / "config.json").unlink()


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated weights": (truncate_weights, "model.safetensors is damaged"),
    "vocab_size edited": (
        edit_vocabulary_size,
        "config.json does not belong to the weights in model.safetensors",
    ),
    "truncated tokenizer": (truncate_tokenizer, "tokenizer.json is damaged, not valid JSON"),
    "config.json missing": (remove_config, "config.json"),
}


def command_arguments(command: str, folder: Path, tmp_path: Path) -> list[str]:
    source = tmp_path / "test.en"
    source.write_text("I love you.\n", encoding="utf-8")
    return {
        "translate": [str(folder), "--device", "cpu"],
        "evaluate": [str(folder), "--source", str(source), "--references", str(source), "--name", "again"],
        "push": [str(folder), "--repo_id", "tester/x", "--local_dir", str(tmp_path / "hub")],
        "export": [str(folder), str(tmp_path / "ct2")],
    }[command]


COMMANDS = {
    "translate": translate_cli.main,
    "evaluate": evaluate.main,
    "push": push.main,
    "export": export.main,
}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", COMMANDS)
def test_a_damaged_model_folder_is_named_and_nothing_is_written(
    trained_run, tmp_path: Path, capsys, damage: str, command: str
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(trained_run.model_dir, folder)
    damage_folder, message = DAMAGES[damage]
    damage_folder(folder)
    before = sorted(path.name for path in folder.iterdir())
    assert COMMANDS[command](command_arguments(command, folder, tmp_path)) == 2
    error = capsys.readouterr().err
    assert message in error and str(folder) in error and "Traceback" not in error
    assert sorted(path.name for path in folder.iterdir()) == before  # no scores or exports beside it
    assert not (tmp_path / "hub").exists() and not (tmp_path / "ct2").exists()
