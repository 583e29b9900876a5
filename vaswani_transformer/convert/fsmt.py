"""transformers' FSMT models as model folders of this package, exactly.

`FSMTForConditionalGeneration` is transformers' port of fairseq's Transformer, the paper's post-norm architecture
with three differences this package's config expresses (its docstring): fairseq's sinusoids (sines, then cosines:
`sinusoid_layout="halves"`) numbered from padding_idx + 1 (`position_offset`), biases on the attention projections
(`attention_bias`), and fairseq's dictionary order (`<s>` 0, `<pad>` 1, `</s>` 2, `<unk>` 3; decoding starts from
`</s>`). FSMT keeps fairseq's weight names under `model.`; only the feed-forward layers move (`fc1` →
`feed_forward.fc1`), and its output projection and two embedding tables become the one shared table (§3.4).

What this model cannot hold is refused before anything is written (a ValueError naming what differs): separate
source and target vocabularies, pre-norm layers, activations other than ReLU and GELU, layer drop, positions other
than fairseq's sinusoids, sizes that differ between encoder and decoder. The FSMT tokenizer (Moses and BPE with
`@@ ` continuations) is saved as it is, so `AutoTokenizer` loads transformers' `FSMTTokenizer` from the folder.
"""

import re
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, FSMTForConditionalGeneration, FSMTTokenizer, GenerationConfig

from ..claims import claimed_output
from ..evaluation.loading import check_model_name
from ..evaluation.verification import check_finite, check_merges, merges_in, weight_files, weight_shapes
from ..files.paths import check_apart, check_new_or_empty, is_local_path
from ..files.writing import check_writable, folder_written_whole
from ..modeling.configuration_vaswani_transformer import ACTIVATIONS, VaswaniTransformerConfig
from ..modeling.modeling_vaswani_transformer import VaswaniTransformerForConditionalGeneration
from ..provenance import Origin, fairseq_origin, fsmt_origin, write_origin
from ..trust import check_remote_code, offline_problem

CANNOT_HOLD = "this package's model (the paper's architecture) cannot hold it"
# FSMT's decoding settings that the converted model keeps: fairseq's beam, its |Y|^α length penalty, its output
# limit (max_len_b = 200 tokens), and the end of sentence it forces at that limit, as fairseq's search does.
DECODING_SETTINGS = ("num_beams", "length_penalty", "early_stopping", "max_length", "forced_eos_token_id")
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")
# FSMT's weight names → this package's: the feed-forward layers sit in their own module here (§3.3).
RENAMED = (re.compile(r"\.(fc[12])\."), r".feed_forward.\1.")


def check_outputs(out: Path, overwrite: bool, choose: str) -> None:
    """OUT is a folder that is new or empty, or `overwrite` allows its files to be replaced, and the machine lets
    it be written (a WriteError naming `choose` otherwise), found before any conversion; checked holding OUT's
    claim (`claims.claimed_output`)."""
    check_new_or_empty(out, overwrite, "the converted model")
    check_writable(out, choose)


def fsmt_config(name: str) -> Any:
    """The FSMT config of a folder or Hub id; another model's is refused, naming what it is, and so is one whose
    files ask to run code of their own (`trust.check_remote_code`: the conversion reads it with transformers' own
    FSMT classes, which need none)."""
    check_remote_code(name, allowed_by=None)
    try:
        config = AutoConfig.from_pretrained(name, trust_remote_code=False)
    except (OSError, ValueError) as error:
        raise ValueError(
            offline_problem(name) or f"{name}: no FSMT model can be read there ({error})."
        ) from None
    if config.model_type != "fsmt":
        raise ValueError(
            f"{name} is not an FSMT model (its config.json says model_type {config.model_type!r}): give a "
            "transformers FSMTForConditionalGeneration folder or Hub id, or a fairseq checkpoint folder with "
            "`vaswani-convert fairseq`."
        )
    return config


def refusals(config: Any) -> list[str]:
    """What in an FSMT config the paper's architecture cannot hold (empty: nothing)."""
    found = []
    if config.src_vocab_size != config.tgt_vocab_size:
        found.append(
            f"separate source and target vocabularies ({config.src_vocab_size:,} and {config.tgt_vocab_size:,} "
            "tokens; one table is shared by both stacks and the softmax here, §3.4)"
        )
    for name in ("encoder_normalize_before", "decoder_normalize_before"):
        if getattr(config, name, False):
            found.append(f"pre-norm layers ({name}; the paper's layers are post-norm, §3.1)")
    if config.activation_function not in ACTIVATIONS:
        found.append(
            f"the activation {config.activation_function!r} (this model has {', '.join(ACTIVATIONS)})"
        )
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if getattr(config, name, 0.0) > 0:
            found.append(f"layer drop ({name}={getattr(config, name)})")
    for name in ("learned_pos", "encoder_learned_pos", "decoder_learned_pos"):
        if getattr(config, name, False):
            found.append(f"learned positions ({name}; fairseq's sinusoids are what this conversion holds)")
    for encoder, decoder in (
        ("encoder_ffn_dim", "decoder_ffn_dim"),
        ("encoder_attention_heads", "decoder_attention_heads"),
    ):
        if getattr(config, encoder) != getattr(config, decoder):
            found.append(f"{encoder}={getattr(config, encoder)} but {decoder}={getattr(config, decoder)}")
    return found


