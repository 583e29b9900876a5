"""Check that a folder saved by the package decodes as the package does where only torch and transformers are
installed, for each transformers version given.

For each version: a bare virtual environment (torch, transformers and what transformers brings, tokenizers and
safetensors), a model folder saved here loaded there with `trust_remote_code=True`; `generate()` (beam 4 and
greedy), the folder's `vaswani-translation` pipeline and its `handler.py` must give `translate()`'s translations
of the same sentences. Exits 1 naming what differs. CI runs it for the lowest supported transformers and the
newest the index serves:

    python utils/check_folder_without_package.py 5.17.0 newest
"""

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from vaswani_transformer import (
    VaswaniTransformerConfig,
    VaswaniTransformerForConditionalGeneration,
    translate,
)
from vaswani_transformer.data.tokenization import train_bpe

TATOEBA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tatoeba-en-de" / "deu.txt.gz"
NEWEST = "transformers>=5.17,<6"
TORCH = "torch==2.13.0"

# Run inside the bare environment, from a folder where the package is not importable.
CHECK = r"""
import importlib.util, json, sys
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline
import transformers
assert importlib.util.find_spec("vaswani_transformer") is None, "the package is installed here"
folder, texts = sys.argv[1], json.loads(sys.argv[2])
model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
batch = tokenizer(texts, return_tensors="pt", padding=True)
decode = lambda ids: [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]
found = {"transformers": transformers.__version__, "code": type(model).__module__}
with torch.no_grad():
    found["generate, beam 4"] = decode(model.generate(**batch))
    found["generate, greedy"] = decode(model.generate(**batch, num_beams=1))
translator = pipeline("vaswani-translation", model=folder, trust_remote_code=True)
found["pipeline"] = [result["translation_text"] for result in translator(texts, batch_size=len(texts))]
sys.path.insert(0, folder)
from handler import EndpointHandler
found["handler.py"] = [result["translation_text"] for result in EndpointHandler(folder)({"inputs": texts})]
print(json.dumps(found))
"""


def english_sentences(count: int) -> list[str]:
    """`count` English Tatoeba sentences of varied lengths (the embedded corpus, CC-BY 2.0)."""
    with gzip.open(TATOEBA, "rt", encoding="utf-8") as lines:
        sentences = [line.split("\t")[0] for _, line in zip(range(200_000), lines, strict=False)]
    return sentences[:: len(sentences) // count][:count]


def saved_folder(folder: Path) -> Path:
    """A small model with large random weights (its translations differ per sentence) and a BPE vocabulary of
    Tatoeba text, saved by the package."""
    with gzip.open(TATOEBA, "rt", encoding="utf-8") as lines:
        texts = [part for _, line in zip(range(20_000), lines, strict=False) for part in line.split("\t")[:2]]
    tokenizer = train_bpe(texts, vocab_size=600)
    torch.manual_seed(0)
    config = VaswaniTransformerConfig.from_preset(
        "tiny", vocab_size=len(tokenizer), init_std=0.5, dropout=0.0
    )
    model = VaswaniTransformerForConditionalGeneration(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or "bias" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def expected_translations(folder: Path, texts: list[str]) -> dict[str, list[str]]:
    """The package's translations (float32, as the folder decodes on a CPU)."""
    model = VaswaniTransformerForConditionalGeneration.from_pretrained(folder).eval()
    from vaswani_transformer.data.tokenization import load_tokenizer

    tokenizer = load_tokenizer(str(folder))
    beam = translate(texts, model, tokenizer, dtype=torch.float32)
    greedy = translate(texts, model, tokenizer, dtype=torch.float32, num_beams=1)
    return {"generate, beam 4": beam, "generate, greedy": greedy, "pipeline": beam, "handler.py": beam}


def bare_environment(where: Path, version: str) -> Path:
    """A virtual environment with only torch and transformers `version` ("newest": the newest supported)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    python = where / "bin" / "python"
    requirement = NEWEST if version == "newest" else f"transformers=={version}"
    for package in (TORCH, requirement):
        subprocess.run([str(python), "-m", "pip", "install", "-q", package], check=True)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+", help='transformers versions, e.g. 5.17.0, or "newest"')
    args = parser.parse_args()
    texts = english_sentences(12)
    failed = False
    with tempfile.TemporaryDirectory() as work:
        folder = saved_folder(Path(work) / "model")
        expected = expected_translations(folder, texts)
        for version in args.versions:
            python = bare_environment(Path(work) / f"venv-{version}", version)
            run = subprocess.run(
                [str(python), "-c", CHECK, str(folder), json.dumps(texts)],
                cwd=work, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if run.returncode != 0:
                print(f"transformers {version}: the folder failed:\n{run.stderr[-3000:]}")
                failed = True
                continue
            found = json.loads(run.stdout.strip().splitlines()[-1])
            print(f"transformers {found.pop('transformers')} ({found.pop('code')}):")
            for name, translations in expected.items():
                same = found[name] == translations
                failed |= not same
                print(f"  {name}: {'the package' if same else 'NOT the package'}'s translations")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
