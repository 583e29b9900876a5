"""What users had before the package was laid out by role still works: model folders saved then load and translate
as they did (with the package, and without it as remote code), and the commands, flags, config keys and
state-dict keys recorded then are all still there (tests/samples/saved_before_the_layout)."""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from tests.conftest import WITHOUT_THE_PACKAGE
from vaswani_transformer import (
    VaswaniTransformerConfig,
    VaswaniTransformerForConditionalGeneration,
    VaswaniTransformerModel,
    translate,
)

REPO = Path(__file__).resolve().parents[1]
SAVED = REPO / "tests" / "samples" / "saved_before_the_layout"
EXPECTED = json.loads((SAVED / "expected.json").read_text(encoding="utf-8"))
INTERFACE = json.loads((SAVED / "interface.json").read_text(encoding="utf-8"))

# Runs where `import vaswani_transformer` fails: only the folder's own remote code can load it.
WITHOUT_PACKAGE = (
    WITHOUT_THE_PACKAGE
    + r"""
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

folder, sentences = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
outputs = model.generate(**tokenizer(sentences, padding=True, return_tensors="pt"))
print(json.dumps([text.strip() for text in tokenizer.batch_decode(outputs, skip_special_tokens=True)]))
"""
)


def test_a_folder_saved_before_loads_and_translates_as_it_did() -> None:
    model = AutoModelForSeq2SeqLM.from_pretrained(SAVED / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(SAVED / "model")
    assert type(model) is VaswaniTransformerForConditionalGeneration  # the package's class, not remote code
    sentences = EXPECTED["sentences"]
    assert translate(sentences, model, tokenizer, dtype=torch.float32) == EXPECTED["float32"]
    greedy = translate(sentences, model, tokenizer, dtype=torch.float32, num_beams=1)
    assert greedy == EXPECTED["greedy_float32"]
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    decoder_input_ids = torch.tensor(EXPECTED["decoder_input_ids"])
    with torch.no_grad():
        logits = model(**batch, decoder_input_ids=decoder_input_ids).logits
    top = logits.topk(5, dim=-1)
    assert top.indices.tolist() == EXPECTED["top5_logit_ids"]
    torch.testing.assert_close(top.values, torch.tensor(EXPECTED["top5_logits"]), rtol=1e-5, atol=1e-5)


@pytest.mark.slow  # a fresh interpreter
def test_a_folder_saved_before_loads_without_the_package_and_translates_as_it_did(tmp_path: Path) -> None:
    env = {**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_PACKAGE, str(SAVED / "model"), json.dumps(EXPECTED["sentences"])],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.splitlines()[-1]) == EXPECTED["float32"]


def test_every_console_command_of_before_is_still_declared(capsys: pytest.CaptureFixture[str]) -> None:
    """Every command of before is declared (new ones, vaswani-convert, may join) and runs the same `main`: its
    target of before still imports and prints the same help as the target declared now (which goes through
    vaswani_transformer_commands, to handle signals before the heavy imports)."""
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert INTERFACE["console_scripts"].keys() <= scripts.keys()
    for command, before in INTERFACE["console_scripts"].items():
        helps = []
        for target in (before, scripts[command]):
            module, function = target.split(":")
            with pytest.raises(SystemExit):
                getattr(importlib.import_module(module), function)(["--help"])
            helps.append(capsys.readouterr().out)
        assert helps[0] == helps[1] and f"usage: {command}" in helps[0]


def command_flags(target: str, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """Every option string (both spellings) of a console command's parser, as `--help` builds it."""
    module, function = target.split(":")
    seen: list[set[str]] = []

    def record(parser: argparse.ArgumentParser, file: object = None) -> None:
        seen.append(set(parser._option_string_actions))

    monkeypatch.setattr(argparse.ArgumentParser, "print_help", record)
    with pytest.raises(SystemExit):
        getattr(importlib.import_module(module), function)(["--help"])
    return seen[-1]


@pytest.mark.parametrize("command", sorted(INTERFACE["flags"]))
def test_every_flag_of_before_is_still_accepted(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = set(INTERFACE["flags"][command]) - command_flags(
        INTERFACE["console_scripts"][command], monkeypatch
    )
    assert not missing, f"{command} lost {sorted(missing)}"


def test_config_keys_and_state_dict_keys_are_those_of_before() -> None:
    config = VaswaniTransformerConfig.from_preset("tiny", vocab_size=100)
    assert set(INTERFACE["config_keys"]) <= set(config.to_dict())
    learned = VaswaniTransformerConfig.from_preset("tiny", vocab_size=100, position_embedding_type="learned")
    keys = INTERFACE["state_dict_keys"]
    assert (
        sorted(VaswaniTransformerForConditionalGeneration(config).state_dict())
        == keys["VaswaniTransformerForConditionalGeneration"]
    )
    assert sorted(VaswaniTransformerModel(config).state_dict()) == keys["VaswaniTransformerModel"]
    assert (
        sorted(VaswaniTransformerForConditionalGeneration(learned).state_dict()) == keys["learned_positions"]
    )
