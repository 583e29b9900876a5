"""fairseq's released Transformer checkpoints as transformers FSMT folders.

A fairseq checkpoint folder (`model.pt`, `dict.<src>.txt` and `dict.<tgt>.txt` or one `dict.txt`, `bpecodes`; e.g.
fairseq's `wmt16.en-de.joined-dict.transformer`) becomes what transformers' own conversion script
(`convert_fsmt_original_pytorch_checkpoint_to_pytorch.py`) writes: the FSMT config with fairseq's decoding defaults,
the FSMT weights, `vocab-src.json`, `vocab-tgt.json`, `merges.txt` and the tokenizer config, which
`FSMTForConditionalGeneration` and `FSMTTokenizer` load. Unlike that script it needs no fairseq: `model.pt` is read by
torch's weights-only unpickler (`load_checkpoint`), and fairseq's upgrades of old state dicts (`in_proj_weight`,
`layer_norms.N`, `embed_out`) are made here.

Only the model this package holds converts: the paper's post-norm Transformer with one vocabulary shared by encoder,
decoder and softmax. Anything else is refused before anything is written, naming what differs.
"""

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import FSMTConfig, FSMTForConditionalGeneration, FSMTTokenizer

from ..files.paths import check_apart
from ..files.writing import folder_written_whole
from ..quiet import no_transformers_progress_bars
from .fairseq_options import (
    CANNOT_HOLD,
    check_architecture,
    check_text_pipeline,
    checkpoint_options,
    read_languages,
)
from .safe_checkpoint import load_checkpoint
from .subword_vocabulary import (
    SPECIAL_SYMBOLS,
    Vocabulary,
    fsmt_vocabulary,
    padded_to,
    read_dictionary,
    read_merges,
)

CHECKPOINT_FILE = "model.pt"
# Older fairseq archives name the BPE codes "code", as transformers' script knows.
BPE_CODES_FILES = ("bpecodes", "code")
OUTPUT = "OUT"  # the name of the output folder in messages (vaswani-convert's argument)

# --- the weights

LAYER_NORM_NAMES = {  # fairseq's names of before 2019 (`upgrade_state_dict_named`)
    "encoder": {"0": "self_attn_layer_norm", "1": "final_layer_norm"},
    "decoder": {"0": "self_attn_layer_norm", "1": "encoder_attn_layer_norm", "2": "final_layer_norm"},
}
OLD_LAYER_NORM = re.compile(r"(encoder|decoder)\.layers\.(\d+)\.layer_norms\.(\d)\.(weight|bias)")
IN_PROJECTION = re.compile(r"(.*)\.in_proj_(weight|bias)")
# fairseq's bookkeeping, no weights: the sinusoid table's device marker (and its older cached table) and the
# state-dict version of each stack. FSMT computes its sinusoid table itself.
NOT_WEIGHTS = re.compile(
    r"(encoder|decoder)\.(embed_positions\._float_tensor|embed_positions\.weights|version)"
)
EMBEDDINGS = (
    "encoder.embed_tokens.weight",
    "decoder.embed_tokens.weight",
    "decoder.output_projection.weight",
)
SINUSOIDS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def upgraded_weights(weights: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict under today's fairseq names, as fairseq's own `upgrade_state_dict_named` makes them: one
    q, k, v projection each out of `in_proj_weight`, named layer norms out of `layer_norms.N`, the output
    projection out of `embed_out` or, shared, the decoder's embedding; its bookkeeping entries dropped."""
    upgraded = {}
    for name, tensor in weights.items():
        if NOT_WEIGHTS.fullmatch(name):
            continue
        if match := IN_PROJECTION.fullmatch(name):
            for projection, part in zip("qkv", tensor.chunk(3), strict=True):
                upgraded[f"{match[1]}.{projection}_proj.{match[2]}"] = part
        elif match := OLD_LAYER_NORM.fullmatch(name):
            stack, layer, number, kind = match.groups()
            upgraded[f"{stack}.layers.{layer}.{LAYER_NORM_NAMES[stack].get(number, number)}.{kind}"] = tensor
        elif name == "decoder.embed_out":
            upgraded["decoder.output_projection.weight"] = tensor
        else:
            upgraded[name] = tensor
    if "decoder.embed_tokens.weight" in upgraded:
        upgraded.setdefault("decoder.output_projection.weight", upgraded["decoder.embed_tokens.weight"])
    return upgraded


def check_one_embedding(weights: Mapping[str, torch.Tensor], path: Path) -> None:
    """The encoder's, decoder's and softmax's embeddings are one matrix, as share_all_embeddings says."""
    missing = [name for name in EMBEDDINGS if name not in weights]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}: not a fairseq Transformer checkpoint.")
    first = weights[EMBEDDINGS[0]]
    if any(not torch.equal(first, weights[name]) for name in EMBEDDINGS[1:]):
        raise ValueError(
            f"{path} says share_all_embeddings, but its encoder, decoder and output embeddings differ: "
            f"{CANNOT_HOLD}."
        )


