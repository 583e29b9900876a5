"""A fairseq Transformer checkpoint folder made from a small random FSMT model.

`make_fairseq_checkpoint` writes the FSMT folder (model and FSMTTokenizer files) and the same model in fairseq's
format: `model.pt` as fairseq saves it (fairseq's key names, an `args` Namespace or a `cfg` dict, the training
state), `dict.en.txt` and `dict.de.txt` (one joined dictionary, fairseq's order and `#fairseq:overwrite` flag, not
padded: the embedding has fairseq's padded rows), and `bpecodes` (subword-nmt codes, version 0.2). The "legacy"
layout is a 2018 checkpoint: torch's legacy file format, `in_proj_weight` and `layer_norms.N`, no output projection
(the embedding is shared), args without the options added since, and fairseq's meters (and a numpy
scalar) in its training state.
"""

import argparse
import json
import shutil
import sys
from collections import Counter, OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy
import torch
from sacremoses import MosesTokenizer
from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

LANGUAGES = ["en", "de"]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]
CORPUS = [
    "The engineers fixed the bugs in the translation system yesterday.",
    "Die Ingenieure haben die Fehler im Übersetzungssystem gestern behoben.",
    "We trained the model for 100,000 steps on 8 GPUs.",
    "Wir haben das Modell 100.000 Schritte lang auf 8 GPUs trainiert.",
    "The weather in Berlin was cold, but the talks were warm.",
    "Das Wetter in Berlin war kalt, aber die Gespräche waren herzlich.",
    "She asked: what's the score of the translation?",
    "Sie fragte: Wie hoch ist die Bewertung der Übersetzung?",
    "Attention is all you need, they said in 2017.",
    "Aufmerksamkeit ist alles, was man braucht, sagten sie 2017.",
]
# Punctuation, numbers, compounds that BPE splits, and characters the vocabulary lacks. Moses's punctuation
# normalisation, which FSMTTokenizer applies and fairseq's `moses` tokenizer does not, leaves each unchanged.
SENTENCES = [
    "The engineers trained the translation model yesterday!",
    "Prices rose 4.5% to 12,300 euros in 3 years; really?",
    "Donaudampfschifffahrtsgesellschaftskapitän und Übersetzungssystemfehler",
    "A snowman ☃ and 日本語 are unknown here & there: what's that?",
    "Wir haben das Modell auf 8 GPUs trainiert - mit Erfolg.",
]
MERGES = 120
SIZES = {
    "d_model": 16,
    "encoder_layers": 2,
    "decoder_layers": 1,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 32,
    "decoder_ffn_dim": 24,
}
# What this package's model holds: the stacks may differ in depth, not in width (one d_ff, one h).
HOLDABLE_SIZES = SIZES | {"decoder_attention_heads": 4, "decoder_ffn_dim": 32}
ARCHITECTURE = "transformer_vaswani_wmt_en_de_big"  # the released WMT16 model's, its sizes overridden


@dataclass
class FairseqCheckpoint:
    """A fairseq checkpoint folder and the FSMT model it was made from."""

    folder: Path
    fsmt_folder: Path
    model: FSMTForConditionalGeneration
    tokenizer: FSMTTokenizer
    marker: Path  # written if fairseq's code (the fixture's stand-in for it) ran while model.pt was read


# --- fairseq's modules, as far as pickling needs them


class AverageMeter:
    """Stands for fairseq.meters.AverageMeter, which fairseq 0.6-0.8 pickled into a checkpoint's training state:
    unpickling it for real (running "fairseq's" code) writes the marker it names."""

    def __init__(self, marker: Path) -> None:
        self.val, self.avg, self.sum, self.count = 2.5, 2.5, 25.0, 10
        self.marker = str(marker)

    def __setstate__(self, state: dict[str, Any]) -> None:
        Path(state["marker"]).write_text("fairseq's code ran", encoding="utf-8")


class DictConfig(dict):
    """Stands for omegaconf.dictconfig.DictConfig, which some fairseq versions pickled as a checkpoint's cfg."""


