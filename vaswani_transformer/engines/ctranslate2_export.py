"""Export a trained model and its tokenizer to CTranslate2, the C++ engine for serving Transformer translators.

CTranslate2's `TransformerSpec` describes our architecture exactly: post-norm layers (no final layer norm),
bias-free attention projections (its biases are optional: a converted fairseq model's are written), ReLU
feed-forward, embeddings × √d_model, one table shared by both embeddings and the softmax. Its built-in sinusoids
put all sines before all cosines, the paper's (§3.5) interleave them, and fairseq's count from 2, so the export
writes the model's own encodings as the position table (as CTranslate2 does for learned positions):
`max_positions` rows, i.e. sentences of up to that many tokens, source and output.

The export folder holds CTranslate2's model.bin, the tokenizer's files and the model's decoding settings
(`DECODING_FILE`), all that `ctranslate2_engine.CTranslate2Translator` reads; `ctranslate2_cache.cached_export`
keeps one export per model content.
"""

import json
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..claims import claimed_output
from ..evaluation.loading import load_for_decoding
from ..files.paths import check_new_or_empty
from ..files.writing import folder_written_whole
from ..modeling.generation_vaswani_transformer import generation_setting, model_max_length
from .options import CTRANSLATE2_EXTRA, WEIGHT_TYPES, check_max_positions

# The activations CTranslate2 implements
CTRANSLATE2_ACTIVATIONS = ("relu", "gelu")
DECODING_FILE = "decoding.json"
# What the conversion writes for a given model: bump it when that changes, so cached exports are made anew.
EXPORT_FORMAT = 2
EXPORT_AGAIN = "export the model again (vaswani-export-ctranslate2)"


def import_ctranslate2() -> Any:
    """The ctranslate2 module, or an ImportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(f"CTranslate2 is needed: {CTRANSLATE2_EXTRA}.") from error
    return ctranslate2


def check_exportable(model: PreTrainedModel) -> None:
    """Refuse, before any work, a configuration CTranslate2's Transformer cannot express."""
    config = model.config
    if config.head_dim_k * config.num_heads != config.d_model or config.head_dim_v != config.head_dim_k:
        raise ValueError(
            f"CTranslate2 needs d_k = d_v = d_model / heads; this model has d_k={config.head_dim_k}, "
            f"d_v={config.head_dim_v}, d_model={config.d_model}, heads={config.num_heads}."
        )
    if config.activation_function not in CTRANSLATE2_ACTIVATIONS:
        raise ValueError(
            f"CTranslate2 supports the activations {CTRANSLATE2_ACTIVATIONS}; this model uses "
            f"{config.activation_function!r}."
        )


def position_table(stack: torch.nn.Module, max_positions: int) -> torch.Tensor:
    """A stack's position encodings for positions 0 … max_positions-1, shape (max_positions, d_model), in the
    model's layout and with its `position_offset` (the module applies both).

    The sinusoids are the same in both stacks; learned tables (Table 3, row E) are one per stack.
    """
    positions = stack.embed_positions
    limit = getattr(positions, "max_positions", max_positions)  # a learned table has its own length
    return positions(torch.arange(min(max_positions, limit), device=stack.device))


def _array(tensor: torch.Tensor) -> Any:
    """A float32 numpy copy of `tensor`, as the spec stores weights (CTranslate2 quantizes them itself)."""
    return tensor.detach().float().cpu().numpy()