def loaded_fsmt_model(config: FSMTConfig, weights: Mapping[str, torch.Tensor], path: Path) -> torch.nn.Module:
    """An FSMT model holding fairseq's weights (under FSMT's names: `model.` + fairseq's), each one used: a weight
    left over, or one the model lacks, is refused by name."""
    model = FSMTForConditionalGeneration(config).eval()
    renamed = {f"model.{name}": tensor for name, tensor in weights.items()}
    expected = set(model.state_dict())
    left_over = sorted(name.removeprefix("model.") for name in renamed.keys() - expected)
    lacking = sorted(name.removeprefix("model.") for name in expected - renamed.keys() - set(SINUSOIDS))
    if left_over or lacking:
        said = [f"weights this model has no place for: {', '.join(left_over[:8])}"] if left_over else []
        said += [f"no weights for {', '.join(lacking[:8])}"] if lacking else []
        raise ValueError(f"{path} does not fit its own args ({'; '.join(said)}): {CANNOT_HOLD}.")
    try:
        model.load_state_dict(renamed, strict=False)
    except RuntimeError as error:  # a size that differs from the args
        raise ValueError(f"{path}'s weights do not have the sizes its args give: {error}") from None
    return model


# --- decoding defaults and the folder

# fairseq's hub length penalty for the WMT19 models, as transformers' script sets it (the best BLEU it found on
# wmt19's test data); every other model gets fairseq's default, 1.0.
WMT19_LENGTH_PENALTIES = {"en-de": 1.0, "de-en": 1.1, "en-ru": 1.15, "ru-en": 1.1}
DECODING = {
    "num_beams": 5,
    "early_stopping": False,
    "max_length": 200,
}  # transformers' script; fairseq's beam 5


def length_penalty(checkpoint_dir: Path, source: str, target: str) -> float:
    """The length penalty transformers' script gives this model: its table's for a WMT19 archive, else 1.0."""
    if "wmt19" in checkpoint_dir.resolve().name:
        return WMT19_LENGTH_PENALTIES.get(f"{source}-{target}", 1.0)
    return 1.0


def fsmt_config(
    options: Mapping[str, Any], languages: list[str], vocabulary_size: int, penalty: float
) -> FSMTConfig:
    """The FSMT config that transformers' script writes for these options, with its decoding defaults."""
    return FSMTConfig(
        architectures=["FSMTForConditionalGeneration"],
        langs=languages,
        src_vocab_size=vocabulary_size,
        tgt_vocab_size=vocabulary_size,
        activation_function=options.get("activation_fn", "relu"),
        d_model=options["decoder_embed_dim"],
        max_position_embeddings=options.get("max_source_positions", 1024),
        encoder_ffn_dim=options["encoder_ffn_embed_dim"],
        encoder_layers=options["encoder_layers"],
        encoder_attention_heads=options["encoder_attention_heads"],
        encoder_layerdrop=0.0,  # refused otherwise
        decoder_ffn_dim=options["decoder_ffn_embed_dim"],
        decoder_layers=options["decoder_layers"],
        decoder_attention_heads=options["decoder_attention_heads"],
        decoder_layerdrop=0.0,
        dropout=options.get("dropout", 0.1),
        attention_dropout=options.get("attention_dropout", 0.0),
        activation_dropout=options.get("activation_dropout", options.get("relu_dropout", 0.0)),
        init_std=0.02,
        bos_token_id=SPECIAL_SYMBOLS.index("<s>"),
        pad_token_id=SPECIAL_SYMBOLS.index("<pad>"),
        eos_token_id=SPECIAL_SYMBOLS.index("</s>"),
        decoder_start_token_id=SPECIAL_SYMBOLS.index("</s>"),  # fairseq's decoder starts from </s>
        scale_embedding=True,  # no_scale_embedding is refused
        tie_word_embeddings=True,  # share_all_embeddings is required
        length_penalty=penalty,
        **DECODING,
    )


def required_file(folder: Path, names: tuple[str, ...], what: str) -> Path:
    """The first of `names` in `folder`; none there is an error naming them and the fix."""
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise ValueError(
        f"{folder} has no {' or '.join(names)} ({what}): give the folder of an unpacked fairseq archive, which "
        f"holds model.pt, its dict files and bpecodes."
    )


