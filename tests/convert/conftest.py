"""A small random FSMT model (transformers' port of fairseq's Transformer) with its Moses + BPE tokenizer, saved as
a folder: the reference the conversions are checked against."""

import json
import string
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

# fairseq's dictionary order, as FSMT keeps it
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
# BPE merges in the subword-nmt form FSMTTokenizer reads: a word's last symbol ends in </w>
MERGES = [
    "t h",
    "th e</w>",
    "i n",
    "in g</w>",
    "e r</w>",
    "a n",
    "an d</w>",
    "o n</w>",
    "@ -",
    "@- @</w>",
    "r o",
]
SMALL_FSMT = {
    "langs": ["en", "de"],
    "d_model": 16,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 32,
    "max_position_embeddings": 64,
    # Weights wide enough that the top two tokens of a step are never within float rounding of each other, so
    # greedy and beam search choose alike in both implementations.
    "init_std": 0.3,
    "tie_word_embeddings": True,
}


def small_vocabulary() -> dict[str, int]:
    """Specials, then every letter and digit inside a word and at its end, some punctuation and the merges: the
    `@-@` of Moses' split compounds is a token, and characters outside it (é, €, ☃) are unknown."""
    symbols = list(string.ascii_letters + string.digits + "&;@-")
    tokens = [*symbols, *(symbol + "</w>" for symbol in symbols)]
    tokens += [mark + "</w>" for mark in ".,!?:"]
    tokens += ["".join(merge.split()) for merge in MERGES]
    return {token: index for index, token in enumerate([*SPECIALS, *dict.fromkeys(tokens)])}


def write_tokenizer_files(folder: Path, target_vocabulary: dict[str, int] | None = None) -> FSMTTokenizer:
    """FSMTTokenizer's files (one vocabulary for both sides unless `target_vocabulary`), loaded back."""
    folder.mkdir(parents=True, exist_ok=True)
    vocabulary = small_vocabulary()
    (folder / "vocab-src.json").write_text(json.dumps(vocabulary), encoding="utf-8")
    (folder / "vocab-tgt.json").write_text(json.dumps(target_vocabulary or vocabulary), encoding="utf-8")
    (folder / "merges.txt").write_text(
        "".join(f"{merge} {i}\n" for i, merge in enumerate(MERGES)), encoding="utf-8"
    )
    return FSMTTokenizer(
        langs=["en", "de"],
        src_vocab_file=str(folder / "vocab-src.json"),
        tgt_vocab_file=str(folder / "vocab-tgt.json"),
        merges_file=str(folder / "merges.txt"),
    )


def save_small_fsmt(
    folder: Path, *, seed: int = 0, target_vocabulary: dict[str, int] | None = None, **overrides: Any
) -> Path:
    """A random FSMT model and its tokenizer saved into `folder` (FSMTConfig `overrides` change the model)."""
    size = len(small_vocabulary())
    config = FSMTConfig(**{"src_vocab_size": size, "tgt_vocab_size": size, **SMALL_FSMT, **overrides})
    torch.manual_seed(seed)
    FSMTForConditionalGeneration(config).eval().save_pretrained(folder)
    with (
        tempfile.TemporaryDirectory() as files
    ):  # the tokenizer as transformers saves it, not as written here
        write_tokenizer_files(Path(files), target_vocabulary).save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def fsmt_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small random FSMTForConditionalGeneration with one vocabulary shared by source, target and softmax."""
    return save_small_fsmt(tmp_path_factory.mktemp("fsmt") / "model")
