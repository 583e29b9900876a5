"""A model folder must match its weights: what every saved folder records, and what passes.

The refusals, command by command, are MATCH_CASES in tests/test_bad_inputs.py; here: every folder this package
saves (the training job's final model and checkpoints, an average, a conversion) passes the verification and still
loads with transformers alone, the fingerprint covers exactly the settings that change no shape, and a config without
it is refused.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import WITHOUT_THE_PACKAGE
from tests.convert.conftest import MERGES, save_small_fsmt
from vaswani_transformer import VaswaniTransformerConfig
from vaswani_transformer.convert import convert_fsmt
from vaswani_transformer.evaluation.verification import (
    check_generation_config,
    check_merges,
    verify_model_folder,
)
from vaswani_transformer.modeling.configuration_vaswani_transformer import (
    FINGERPRINT_KEY,
    SHAPE_FREE_SETTINGS,
)
from vaswani_transformer.training.checkpoints import average_last

# Loads each folder with the Auto classes in an interpreter without the package (its own remote code only).
LOAD_WITHOUT_PACKAGE = (
    WITHOUT_THE_PACKAGE
    + r"""
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

for folder in sys.argv[1:]:
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    output = model.generate(**tokenizer(["I love you."], return_tensors="pt"), max_new_tokens=5)
    print(json.dumps({"folder": folder, "class": type(model).__name__, "tokens": output.shape[1]}))
"""
)

# A value other than the default for each setting that changes no shape.
CHANGED = {
    "num_heads": 4,
    "d_k": 64,
    "d_v": 64,
    "activation_function": "gelu",
    "scale_embedding": False,
    "position_embedding_type": "learned",
    "sinusoid_layout": "halves",
    "position_offset": 2,
    "max_position_embeddings": 10,
    "layer_norm_eps": 1e-5,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 3,
}


def test_every_shape_free_setting_changes_the_fingerprint_and_training_settings_do_not() -> None:
    assert set(CHANGED) == set(SHAPE_FREE_SETTINGS)
    base = VaswaniTransformerConfig().architecture_fingerprint()
    for name, value in CHANGED.items():
        assert VaswaniTransformerConfig(**{name: value}).architecture_fingerprint() != base, name
    for name, value in {
        "dropout": 0.3,
        "label_smoothing": 0.0,
        "fused_loss": False,
        "max_length_offset": 10,
    }.items():
        assert VaswaniTransformerConfig(**{name: value}).architecture_fingerprint() == base, name


def test_the_fingerprint_is_saved_and_read_back_without_becoming_a_setting(tmp_path: Path) -> None:
    config = VaswaniTransformerConfig(num_heads=4)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved[FINGERPRINT_KEY] == config.architecture_fingerprint()
    loaded = VaswaniTransformerConfig.from_pretrained(tmp_path)
    assert not hasattr(loaded, FINGERPRINT_KEY) or callable(getattr(loaded, FINGERPRINT_KEY))
    loaded.activation_function = "gelu"  # changed in code, then saved: the record follows the config
    loaded.save_pretrained(tmp_path)
    assert (
        json.loads((tmp_path / "config.json").read_text())[FINGERPRINT_KEY]
        == loaded.architecture_fingerprint()
    )
    assert loaded.architecture_fingerprint() != config.architecture_fingerprint()


@pytest.mark.slow  # a fresh interpreter loading four folders
def test_saved_folders_pass_and_load_with_transformers_alone(trained_run, tmp_path: Path) -> None:
    """The training job's final model and checkpoints, an average of two checkpoints, and a converted FSMT model."""
    checkpoints = sorted(trained_run.output_dir.glob("checkpoint-*"))
    assert len(checkpoints) >= 2
    averaged = average_last(trained_run.output_dir, 2, tmp_path / "averaged")
    converted = convert_fsmt(save_small_fsmt(tmp_path / "fsmt"), tmp_path / "converted")
    folders = [trained_run.model_dir, *checkpoints, averaged, converted]
    for folder in folders:
        config = json.loads((folder / "config.json").read_text())
        assert (
            config[FINGERPRINT_KEY] == VaswaniTransformerConfig.from_dict(config).architecture_fingerprint()
        )
        verify_model_folder(folder)
    loaded_folders = [trained_run.model_dir, averaged, converted]
    completed = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_PACKAGE, *map(str, loaded_folders)],
        capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path,
        env={**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    loaded = [json.loads(line) for line in completed.stdout.splitlines() if line.startswith('{"folder"')]
    assert [entry["folder"] for entry in loaded] == list(map(str, loaded_folders))
    assert all(entry["class"] == "VaswaniTransformerForConditionalGeneration" for entry in loaded)


def test_a_config_without_its_fingerprint_is_refused(tiny_model, tmp_path: Path) -> None:
    """Every config this package saves records the fingerprint: one without it was edited, and nothing then tells
    whether its shape-free settings are those the weights were saved with."""
    tiny_model.save_pretrained(tmp_path)
    verify_model_folder(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    del config[FINGERPRINT_KEY]
    (tmp_path / "config.json").write_text(json.dumps({**config, "num_heads": 8}))
    with pytest.raises(ValueError, match=f"config.json records no {FINGERPRINT_KEY}"):
        verify_model_folder(tmp_path)


def test_bpe_merges_join_known_symbols_in_order() -> None:
    merges = [tuple(line.split()) for line in MERGES]
    check_merges([("#version:", "0.2"), *merges], "merges.txt")  # subword-nmt's header is no merge
    with pytest.raises(ValueError, match="merge 1 \\('th e</w>'\\)"):  # "th" is made only by the next merge
        check_merges([merges[1], merges[0], *merges[2:]], "merges.txt")
    with pytest.raises(ValueError, match="merge 3 \\('word'\\)"):
        check_merges([*merges[:2], ("word",)], "merges.txt")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"num_beams": 4, "length_penalty": 0.6, "early_stopping": True, "max_length": 200}, None),
        ({"num_beams": 2, "num_return_sequences": 3}, "num_return_sequences 3 exceeds num_beams 2"),
        ({"length_penalty": "0.6"}, "length_penalty '0.6' cannot decode: give a finite number"),
        ({"max_new_tokens": 0}, "max_new_tokens 0 cannot decode: give a whole number of at least 1"),
        ({"eos_token_id": [3, 400]}, "eos_token_id [3, 400] is not a token id of the model's 400-token"),
        ([4], "is not a JSON object of generation settings"),
    ],
)
def test_generation_settings_are_checked_before_decoding(
    tmp_path: Path, settings, message: str | None
) -> None:
    (tmp_path / "generation_config.json").write_text(json.dumps(settings))
    if message is None:
        check_generation_config(tmp_path, vocab_size=400)
    else:
        with pytest.raises(ValueError) as error:
            check_generation_config(tmp_path, vocab_size=400)
        assert message in str(error.value) and "generation_config.json" in str(error.value)