def checkpoint_file(folder: Path) -> Path:
    """model.pt; an ensemble's model1.pt, model2.pt, … are named with the fix (this package holds one model)."""
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder: give the folder of an unpacked fairseq archive.")
    members = sorted(path.name for path in folder.glob("model?*.pt"))
    if not (folder / CHECKPOINT_FILE).is_file() and members:
        raise ValueError(
            f"{folder} holds an ensemble ({', '.join(members)}) and no {CHECKPOINT_FILE}; this package holds one "
            f"model: copy the member you want to {folder / CHECKPOINT_FILE}."
        )
    return required_file(folder, (CHECKPOINT_FILE,), "the weights")


def read_vocabulary(folder: Path, languages: list[str]) -> tuple[Vocabulary, Path]:
    """The one vocabulary of a joined-dictionary model: dict.<src>.txt and dict.<tgt>.txt with the same symbols,
    else one dict.txt. Two that differ are refused: this package's model has one vocabulary."""
    paths = [folder / f"dict.{language}.txt" for language in languages]
    if not all(path.is_file() for path in paths):
        joined = required_file(folder, ("dict.txt", *(path.name for path in paths)), "the vocabulary")
        if joined.name != "dict.txt":
            missing = next(path for path in paths if not path.is_file())
            raise ValueError(
                f"{folder} has {joined.name} but no {missing.name}: use the archive's own files."
            )
        return read_dictionary(joined), joined
    source, target = (read_dictionary(path) for path in paths)
    if source.symbols != target.symbols:
        raise ValueError(
            f"{paths[0]} and {paths[1]} differ: the model has separate source and target vocabularies; "
            f"{CANNOT_HOLD} (one vocabulary shared by encoder, decoder and softmax)."
        )
    return source, paths[0]


@dataclass(frozen=True)
class FsmtParts:
    """Everything the FSMT folder holds, made and checked in memory before any of it is written."""

    model: torch.nn.Module
    languages: list[str]
    vocabulary: dict[str, int]
    merges: list[str]
    max_length: int


def fsmt_parts(checkpoint_dir: Path) -> FsmtParts:
    """Read and check the fairseq folder; every refusal happens here, before anything is written."""
    path = checkpoint_file(checkpoint_dir)
    codes = required_file(checkpoint_dir, BPE_CODES_FILES, "the BPE codes")
    checkpoint = load_checkpoint(path)
    options = checkpoint_options(checkpoint, path)
    check_architecture(options, path)
    check_text_pipeline(options, path)
    languages = read_languages(options, path)
    vocabulary, dictionary = read_vocabulary(checkpoint_dir, languages)
    merges = read_merges(codes)
    weights = upgraded_weights(checkpoint["model"])
    check_one_embedding(weights, path)
    rows = weights["decoder.embed_tokens.weight"].shape[0]
    vocabulary = padded_to(vocabulary, rows, dictionary)
    config = fsmt_config(options, languages, rows, length_penalty(checkpoint_dir, *languages))
    return FsmtParts(
        model=loaded_fsmt_model(config, weights, path),
        languages=languages,
        vocabulary=fsmt_vocabulary(vocabulary, dictionary),
        merges=merges,
        max_length=config.max_position_embeddings,
    )


def write_parts(parts: FsmtParts, folder: Path) -> None:
    """The FSMT folder's files: what transformers' script writes, the weights as model.safetensors."""
    with no_transformers_progress_bars():
        parts.model.save_pretrained(folder)
    vocabulary = json.dumps(parts.vocabulary, ensure_ascii=False, indent=2)
    files = {"src_vocab_file": folder / "vocab-src.json", "tgt_vocab_file": folder / "vocab-tgt.json"}
    for vocabulary_file in files.values():  # one vocabulary, the decoder's as the encoder's
        vocabulary_file.write_text(vocabulary, encoding="utf-8")
    merges = folder / "merges.txt"
    merges.write_text("".join(f"{merge}\n" for merge in parts.merges), encoding="utf-8")
    tokenizer = FSMTTokenizer(
        langs=parts.languages,
        merges_file=str(merges),
        **{name: str(path) for name, path in files.items()},
        do_lower_case=False,  # fairseq's text pipeline never lower-cases
        model_max_length=parts.max_length,
    )
    tokenizer.save_pretrained(folder)


def write_fsmt_folder(checkpoint_dir: Path, output_dir: Path) -> None:
    """Convert the fairseq checkpoint folder `checkpoint_dir` into the transformers FSMT folder `output_dir`,
    written whole or not at all (a temporary sibling renamed into place). A model this package cannot hold, a
    file missing, or a pickle that could run code is a ValueError naming it, raised before anything is written."""
    checkpoint_dir, output_dir = Path(checkpoint_dir), Path(output_dir)
    check_apart(OUTPUT, output_dir, {"the checkpoint folder": checkpoint_dir})
    if output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise ValueError(f"{OUTPUT} {output_dir} exists and is not an empty folder: choose a new one.")
    parts = fsmt_parts(checkpoint_dir)
    with folder_written_whole(output_dir, OUTPUT) as folder:
        write_parts(parts, folder)
