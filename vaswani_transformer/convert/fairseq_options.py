"""What a fairseq checkpoint's args (or cfg) say about its model, and what of it the paper's model cannot hold:
each option that would change the computation or the token ids is named when refused."""

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# The fairseq architectures that are the paper's encoder-decoder (post-norm, sinusoidal positions); alignment
# heads (`*_align`) only add a training loss and outputs this package does not give.
POST_NORM_ARCHITECTURES = {
    "transformer",
    "transformer_tiny",
    "transformer_iwslt_de_en",
    "transformer_wmt_en_de",
    "transformer_vaswani_wmt_en_de_big",
    "transformer_vaswani_wmt_en_fr_big",
    "transformer_wmt_en_de_big",
    "transformer_align",
    "transformer_wmt_en_de_big_align",
}
ACTIVATIONS = ("relu", "gelu")  # fairseq's "gelu" is the exact (erf) GELU, as transformers' "gelu"
# Options that change what the model computes, with what setting them means; each is off in the paper's model and
# in fairseq's defaults, so a checkpoint whose args predate one was trained without it.
MUST_BE_OFF = {
    "encoder_normalize_before": "pre-norm encoder layers (layer norm before each sublayer)",
    "decoder_normalize_before": "pre-norm decoder layers (layer norm before each sublayer)",
    "encoder_learned_pos": "learned encoder positions",
    "decoder_learned_pos": "learned decoder positions",
    "no_token_positional_embeddings": "no positional encodings",
    "layernorm_embedding": "a layer norm on the embeddings",
    "no_scale_embedding": "embeddings not scaled by sqrt(d_model)",
    "encoder_layerdrop": "LayerDrop in the encoder",
    "decoder_layerdrop": "LayerDrop in the decoder",
    "encoder_layers_to_keep": "encoder layers pruned at load time",
    "decoder_layers_to_keep": "decoder layers pruned at load time",
    "adaptive_softmax_cutoff": "an adaptive softmax",
    "adaptive_input": "adaptive input embeddings",
    "cross_self_attention": "cross+self attention in the decoder",
    "no_cross_attention": "a decoder without encoder attention",
    "char_inputs": "character inputs",
    "base_layers": "BASE layers",
}
SIZES = (
    "encoder_embed_dim",
    "decoder_embed_dim",
    "encoder_ffn_embed_dim",
    "decoder_ffn_embed_dim",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
)
CANNOT_HOLD = "this package's model (the paper's post-norm Transformer) cannot hold it"


def namespace_or_dict(value: Any) -> dict[str, Any]:
    """A Namespace's or a dict's entries; {} for anything else (None)."""
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return dict(value) if isinstance(value, Mapping) else {}


def checkpoint_options(checkpoint: dict[str, Any], path: Path) -> dict[str, Any]:
    """The model's options: `args` (fairseq < 0.10, the released checkpoints), else `cfg["model"]` with the
    languages from `cfg["task"]` (fairseq >= 0.10, a dict or a Namespace each)."""
    if checkpoint.get("args") is not None:
        return namespace_or_dict(checkpoint["args"])
    cfg = namespace_or_dict(checkpoint.get("cfg"))
    model = namespace_or_dict(cfg.get("model"))
    if not model:
        raise ValueError(f"{path} names no architecture: it has neither args nor cfg['model'].")
    task = namespace_or_dict(cfg.get("task"))
    from_task = {key: task[key] for key in ("source_lang", "target_lang") if key in task}
    return {"task": task.get("_name"), **from_task, **model}


def architecture_problems(options: Mapping[str, Any]) -> list[str]:
    """What in `options` the paper's model cannot hold, each said with what it is."""
    architecture = options.get("arch", options.get("_name"))
    problems = []
    if architecture is not None and str(architecture).endswith("_t2t"):
        problems.append(f"architecture {architecture} is pre-norm (tensor2tensor's layer order)")
    elif architecture not in POST_NORM_ARCHITECTURES:
        problems.append(
            f"architecture {architecture} is not one of fairseq's post-norm Transformer encoder-decoders "
            f"({', '.join(sorted(POST_NORM_ARCHITECTURES))})"
        )
    problems += [
        f"{name} = {options[name]!r} ({meaning})"
        for name, meaning in MUST_BE_OFF.items()
        if options.get(name)
    ]
    activation = options.get("activation_fn", "relu")
    if activation not in ACTIVATIONS:
        problems.append(f"activation_fn = {activation!r} (this model has {' or '.join(ACTIVATIONS)})")
    if not options.get("share_all_embeddings"):
        problems.append(
            "share_all_embeddings is off (the encoder's, decoder's and softmax's embeddings are not one matrix)"
        )
    width = options.get("decoder_embed_dim")
    for name in ("encoder_embed_dim", "decoder_input_dim", "decoder_output_dim"):
        if options.get(name, width) != width:
            problems.append(f"{name} = {options[name]} differs from decoder_embed_dim = {width}")
    return problems


# fairseq's text pipeline that FSMTTokenizer reproduces: its plain translation task (no language tokens added) on
# Moses tokens (escaped, dashes split) and subword-nmt or fastBPE pieces; None is a checkpoint that predates the
# option (the released 2018 models: fairseq's hub names Moses and subword-nmt for them).
TEXT_PIPELINE = {
    "task": ("translation", None),
    "tokenizer": ("moses", None),
    "bpe": ("subword_nmt", "fastbpe", None),
}
MOSES_DEFAULTS = ("moses_no_escape", "moses_no_dash_splits")


def check_text_pipeline(options: Mapping[str, Any], path: Path) -> None:
    """Refuse a model trained on text that FSMTTokenizer does not make: its ids would be silently others."""
    problems = [
        f"{name} = {options.get(name)!r}"
        for name, known in TEXT_PIPELINE.items()
        if options.get(name) not in known
    ]
    problems += [f"{name} = True" for name in MOSES_DEFAULTS if options.get(name)]
    if problems:
        raise ValueError(
            f"{path} was trained on text made otherwise ({'; '.join(problems)}) than the converted tokenizer makes "
            f"it (FSMTTokenizer: fairseq's translation task on Moses tokens, escaped and dashes split, and "
            f"subword-nmt BPE): the token ids would differ."
        )


def check_architecture(options: Mapping[str, Any], path: Path) -> None:
    """Refuse, naming each difference, a checkpoint that is not the paper's post-norm model or lacks its sizes."""
    missing = [name for name in SIZES if not isinstance(options.get(name), int)]
    if missing:
        raise ValueError(f"{path}'s args lack {', '.join(missing)}: not a fairseq Transformer checkpoint.")
    problems = architecture_problems(options)
    if problems:
        raise ValueError(
            f"{path} is a model that differs from the paper's: {'; '.join(problems)}; {CANNOT_HOLD}."
        )


def read_languages(options: Mapping[str, Any], path: Path) -> list[str]:
    """The source and target language the args name (FSMTTokenizer tokenises by the source's Moses rules)."""
    source, target = options.get("source_lang"), options.get("target_lang")
    if not source or not target:
        raise ValueError(
            f"{path} names no source_lang and target_lang, which the tokenizer needs (Moses tokenises by "
            f"language): not a translation checkpoint."
        )
    return [str(source), str(target)]
