"""Inference Endpoints: every saved folder carries `handler.py`, whose `EndpointHandler` translates as
`translate()` does in float32 (as the folder decodes on a CPU), loaded as Inference Endpoints loads it (the file by its path) where the package cannot be
imported: only torch, transformers and the folder's own code."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.conftest import SENTENCES, save_random_model
from vaswani_transformer import translate
from vaswani_transformer.evaluation import load_for_decoding

SCRIPT = """
import importlib.util, json, sys
sys.modules["vaswani_transformer"] = None  # the package must not be importable
folder = sys.argv[1]
spec = importlib.util.spec_from_file_location("handler", f"{folder}/handler.py")
handler_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(handler_module)
handler = handler_module.EndpointHandler(path=folder)
results = {
    "list": handler({"inputs": json.loads(sys.argv[2]), "parameters": {"num_beams": 1, "max_new_tokens": 12}}),
    "text": handler({"inputs": json.loads(sys.argv[2])[0]}),
    "split": handler({"inputs": "  ".join(json.loads(sys.argv[2])), "parameters": {
        "num_beams": 1, "max_new_tokens": 12, "split_sentences": "en"}}),
}
try:
    handler({"inputs": 3})
except ValueError as error:
    results["refused"] = str(error)
print(json.dumps(results))
"""


@pytest.mark.slow  # a fresh interpreter
def test_the_endpoint_handler_of_a_saved_folder_translates_as_translate_does(
    trained_run, tmp_path: Path
) -> None:
    """Before, saved and pushed folders had no handler.py: Inference Endpoints could not serve them."""
    folder = save_random_model(trained_run.model_dir, tmp_path / "model")
    assert (folder / "handler.py").is_file()
    model, tokenizer = load_for_decoding(folder, device="cpu")
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT), str(folder), json.dumps(SENTENCES[:3])],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf")},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(completed.stdout.strip().splitlines()[-1])
    greedy = translate(SENTENCES[:3], model, tokenizer, num_beams=1, max_new_tokens=12, dtype=torch.float32)
    assert results["list"] == [{"translation_text": text} for text in greedy]
    beam = translate(SENTENCES[0], model, tokenizer, dtype=torch.float32)
    assert results["text"] == [{"translation_text": beam}]
    # a paragraph sentence by sentence, joined with its spacing, as translate(split_sentences=...) does
    assert results["split"] == [{"translation_text": "  ".join(greedy)}]
    assert results["refused"] == '"inputs" must be a text or a list of texts.'
