"""No model folder runs code unasked: a folder whose files name code of its own is refused before
anything loads, also when standard input answers transformers' "Do you wish to run the custom code? [y/N]" with
"y"; --trust_remote_code (Python: trust_remote_code=True) lets it run; this package's own folders need no flag.

The bad-input suite (tests/test_bad_inputs.py, TRUST_CASES) covers each command's refusal in-process; here every
command runs as a real process with "y" on its standard input, and the Python API is checked both ways.
"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants

from tests.conftest import tiny_config
from tests.convert.conftest import save_small_fsmt
from vaswani_transformer import VaswaniTransformerForConditionalGeneration, translate
from vaswani_transformer.cli import convert, export
from vaswani_transformer.cli import translate as translate_cli
from vaswani_transformer.data.tokenization import train_bpe
from vaswani_transformer.engines import EngineOptions, load_engine
from vaswani_transformer.evaluation import load_for_decoding
from vaswani_transformer.trust import check_remote_code, code_references

REPO = Path(__file__).resolve().parent.parent
MARKER = "CODE_RAN"
# evil.py leaves a mark beside its folder the moment it is imported (transformers imports a copy of it, from its
# modules cache, so the mark's path is written into it)
EVIL_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import PreTrainedTokenizerFast
class EvilTok(PreTrainedTokenizerFast): pass
"""
TEXT = "Where is the train station?"


def save_tiny_model(folder: Path) -> Path:
    """A small untrained model with a BPE tokenizer, saved as vaswani-train saves one."""
    tokenizer = train_bpe([f"{TEXT} I love you. Wo ist der Bahnhof?"] * 20, vocab_size=60, min_frequency=1)
    VaswaniTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def booby_trap(folder: Path) -> Path:
    """The folder's tokenizer_config.json asks for evil.py's tokenizer, and evil.py is there."""
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config |= {"auto_map": {"AutoTokenizer": ["evil.EvilTok", None]}, "tokenizer_class": "EvilTok"}
    config_file.write_text(json.dumps(config), encoding="utf-8")
    (folder / "evil.py").write_text(EVIL_CODE.format(marker=str(folder.parent / MARKER)), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("saved") / "model")


@pytest.fixture
def trapped(saved_model: Path, tmp_path: Path) -> Path:
    """A booby-trapped copy of the saved model, alone in its own folder (where MARKER would appear)."""
    folder = tmp_path / "model"
    subprocess.run(["cp", "-r", str(saved_model), str(folder)], check=True)
    return booby_trap(folder)


def ran(folder: Path) -> bool:
    return (folder.parent / MARKER).exists()


