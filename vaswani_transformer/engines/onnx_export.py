"""Export a trained model to ONNX for ONNX Runtime: an encoder, the cross-attention keys/values, a decoder step.

Three graphs, each with a dynamic batch and lengths (`torch.onnx.export(dynamo=True)`), written with the
tokenizer, config and generation config into one folder:

- `encoder.onnx`: (input_ids, attention_mask) → last_hidden_state (sources, src_len, d_model).
- `cross_attention.onnx`: last_hidden_state → every decoder layer's encoder-decoder keys and values
  (`cross.{i}.key` / `cross.{i}.value`, (sources, heads, src_len, d_k)), projected once per sentence.
- `decoder.onnx`: one decoding step with past. Inputs: the new target ids (rows, new), the source mask
  (sources, src_len), the self-attention keys/values so far (`past.{i}.key`/`.value`, (rows, heads, past, d_k);
  past may be 0) and the cross-attention ones. Outputs: logits (rows, new, vocab) and the new positions'
  self-attention keys/values (`present.{i}.key`/`.value`, (rows, heads, new, d_k)) to append to the past.
  `rows` is a multiple of `sources`: the beams of a sentence are consecutive rows that share its source, as in
  the PyTorch model's attention, so cross-attention is held once per sentence.

The step is written out here from the model's own modules (embedding, positions, projections, layer norms,
feed-forward, tied output layer), with the attention of §3.2.1 spelt as two products and a softmax: the
PyTorch model's cache objects and Python branches on shapes would fix an exported graph's shapes to the
example's. `tests/engines/test_onnx.py` checks the graphs against the PyTorch model's logits and translations.
Optimum's `ORTModelForSeq2SeqLM` is not the target: optimum-onnx's only release requires transformers < 4.58.
"""

import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.export import Dim
from transformers import PreTrainedModel

from ..claims import claimed_output
from ..evaluation.loading import load_for_decoding
from ..extras import install_command
from ..files.paths import check_new_or_empty
from ..files.writing import folder_written_whole
from ..modeling.modeling_vaswani_transformer import queries_per_source, rows_per_beam
from .conversion_cache import cached_conversion, conversion_cache_dir, model_file_hashes, model_folder

GRAPHS = ("encoder.onnx", "cross_attention.onnx", "decoder.onnx")
OPSET = 18
# What the export writes for a given model: bump it when that changes, so cached exports are made anew.
ONNX_EXPORT_FORMAT = 1
ONNX_EXTRA = install_command("onnx")


def key_value_names(prefix: str, layers: int) -> list[str]:
    """`prefix.0.key`, `prefix.0.value`, `prefix.1.key`, …: the graphs' per-layer cache tensors."""
    return [f"{prefix}.{layer}.{kind}" for layer in range(layers) for kind in ("key", "value")]