@contextmanager
def pretend_modules() -> Iterator[None]:
    """fairseq.meters and omegaconf.dictconfig importable, as where fairseq is installed: pickle names a class by
    its module and checks that the name finds it."""
    modules = {
        "fairseq": {},
        "fairseq.meters": {"AverageMeter": AverageMeter},
        "omegaconf": {},
        "omegaconf.dictconfig": {"DictConfig": DictConfig},
    }
    saved = {name: sys.modules.get(name) for name in modules}
    for name, members in modules.items():
        module = ModuleType(name)
        for member_name, member in members.items():
            member.__module__, member.__qualname__ = name, member_name
            setattr(module, member_name, member)
        sys.modules[name] = module
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class CopiesAFile:
    """A pickled object whose unpickling runs code: it copies `source` to `target`."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source, self.target = str(source), str(target)

    def __reduce__(self) -> tuple[Any, ...]:
        return shutil.copyfile, (self.source, self.target)


# --- the vocabulary


def merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """`symbols` with each occurrence of `pair`, left to right, made one symbol."""
    merged, index = [], 0
    while index < len(symbols):
        if symbols[index : index + 2] == pair:
            merged.append(pair[0] + pair[1])
            index += 2
        else:
            merged.append(symbols[index])
            index += 1
    return tuple(merged)


def learn_merges(words: Counter[str], count: int) -> list[tuple[str, str]]:
    """subword-nmt's learning (version 0.2: a word's last character carries </w>), the most frequent pair first."""
    vocabulary = {tuple(word[:-1]) + (word[-1] + "</w>",): frequency for word, frequency in words.items()}
    merges = []
    for _ in range(count):
        pairs: Counter[tuple[str, str]] = Counter()
        for symbols, frequency in vocabulary.items():
            for pair in zip(symbols, symbols[1:], strict=False):
                pairs[pair] += frequency
        if not pairs:
            break
        best = max(pairs, key=lambda pair: (pairs[pair], pair))
        merges.append(best)
        vocabulary = {merge_pair(symbols, best): frequency for symbols, frequency in vocabulary.items()}
    return merges


def moses_words(sentences: list[str]) -> list[str]:
    """The sentences' words as fairseq's `moses` tokenizer gives them."""
    moses = MosesTokenizer(lang=LANGUAGES[0])
    return [
        word
        for sentence in sentences
        for word in moses.tokenize(sentence, aggressive_dash_splits=True, escape=True)
    ]


def fairseq_symbol(piece: str) -> str:
    """An FSMTTokenizer piece as subword-nmt writes it: a word's last piece plain, any other with `@@`."""
    return piece.removesuffix("</w>") if piece.endswith("</w>") else piece + "@@"


def fsmt_piece(symbol: str) -> str:
    """The inverse of `fairseq_symbol`, as transformers' conversion script rewrites a fairseq dictionary."""
    return symbol.removesuffix("@@") if symbol.endswith("@@") else symbol + "</w>"