def _set_linear(spec: Any, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _set_layer_norm(spec: Any, layer_norm: torch.nn.LayerNorm) -> None:
    spec.gamma = _array(layer_norm.weight)
    spec.beta = _array(layer_norm.bias)


def _set_fused(spec: Any, *linears: torch.nn.Linear) -> None:
    """One CTranslate2 projection from several of ours, stacked, with their biases where they have them
    (`attention_bias`: fairseq's published models)."""
    biases = [linear.bias for linear in linears]
    bias = None if biases[0] is None else torch.cat(biases)
    _set_linear(spec, torch.cat([linear.weight for linear in linears]), bias)


def _set_attention(spec: Any, attention: torch.nn.Module, *, self_attention: bool) -> None:
    """CTranslate2 fuses Q, K, V (self-attention) or K, V (cross-attention) into one projection."""
    query, key, value = attention.q_proj, attention.k_proj, attention.v_proj
    if self_attention:
        _set_fused(spec.linear[0], query, key, value)
    else:
        _set_fused(spec.linear[0], query)
        _set_fused(spec.linear[1], key, value)
    _set_fused(spec.linear[-1], attention.out_proj)


def _set_feed_forward(spec: Any, layer: torch.nn.Module) -> None:
    feed_forward = layer.feed_forward
    _set_linear(spec.linear_0, feed_forward.fc1.weight, feed_forward.fc1.bias)
    _set_linear(spec.linear_1, feed_forward.fc2.weight, feed_forward.fc2.bias)
    _set_layer_norm(spec.layer_norm, layer.final_layer_norm)


def _set_stack(spec: Any, stack: torch.nn.Module, max_positions: int) -> None:
    spec.scale_embeddings = stack.embed_scale  # §3.4: sqrt(d_model)
    spec.position_encodings.encodings = _array(position_table(stack, max_positions))
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(stack.embed_tokens.weight)
    for layer_spec, layer in zip(spec.layer, stack.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        if hasattr(layer, "encoder_attn"):
            _set_attention(layer_spec.attention, layer.encoder_attn, self_attention=False)
            _set_layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
        _set_feed_forward(layer_spec.ffn, layer)


def ctranslate2_spec(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_positions: int) -> Any:
    """The CTranslate2 `TransformerSpec` of `model`, with its vocabulary and special tokens."""
    ctranslate2 = import_ctranslate2()
    check_exportable(model)
    config = model.config
    activation = getattr(ctranslate2.specs.Activation, config.activation_function.upper())
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (config.num_encoder_layers, config.num_decoder_layers),
        config.num_heads,
        pre_norm=False,  # §3.1: LayerNorm(x + Sublayer(x)), and no final layer norm
        activation=activation,
    )
    _set_stack(spec.encoder, model.get_encoder(), max_positions)
    _set_stack(spec.decoder, model.get_decoder(), max_positions)
    _set_linear(spec.decoder.projection, model.lm_head.weight)
    tokens = tokenizer.convert_ids_to_tokens(list(range(config.vocab_size)))
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    spec.config.bos_token = tokenizer.convert_ids_to_tokens(config.bos_token_id)
    spec.config.eos_token = tokenizer.convert_ids_to_tokens(config.eos_token_id)
    spec.config.unk_token = tokenizer.unk_token or tokenizer.convert_ids_to_tokens(config.pad_token_id)
    spec.config.decoder_start_token = tokenizer.convert_ids_to_tokens(config.decoder_start_token_id)
    return spec


def to_ctranslate2(
    model_dir: str | Path,
    output_dir: str | Path,
    *,
    quantization: str | None = None,
    max_positions: int = 1024,
    overwrite: bool = False,
    choose: str = "OUTPUT_DIR",
    trust_remote_code: bool = False,
) -> Path:
    """Convert a saved model folder (or Hub id) and its tokenizer into a CTranslate2 model folder (one that asks to
    run code of its own is refused unless `trust_remote_code`: `trust.check_remote_code`).

    The folder also gets the tokenizer's files and the model's decoding settings, so `CTranslate2Translator`
    needs nothing else. `quantization` is CTranslate2's weight type (int8 for fast CPU serving); default: float32.
    Claimed first (`claims.claimed_output`: a second writer of the folder stops, naming this one), then written
    all or nothing (`files.folder_written_whole`): into a temporary sibling, moved into place as a whole; on any
    failure nothing is left, and a full disk or read-only folder is a WriteError naming the path and `choose`
    (the flag or argument that picks another folder).
    """
    output = Path(output_dir)
    if quantization is not None and quantization not in WEIGHT_TYPES:
        raise ValueError(f"quantization must be one of {WEIGHT_TYPES}, got {quantization!r}.")
    check_max_positions(max_positions)
    # claimed before the folder is checked: no other writer gets past it meanwhile
    with claimed_output(output, choose):
        check_new_or_empty(output, overwrite, "the export")
        model, tokenizer = load_for_decoding(model_dir, device="cpu", trust_remote_code=trust_remote_code)
        spec = ctranslate2_spec(model, tokenizer, max_positions)
        spec.validate()
        spec.optimize(quantization=quantization)
        with folder_written_whole(output, choose) as folder:
            spec.save(str(folder))
            tokenizer.save_pretrained(folder)
            (folder / DECODING_FILE).write_text(
                json.dumps(decoding_defaults(model, max_positions), indent=2) + "\n", encoding="utf-8"
            )
    return output


def decoding_defaults(model: PreTrainedModel, max_positions: int) -> dict[str, Any]:
    """The model's decoding (its generation config, §6.1) as CTranslate2 options, written beside the export with
    the export's position rows (`max_positions`), which bound the source and the output alike."""
    generation = model.generation_config
    beams = generation.num_beams or 1
    defaults = {
        "beam_size": beams,
        "length_penalty": generation_setting(generation, "length_penalty") if beams > 1 else 1.0,
        "max_length_offset": model.config.max_length_offset,
        "max_positions": max_positions,
        # CTranslate2's default minimum of 1 would forbid </s> as the first token; the model allows it.
        "min_decoding_length": generation.min_new_tokens or 0,
    }
    # A model with an output limit of its own (a converted published model: fairseq's 200 tokens) keeps it;
    # generate() counts the decoder's start token in max_length, CTranslate2 only the tokens it decodes.
    if (max_length := model_max_length(generation)) is not None:
        defaults["max_decoding_length"] = max_length - 1
    return defaults