def _heads(states: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, len, heads · d) → (batch, heads, len, d)."""
    return states.unflatten(-1, (heads, -1)).transpose(1, 2)


class EncoderGraph(nn.Module):
    """The encoder stack: source ids and mask → its output (the PyTorch encoder's own forward)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class CrossAttentionGraph(nn.Module):
    """Every decoder layer's encoder-decoder keys and values from the encoder output (§3.2.3)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.layers = model.get_decoder().layers
        self.heads = model.config.num_heads

    def forward(self, encoder_hidden_states: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outputs = []
        for layer in self.layers:
            attention = layer.encoder_attn
            outputs += [
                _heads(attention.k_proj(encoder_hidden_states), self.heads),  # (sources, heads, src_len, d_k)
                _heads(attention.v_proj(encoder_hidden_states), self.heads),
            ]
        return tuple(outputs)


class DecoderStepGraph(nn.Module):
    """One decoding step over a self-attention cache: new target ids → logits and the new keys/values."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.decoder = model.get_decoder()
        self.lm_head = model.get_output_embeddings()
        self.heads = model.config.num_heads

    @staticmethod
    def _attend(
        query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor, scaling: float
    ) -> torch.Tensor:
        """§3.2.1 softmax(Q Kᵀ / √d_k) V, with `bias` (0 or the most negative float) masking positions."""
        scores = torch.matmul(query, keys.transpose(-1, -2)) * scaling + bias
        return torch.matmul(torch.softmax(scores, dim=-1), values)

    def _self_attention(
        self, layer: nn.Module, hidden: torch.Tensor, past: tuple, causal: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """LayerNorm(x + SelfAttention(x)) over the past and new positions, and the new positions' K and V."""
        attention = layer.self_attn
        query = _heads(attention.q_proj(hidden), self.heads)  # (rows, heads, new, d_k)
        key = _heads(attention.k_proj(hidden), self.heads)
        value = _heads(attention.v_proj(hidden), self.heads)
        keys, values = torch.cat([past[0], key], dim=2), torch.cat([past[1], value], dim=2)
        attended = self._attend(query, keys, values, causal, attention.scaling)
        output = attention.out_proj(attended.transpose(1, 2).flatten(2))  # (rows, new, d_model)
        return layer.self_attn_layer_norm(hidden + layer.dropout(output)), key, value

    def _cross_attention(
        self, layer: nn.Module, hidden: torch.Tensor, cross: tuple, source_bias: torch.Tensor
    ) -> torch.Tensor:
        """LayerNorm(x + EncoderDecoderAttention(x)) with the cached keys/values of the sentence's source."""
        attention = layer.encoder_attn
        sources = cross[0].shape[0]
        query = _heads(attention.q_proj(hidden), self.heads)  # (rows, heads, new, d_k)
        # The beams of a sentence are its extra query positions: (sources, heads, beams · new, d_k)
        grouped = queries_per_source(query, sources)
        attended = self._attend(grouped, cross[0], cross[1], source_bias, attention.scaling)
        attended = rows_per_beam(attended, query.shape[2])  # one row per beam again: (rows, heads, new, d_v)
        output = attention.out_proj(attended.transpose(1, 2).flatten(2))
        return layer.encoder_attn_layer_norm(hidden + layer.dropout(output))

    def forward(
        self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor, *caches: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        layers = len(self.decoder.layers)
        past, cross = caches[: 2 * layers], caches[2 * layers :]
        past_length, new = past[0].shape[2], input_ids.shape[1]
        positions = torch.arange(new, device=input_ids.device) + past_length
        hidden = self.decoder.embed(input_ids, positions)
        lowest = torch.finfo(hidden.dtype).min
        # A new position sees every past position and the new ones up to itself: (new, past + new)
        seen = torch.arange(past_length + new, device=input_ids.device) <= positions.unsqueeze(-1)
        causal = torch.where(seen, 0.0, lowest).to(hidden.dtype)
        source_bias = torch.where(encoder_attention_mask.bool(), 0.0, lowest).to(hidden.dtype)
        source_bias = source_bias[:, None, None, :]  # (sources, 1, 1, src_len)
        presents = []
        for index, layer in enumerate(self.decoder.layers):
            pair = slice(2 * index, 2 * index + 2)
            hidden, key, value = self._self_attention(layer, hidden, past[pair], causal)
            hidden = self._cross_attention(layer, hidden, cross[pair], source_bias)
            hidden = layer.final_layer_norm(hidden + layer.dropout(layer.feed_forward(hidden)))
            presents += [key, value]
        return (self.lm_head(hidden), *presents)  # logits: (rows, new, vocab)


def _example(model: PreTrainedModel) -> dict[str, Any]:
    """Inputs of distinct sizes (so that no two dynamic sizes are taken for one): 3 sentences × 2 beams, 7 source
    tokens, 5 past positions, 2 new ones."""
    config = model.config
    generator = torch.Generator().manual_seed(0)
    sources, beams, source_length, past, new = 3, 2, 7, 5, 2
    input_ids = torch.randint(4, config.vocab_size, (sources, source_length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, 4:] = 0
    hidden = torch.randn(sources, source_length, config.d_model, generator=generator)
    shape = (sources * beams, config.num_heads, past, config.head_dim_k)
    layers = config.num_decoder_layers
    past_caches = [torch.randn(*shape, generator=generator) for _ in range(2 * layers)]
    cross_caches = [
        torch.randn(sources, config.num_heads, source_length, config.head_dim_k, generator=generator)
        for _ in range(2 * layers)
    ]
    step_ids = torch.randint(4, config.vocab_size, (sources * beams, new), generator=generator)
    return {
        "encoder": (input_ids, attention_mask),
        "cross_attention": (hidden,),
        "decoder": (step_ids, attention_mask, *past_caches, *cross_caches),
    }


def _export(
    module: nn.Module, example: tuple, path: Path, names: tuple[list[str], list[str]], dynamic: tuple
) -> None:
    inputs, outputs = names
    # Two notes from inside torch's exporter about its own code, nothing the user can act on: not shown.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="# The axis name", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*LeafSpec", category=FutureWarning)
        program = _onnx_program(module, example, inputs, outputs, dynamic)
    program.save(str(path))


def _onnx_program(module: nn.Module, example: tuple, inputs: list, outputs: list, dynamic: tuple) -> Any:
    return torch.onnx.export(
        module.eval(),
        example,
        input_names=inputs,
        output_names=outputs,
        dynamic_shapes=dynamic,
        dynamo=True,
        opset_version=OPSET,
        external_data=False,
        verbose=False,  # its progress lines would go to standard output, where translations go
    )


def export_graphs(model: PreTrainedModel, folder: Path) -> None:
    """Write the three graphs of `model` (on the CPU, float32, eval mode) into `folder`."""
    layers = model.config.num_decoder_layers
    example = _example(model)
    sources, rows, source, past, new = (Dim(name) for name in ("sources", "rows", "source", "past", "new"))
    with torch.no_grad():
        _export(
            EncoderGraph(model),
            example["encoder"],
            folder / "encoder.onnx",
            (["input_ids", "attention_mask"], ["last_hidden_state"]),
            ({0: sources, 1: source}, {0: sources, 1: source}),
        )
        _export(
            CrossAttentionGraph(model),
            example["cross_attention"],
            folder / "cross_attention.onnx",
            (["encoder_hidden_states"], key_value_names("cross", layers)),
            ({0: sources, 1: source},),
        )
        _export(
            DecoderStepGraph(model),
            example["decoder"],
            folder / "decoder.onnx",
            (
                [
                    "input_ids",
                    "encoder_attention_mask",
                    *key_value_names("past", layers),
                    *key_value_names("cross", layers),
                ],
                ["logits", *key_value_names("present", layers)],
            ),
            (
                {0: rows, 1: new},
                {0: sources, 1: source},
                (  # *caches: the self-attention past, then the cross-attention keys/values
                    *[{0: rows, 2: past} for _ in range(2 * layers)],
                    *[{0: sources, 2: source} for _ in range(2 * layers)],
                ),
            ),
        )


def to_onnx(
    model_dir: str | Path,
    output_dir: str | Path,
    *,
    overwrite: bool = False,
    choose: str = "OUTPUT_DIR",
    trust_remote_code: bool = False,
) -> Path:
    """Export a saved model folder (or Hub id) to ONNX graphs, with its tokenizer, config and generation config,
    so `onnx_runtime.load_onnx_model(output_dir)` needs nothing else. Claimed first (`claims.claimed_output`: a
    second writer of the folder stops, naming this one), then written all or nothing (`files.folder_written_whole`):
    into a temporary sibling, moved into place as a whole (with `overwrite`, its files replace those of the same
    name); on any failure nothing is left, and a full disk or read-only folder is
    a WriteError naming the path and `choose` (the flag or argument that picks another folder)."""
    output = Path(output_dir)
    with claimed_output(
        output, choose
    ):  # before the folder is checked: no other writer gets past it meanwhile
        check_new_or_empty(output, overwrite, "the export")
        model, tokenizer = load_for_decoding(
            model_dir, device="cpu", dtype=torch.float32, trust_remote_code=trust_remote_code
        )
        with folder_written_whole(output, choose) as folder:
            _write_export(model, tokenizer, folder)
    return output


def _write_export(model: PreTrainedModel, tokenizer: Any, folder: Path) -> None:
    export_graphs(model, folder)
    model.config.save_pretrained(folder)
    model.generation_config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def default_cache_dir() -> Path:
    """Where `cached_onnx_export` keeps exports: HF_HOME/vaswani_transformer/onnx."""
    return conversion_cache_dir("onnx")


def onnx_export_record(folder: Path) -> dict[str, Any]:
    """What an export of `folder` depends on: its files' SHA-256, the export format, torch's version."""
    return {
        "files": model_file_hashes(folder),
        "export_format": ONNX_EXPORT_FORMAT,
        "opset": OPSET,
        "torch": torch.__version__,
    }


def cached_onnx_export(
    model: str | Path,
    cache_dir: str | Path | None = None,
    verify_cache: bool = False,
    *,
    trust_remote_code: bool = False,
) -> Path:
    """The ONNX export of `model` (folder or Hub id), exported on the first call and reused after, in a folder
    of `cache_dir` (default `default_cache_dir()`) named by a hash of `onnx_export_record`; a damaged one is
    exported anew (`conversion_cache.cached_conversion`; `verify_cache`: every file's content checked, not only
    the small ones'); a model that asks to run code of its own is refused unless `trust_remote_code`)."""
    folder = model_folder(model, trust_remote_code)

    def convert(staging: Path) -> None:
        loaded = load_for_decoding(
            folder, device="cpu", dtype=torch.float32, trust_remote_code=trust_remote_code
        )
        _write_export(*loaded, staging)

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cached_conversion(onnx_export_record(folder), convert, GRAPHS, root, "--onnx_cache", verify_cache)