def check_holdable(name: str, config: Any) -> None:
    """Refuse (ValueError) an FSMT config with anything `refusals` finds, naming all of it."""
    if found := refusals(config):
        raise ValueError(f"{name} has {'; '.join(found)}: {CANNOT_HOLD}.")


def check_one_vocabulary(name: str, tokenizer: FSMTTokenizer, vocab_size: int) -> None:
    """Source and target vocabulary files are one vocabulary of the model's size."""
    target = {token: index for index, token in tokenizer.decoder.items()}
    if tokenizer.encoder != target:
        raise ValueError(
            f"{name} has separate source and target vocabularies (vocab-src.json and vocab-tgt.json differ; one "
            f"table is shared by both stacks and the softmax here, §3.4): {CANNOT_HOLD}."
        )
    if len(tokenizer) != vocab_size:
        raise ValueError(
            f"{name}: its tokenizer has {len(tokenizer):,} tokens but its model {vocab_size:,}; give the "
            "model's own tokenizer files."
        )


def vaswani_config(config: Any) -> VaswaniTransformerConfig:
    """This package's config for an FSMT config that `check_holdable` passed."""
    return VaswaniTransformerConfig(
        vocab_size=config.tgt_vocab_size,
        d_model=config.d_model,
        d_ff=config.encoder_ffn_dim,
        num_heads=config.encoder_attention_heads,
        num_encoder_layers=config.encoder_layers,
        num_decoder_layers=config.decoder_layers,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation_function=config.activation_function,
        sinusoid_layout="halves",
        position_offset=config.pad_token_id + 1,  # fairseq's first position is padding_idx + 1
        attention_bias=True,
        max_position_embeddings=config.max_position_embeddings,
        scale_embedding=config.scale_embedding,
        layer_norm_eps=1e-5,  # FSMT's and fairseq's LayerNorm: torch's default
        init_std=config.init_std,
        length_penalty_type="hf",  # fairseq and FSMT divide a beam's score by |Y|^α
        **{name: getattr(config, name) for name in TOKEN_IDS},
    )


def shared_table(name: str, weights: dict[str, torch.Tensor]) -> torch.Tensor:
    """The one embedding table: FSMT's encoder and decoder embeddings and output projection must be equal."""
    tables = [weights.pop(f"model.{key}.weight") for key in ("encoder.embed_tokens", "decoder.embed_tokens")]
    tables.append(weights.pop("model.decoder.output_projection.weight"))
    if not all(torch.equal(tables[0], table) for table in tables[1:]):
        raise ValueError(
            f"{name}: its encoder embeddings, decoder embeddings and output projection are not one table (a model "
            f"trained without shared embeddings; this model shares one table, §3.4): {CANNOT_HOLD}."
        )
    return tables[0]


def vaswani_weights(name: str, fsmt: FSMTForConditionalGeneration) -> dict[str, torch.Tensor]:
    """FSMT's weights under this package's names. Its position tables are dropped: the model computes them."""
    weights = {key: value for key, value in fsmt.state_dict().items() if "embed_positions" not in key}
    table = shared_table(name, weights)
    renamed = {RENAMED[0].sub(RENAMED[1], key): value for key, value in weights.items()}
    shared = ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")
    return {**renamed, **dict.fromkeys(shared, table)}


def load_weights(
    name: str, model: VaswaniTransformerForConditionalGeneration, weights: dict[str, Any]
) -> None:
    """`weights` into `model`, every one of both; any left over or missing is refused, naming them."""
    expected = set(model.state_dict())
    if unknown := sorted(set(weights) - expected):
        raise ValueError(
            f"{name} has weights this model has no place for ({', '.join(unknown[:5])}): {CANNOT_HOLD}."
        )
    if missing := sorted(expected - set(weights)):
        raise ValueError(f"{name} lacks weights this model needs ({', '.join(missing[:5])}): {CANNOT_HOLD}.")
    model.load_state_dict(weights, strict=True)


def decoding_config(fsmt: FSMTForConditionalGeneration) -> GenerationConfig:
    """FSMT's decoding defaults, with its token ids."""
    source = fsmt.generation_config
    settings = {name: getattr(source, name, None) for name in (*DECODING_SETTINGS, *TOKEN_IDS)}
    return GenerationConfig(**{name: value for name, value in settings.items() if value is not None})