def module_with_y(module: str, *arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m vaswani_transformer COMMAND ARGUMENTS` with "y" and a sentence on standard input."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "HF_MODULES_CACHE": str(cwd / "modules"),  # where transformers would copy the folder's code
    }
    return subprocess.run(
        [sys.executable, "-m", "vaswani_transformer", module, *arguments],
        input=f"y\n{TEXT}\n",
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=600,
    )


COMMANDS = {
    "translate": lambda folder: ["translate", str(folder), "--device", "cpu"],
    "translate onnxruntime": lambda folder: ["translate", str(folder), "--engine", "onnxruntime"],
    "evaluate ctranslate2": lambda folder: [
        "evaluate",
        str(folder),
        "--source",
        str(folder.parent / "test.en"),
        "--references",
        str(folder.parent / "test.de"),
        "--name",
        "x",
        "--engine",
        "ctranslate2",
    ],
    "export ctranslate2": lambda folder: ["export-ctranslate2", str(folder), str(folder.parent / "out")],
    "export onnx": lambda folder: ["export-onnx", str(folder), str(folder.parent / "out")],
    "push local_dir": lambda folder: [
        "push",
        str(folder),
        "--repo_id",
        "tester/x",
        "--local_dir",
        str(folder.parent / "out"),
    ],
    "plot attention": lambda folder: [
        "plot-attention",
        str(folder),
        TEXT,
        "--output_dir",
        str(folder.parent),
    ],
}


@pytest.mark.slow  # a command in a fresh interpreter each
@pytest.mark.parametrize("command", COMMANDS)
def test_no_command_runs_a_folders_code_when_standard_input_says_y(command: str, trapped: Path) -> None:
    (trapped.parent / "test.en").write_text(f"{TEXT}\n", encoding="utf-8")
    (trapped.parent / "test.de").write_text("Wo ist der Bahnhof?\n", encoding="utf-8")
    module, *arguments = COMMANDS[command](trapped)
    completed = module_with_y(module, *arguments, cwd=trapped.parent)
    assert completed.returncode == 2, completed.stderr
    assert not ran(trapped)
    assert "Do you wish to run the custom code" not in completed.stdout + completed.stderr
    assert f"{trapped / 'tokenizer_config.json'} asks to run code of the model folder" in completed.stderr
    assert not (trapped.parent / "out").exists()
    flag = (
        "--trust_remote_code" if command != "push local_dir" else "This command runs no model folder's code"
    )
    assert flag in completed.stderr and "Traceback" not in completed.stderr


@pytest.mark.slow  # a command in a fresh interpreter
def test_convert_fsmt_runs_no_code_of_the_folder_when_standard_input_says_y(tmp_path: Path) -> None:
    folder = booby_trap(save_small_fsmt(tmp_path / "fsmt"))
    completed = module_with_y("convert", "fsmt", str(folder), str(tmp_path / "out"), cwd=tmp_path)
    assert completed.returncode == 2, completed.stderr
    assert not ran(folder) and not (tmp_path / "out").exists()
    assert "tokenizer_config.json asks to run code of the model folder" in completed.stderr


@pytest.mark.slow  # a command in a fresh interpreter
def test_the_flag_lets_a_trusted_folder_run_its_code_and_translate(trapped: Path) -> None:
    completed = module_with_y(
        "translate", str(trapped), "--device", "cpu", "--trust_remote_code", cwd=trapped.parent
    )
    assert completed.returncode == 0, completed.stderr
    assert ran(trapped)
    assert len(completed.stdout.splitlines()) == 2  # "y" is text to translate, like the sentence after it


def test_the_python_api_refuses_a_folder_that_asks_for_its_code(
    trapped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\ny\ny\n"))  # what transformers would have read
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        load_for_decoding(trapped, device="cpu")
    for engine in ("torch", "onnxruntime", "ctranslate2"):
        with pytest.raises(ValueError, match="asks to run code of the model folder"):
            load_engine(trapped, EngineOptions(engine=engine, device="cpu"))
    assert not ran(trapped)
    assert sys.stdin.read() == "y\ny\ny\n"  # nothing was read from it


def test_the_python_api_runs_the_code_of_a_folder_it_is_told_to_trust(trapped: Path) -> None:
    model, tokenizer = load_for_decoding(trapped, device="cpu", trust_remote_code=True)
    assert ran(trapped) and type(tokenizer).__name__ == "EvilTok"
    assert isinstance(translate(TEXT, model, tokenizer, num_beams=1, max_new_tokens=3), str)


def test_the_packages_own_folders_need_no_flag_and_keep_the_packages_classes(saved_model: Path) -> None:
    config = json.loads((saved_model / "config.json").read_text(encoding="utf-8"))
    assert "AutoModelForSeq2SeqLM" in config["auto_map"]  # the folder's copies, for users without the package
    check_remote_code(saved_model)
    for trust in (
        False,
        True,
    ):  # trusted, the package's registered classes still serve, not the folder's copies
        model, _ = load_for_decoding(saved_model, device="cpu", trust_remote_code=trust)
        assert type(model) is VaswaniTransformerForConditionalGeneration


def test_the_package_auto_classes_in_its_own_config_never_run_the_folders_code(trapped: Path) -> None:
    """What transformers serves from the registered classes: even entries naming evil.py are never imported."""
    config_file = trapped / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["auto_map"] = dict.fromkeys(("AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"), "evil.EvilTok")
    config_file.write_text(json.dumps(config), encoding="utf-8")
    (trapped / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "TokenizersBackend"}))
    model, _ = load_for_decoding(trapped, device="cpu")
    assert type(model) is VaswaniTransformerForConditionalGeneration and not ran(trapped)


def test_which_auto_map_entries_ask_for_a_folders_code() -> None:
    own = {"AutoConfig": "configuration_vaswani_transformer.VaswaniTransformerConfig"}
    assert code_references("config.json", {"model_type": "vaswani_transformer", "auto_map": own}) == []
    assert code_references("config.json", {"model_type": "marian", "auto_map": own}) == [
        "AutoConfig: configuration_vaswani_transformer.VaswaniTransformerConfig"
    ]
    assert code_references(
        "config.json",
        {"model_type": "vaswani_transformer", "auto_map": {"AutoTokenizer": ["a.B", "a.BFast"]}},
    ) == ["AutoTokenizer: a.B", "AutoTokenizer: a.BFast"]
    assert code_references("tokenizer_config.json", {"auto_map": ["x.T", None]}) == ["AutoTokenizer: x.T"]
    assert code_references("tokenizer_config.json", {"tokenizer_class": "TokenizersBackend"}) == []


@pytest.mark.parametrize(
    ("main", "arguments"),
    [
        (translate_cli.main, ["nobody/not-a-cached-model", "text.en"]),
        (translate_cli.main, ["nobody/not-a-cached-model", "--engine", "ctranslate2", "text.en"]),
        (export.main, ["nobody/not-a-cached-model", "out"]),
        (convert.main, ["fsmt", "nobody/not-a-cached-model", "out"]),
    ],
)
def test_offline_mode_says_it_is_offline_and_how_to_fix_it(
    main, arguments: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "text.en").write_text(f"{TEXT}\n", encoding="utf-8")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert "nobody/not-a-cached-model: not in this machine's Hub cache, and HF_HUB_OFFLINE is set" in error
    assert "Unset HF_HUB_OFFLINE" in error and "internet connection" not in error
    assert not (tmp_path / "out").exists()