def write_tokenizer_files(
    folder: Path, vocabulary: dict[str, int], merges: list[tuple[str, str]]
) -> FSMTTokenizer:
    """FSMTTokenizer's files in `folder`, and the tokenizer reading them."""
    folder.mkdir(parents=True, exist_ok=True)

    for name in ("vocab-src.json", "vocab-tgt.json"):
        (folder / name).write_text(json.dumps(vocabulary, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text(
        "".join(f"{left} {right}\n" for left, right in merges), encoding="utf-8"
    )
    return FSMTTokenizer(
        langs=LANGUAGES,
        src_vocab_file=str(folder / "vocab-src.json"),
        tgt_vocab_file=str(folder / "vocab-tgt.json"),
        merges_file=str(folder / "merges.txt"),
    )


def fairseq_dictionary(merges: list[tuple[str, str]], scratch: Path) -> list[tuple[str, int]]:
    """The corpus's BPE pieces as fairseq-preprocess counts them: (symbol, count), most frequent first; an odd
    number of them, so that with the four special symbols fairseq pads the vocabulary."""
    segmenter = write_tokenizer_files(
        scratch, {symbol: index for index, symbol in enumerate(SPECIALS)}, merges
    )
    counts = Counter(
        fairseq_symbol(piece) for word in moses_words(CORPUS) for piece in segmenter.bpe(word).split(" ")
    )
    symbols = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return symbols if (len(SPECIALS) + len(symbols)) % 8 else symbols[:-1]


# --- the model and model.pt


def random_fsmt_model(rows: int, sizes: dict[str, int]) -> FSMTForConditionalGeneration:
    """A small FSMT model with one vocabulary and tied embeddings, every weight random (biases and layer norms
    too, so that a weight put in the wrong place changes the outputs)."""
    torch.manual_seed(52)
    config = FSMTConfig(
        langs=LANGUAGES,
        src_vocab_size=rows,
        tgt_vocab_size=rows,
        tie_word_embeddings=True,
        max_position_embeddings=1024,
        dropout=0.3,
        attention_dropout=0.1,
        activation_dropout=0.0,
        **sizes,
    )
    model = FSMTForConditionalGeneration(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.normal_(0.0, 0.5)
    return model


def fairseq_options(legacy: bool, sizes: dict[str, int], **changes: Any) -> dict[str, Any]:
    """The model's args as fairseq saves them (the legacy ones without the options added since 2018)."""
    options = {
        "arch": ARCHITECTURE,
        "task": "translation",
        "source_lang": LANGUAGES[0],
        "target_lang": LANGUAGES[1],
        "encoder_embed_dim": sizes["d_model"],
        "decoder_embed_dim": sizes["d_model"],
        "encoder_ffn_embed_dim": sizes["encoder_ffn_dim"],
        "decoder_ffn_embed_dim": sizes["decoder_ffn_dim"],
        "encoder_layers": sizes["encoder_layers"],
        "decoder_layers": sizes["decoder_layers"],
        "encoder_attention_heads": sizes["encoder_attention_heads"],
        "decoder_attention_heads": sizes["decoder_attention_heads"],
        "encoder_normalize_before": False,
        "decoder_normalize_before": False,
        "encoder_learned_pos": False,
        "decoder_learned_pos": False,
        "share_all_embeddings": True,
        "share_decoder_input_output_embed": True,
        "dropout": 0.3,
        "attention_dropout": 0.1,
        "max_source_positions": 1024,
        "max_target_positions": 1024,
    }
    if legacy:
        options["relu_dropout"] = 0.0
    else:
        options |= {
            "activation_fn": "relu",
            "activation_dropout": 0.0,
            "encoder_layerdrop": 0.0,
            "decoder_layerdrop": 0.0,
            "layernorm_embedding": False,
            "no_scale_embedding": False,
            "no_token_positional_embeddings": False,
            "adaptive_softmax_cutoff": None,
            "cross_self_attention": False,
            "decoder_input_dim": sizes["d_model"],
            "decoder_output_dim": sizes["d_model"],
            "bpe": "subword_nmt",
            "tokenizer": "moses",
        }
    return options | changes


def fairseq_weights(model: FSMTForConditionalGeneration, legacy: bool) -> dict[str, torch.Tensor]:
    """The FSMT model's weights under fairseq's names, with fairseq's bookkeeping entries; `legacy`: the names of
    2018 (one in_proj_weight for q, k and v; layer_norms.N; the shared output projection not saved)."""
    weights = {
        name.removeprefix("model."): tensor.clone()
        for name, tensor in model.state_dict().items()
        if "embed_positions" not in name
    }
    for stack in ("encoder", "decoder"):
        weights[f"{stack}.embed_positions._float_tensor"] = torch.zeros(1)
        weights[f"{stack}.version"] = torch.tensor([3.0])
    if not legacy:
        return weights
    del weights["decoder.output_projection.weight"]
    norms = {"encoder": ("self_attn", "final"), "decoder": ("self_attn", "encoder_attn", "final")}
    for name in list(weights):
        for stack, kinds in norms.items():
            for number, kind in enumerate(kinds):
                prefix = f"{stack}.layers."
                if name.startswith(prefix) and f".{kind}_layer_norm." in name:
                    weights[name.replace(f".{kind}_layer_norm.", f".layer_norms.{number}.")] = weights.pop(
                        name
                    )
        if name.endswith("q_proj.weight") or name.endswith("q_proj.bias"):
            stem, kind = name.rsplit(".q_proj.", 1)
            parts = [weights.pop(f"{stem}.{projection}_proj.{kind}") for projection in "qkv"]
            weights[f"{stem}.in_proj_{kind}"] = torch.cat(parts)
    return weights


def checkpoint_contents(
    model: FSMTForConditionalGeneration, layout: str, options: dict, marker: Path
) -> dict:
    """What fairseq's model.pt holds: the weights, the args (or cfg), and the training state."""
    legacy = layout == "legacy"
    contents: dict[str, Any] = {
        "model": fairseq_weights(model, legacy),
        "optimizer_history": [
            {
                "criterion_name": "LabelSmoothedCrossEntropyCriterion",
                "optimizer_name": "FairseqAdam",
                "num_updates": 7,
            }
        ],
        "extra_state": {"train_iterator": {"epoch": 2, "iterations_in_epoch": 0}, "val_loss": 3.5},
        "last_optimizer_state": {"state": {0: {"step": torch.tensor(7.0)}}, "param_groups": [{"lr": 0.001}]},
    }
    if legacy:
        contents["args"] = argparse.Namespace(**options)
        meters = OrderedDict(train_loss=AverageMeter(marker), wps=numpy.float64(1234.5))
        contents["extra_state"]["train_meters"] = meters
    elif layout == "args":
        contents["args"] = argparse.Namespace(**options)
    else:  # fairseq >= 0.10: cfg as plain containers, the model's options under "model"; a Namespace there for
        # an architecture fairseq still builds from args (its Transformer), as convert_namespace_to_omegaconf does
        model_options = {
            key: value for key, value in options.items() if key not in ("source_lang", "target_lang")
        }
        model_options = {"_name": model_options.pop("arch"), **model_options}
        contents["args"] = None
        contents["cfg"] = {
            "_name": None,
            "common": {"fp16": False, "seed": 1},
            "model": argparse.Namespace(**model_options) if layout == "cfg-namespace" else model_options,
            "task": {
                "_name": "translation",
                "source_lang": options["source_lang"],
                "target_lang": options["target_lang"],
            },
        }
    return contents


def save_model_pt(path: Path, contents: dict, legacy: bool = False) -> None:
    """torch.save as fairseq calls it, in torch's legacy file format for a 2018 checkpoint."""
    with pretend_modules():
        torch.save(contents, path, _use_new_zipfile_serialization=not legacy)


def make_fairseq_checkpoint(
    root: Path, layout: str = "args", sizes: dict[str, int] = SIZES, **option_changes: Any
) -> FairseqCheckpoint:
    """The FSMT folder `root/fsmt` and the fairseq folder `root/fairseq` of one random model. `layout` is "args"
    (fairseq < 0.10), "cfg" (a cfg dict; "cfg-namespace" with the model's options as a Namespace) or "legacy"
    (2018); `sizes` are the FSMT model's (encoder and decoder may differ, as fairseq's may; `HOLDABLE_SIZES` this
    package's model can hold); `option_changes` change the model's args."""
    merges = learn_merges(Counter(moses_words(CORPUS)), MERGES)
    symbols = fairseq_dictionary(merges, root / "scratch")
    shutil.rmtree(root / "scratch")
    rows = -(-(len(SPECIALS) + len(symbols)) // 8) * 8
    padding = [f"madeupword{number:04d}" for number in range(rows - len(SPECIALS) - len(symbols))]
    fsmt_vocabulary = {symbol: index for index, symbol in enumerate(SPECIALS)}
    for index, symbol in enumerate([symbol for symbol, _ in symbols] + padding, start=len(SPECIALS)):
        fsmt_vocabulary[fsmt_piece(symbol)] = index

    fsmt_folder = root / "fsmt"
    model = random_fsmt_model(rows, sizes)
    tokenizer = write_tokenizer_files(fsmt_folder, fsmt_vocabulary, merges)
    model.save_pretrained(fsmt_folder)
    tokenizer.save_pretrained(fsmt_folder)

    folder = root / "fairseq"
    folder.mkdir()
    marker = root / "fairseq-code-ran"
    options = fairseq_options(layout == "legacy", sizes, **option_changes)
    save_model_pt(
        folder / "model.pt", checkpoint_contents(model, layout, options, marker), layout == "legacy"
    )
    lines = [f"{symbol} {count}" for symbol, count in symbols]
    lines[-1] += " #fairseq:overwrite"  # a flag fairseq reads (the symbol is new: it takes the next id)
    for language in LANGUAGES:
        (folder / f"dict.{language}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    codes = "".join(f"{left} {right}\n" for left, right in merges)
    (folder / "bpecodes").write_text(f"#version: 0.2\n{codes}", encoding="utf-8")
    return FairseqCheckpoint(folder, fsmt_folder, model, tokenizer, marker)