def check_local_files(folder: Path) -> None:
    """An FSMT folder's weights are whole safetensors with finite values, and its merges.txt is UTF-8: errors
    naming the file (transformers' own name none)."""
    files = weight_files(folder)
    weight_shapes(files)
    check_finite(files)
    if (folder / "merges.txt").is_file():
        merges_in(folder / "merges.txt")


def converted_model(name: str) -> tuple[VaswaniTransformerForConditionalGeneration, FSMTTokenizer]:
    """The FSMT model of `name` (folder or Hub id) as this package's model, with its tokenizer; refused before any
    weight is read where the config says this model cannot hold it (or asks to run code: `fsmt_config`)."""
    config = fsmt_config(name)
    check_holdable(name, config)
    if Path(name).is_dir():
        check_local_files(Path(name))
    try:
        tokenizer = FSMTTokenizer.from_pretrained(name)
    except (OSError, TypeError, ValueError) as error:  # TypeError: a vocabulary file missing from the folder
        raise ValueError(
            f"{name}: its FSMT tokenizer cannot be read ({error}); give the model's folder whole."
        ) from None
    check_merges(sorted(tokenizer.bpe_ranks, key=tokenizer.bpe_ranks.__getitem__), f"{name}/merges.txt")
    check_one_vocabulary(name, tokenizer, config.tgt_vocab_size)
    fsmt = FSMTForConditionalGeneration.from_pretrained(name, dtype=torch.float32)
    model = VaswaniTransformerForConditionalGeneration(vaswani_config(config))
    load_weights(name, model, vaswani_weights(name, fsmt))
    model.generation_config = decoding_config(fsmt)
    return model.eval(), tokenizer


def convert_fsmt(model: str | Path, out: str | Path, *, overwrite: bool = False, choose: str = "OUT") -> Path:
    """Convert an FSMT model (a transformers folder or Hub id) into a model folder of this package at `out`.

    The folder holds this package's config and `model.safetensors`, FSMT's tokenizer files, FSMT's decoding
    defaults in generation_config.json (beam, |Y|^α length penalty, output limit, decoding from `</s>`), the
    remote code every saved folder carries, and where it came from (`provenance.ORIGIN_FILE`: the Hub id, language
    pair, and the licence and citations of the original's card). What this model cannot hold is a ValueError
    before anything is written, and so is a model whose files ask to run code of their own (`fsmt_config`); OUT
    is claimed first (`claims.claimed_output`: a second writer stops, naming this one) and written all or nothing
    (`files.folder_written_whole`; `choose` names the flag or argument that picks another folder in a refused
    write). Returns `out`.
    """
    out = Path(out)
    name = check_model_name(model)
    check_apart(choose, out, {"the FSMT model folder": name if is_local_path(name) else None})
    with claimed_output(out, choose):  # a second writer of OUT stops here, naming this one
        check_outputs(out, overwrite, choose)
        _convert_fsmt_into(name, out, choose, fsmt_origin(name))
    return out


def _convert_fsmt_into(name: str | Path, out: Path, choose: str, origin: Origin) -> None:
    """The FSMT model `name` converted and written into `out` whole (its claim already held), with its origin
    and language pair (`provenance.ORIGIN_FILE`, for the model card)."""
    converted, tokenizer = converted_model(str(name))
    origin.languages = [tokenizer.src_lang, tokenizer.tgt_lang]
    with folder_written_whole(out, choose) as folder:
        converted.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        write_origin(folder, origin)


def convert_fairseq(
    checkpoint_dir: str | Path, out: str | Path, *, overwrite: bool = False, choose: str = "OUT"
) -> Path:
    """Convert a released fairseq Transformer folder (model.pt, dict.*.txt, bpecodes) into a model folder of this
    package at `out`: into an FSMT folder first (`fairseq.write_fsmt_folder`, a temporary folder removed
    afterwards), then as `convert_fsmt` converts it. Returns `out`."""
    # convert/fairseq.py, the checkpoint reader (the fairseq half of the conversion), is imported on use: the FSMT
    # route and its tests need none of it.
    from .fairseq import write_fsmt_folder

    out = Path(out)
    check_apart(choose, out, {"the checkpoint folder": checkpoint_dir})
    with claimed_output(out, choose), tempfile.TemporaryDirectory(prefix="vaswani-convert-") as staging:
        check_outputs(out, overwrite, choose)
        fsmt_folder = Path(staging) / "fsmt"
        write_fsmt_folder(Path(checkpoint_dir), fsmt_folder)
        try:
            _convert_fsmt_into(fsmt_folder, out, choose, fairseq_origin(Path(checkpoint_dir)))
        except ValueError as error:  # a refusal names the folder the user gave, not the temporary one
            raise ValueError(str(error).replace(str(fsmt_folder), str(checkpoint_dir))) from None
    return out
