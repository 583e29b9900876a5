"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), read top to bottom in the paper's order:
§3.5 positions → §3.2 attention → §3.3 feed-forward → §3.1 post-norm layers → §3.4 stacks with scaled, shared
embeddings → the encoder-decoder model → the translation model with the tied softmax.

Beside it (the remote-code tier, docs/architecture.md): the §5.4 loss (loss_vaswani_transformer.py), the §6.1
decoding (generation_vaswani_transformer.py), and the speed machinery behind `config.fast_path`
(fast_path_vaswani_transformer.py), whose reference path is plain `nn.Dropout` and a float32 residual stream.
"""

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .configuration_vaswani_transformer import VaswaniTransformerConfig
from .fast_path_vaswani_transformer import (
    dropout_function,
    dropout_module,
    prefers_eager_attention,
    residual_stream,
)
from .generation_vaswani_transformer import CACHE_NAME, VaswaniTransformerGenerationMixin
from .loss_vaswani_transformer import VaswaniTransformerLossMixin
from .saving_vaswani_transformer import RemoteCodeSavingMixin


def take_cache(past_key_values: Cache | None, kwargs: dict[str, Any]) -> Cache | None:
    """The decoding cache, passed as `past_key_values` (transformers 5.17–5.23) or `cache` (from 5.24)."""
    cache = kwargs.pop("cache", None)
    return past_key_values if past_key_values is not None else cache


# §3.5 Positional Encoding
class VaswaniTransformerSinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same): interleaved, any length. Options for
    published weights (the config's docstring): fairseq's "halves" layout and its positions counted from `offset`."""

    def __init__(self, d_model: int, layout: str = "interleaved", offset: int = 0) -> None:
        super().__init__()
        self.d_model, self.layout, self.offset = d_model, layout, offset
        # Only the frequencies are stored, so there is no maximum length. The buffer is not saved; transformers
        # materialises it as garbage on `from_pretrained`, so `_init_weights` recomputes it.
        self.register_buffer("inv_freq", self.compute_inv_freq(d_model, layout), persistent=False)

    @staticmethod
    def compute_inv_freq(d_model: int, layout: str = "interleaved") -> torch.Tensor:
        """1 / 10000^(2i / d_model) for i = 0 … d_model/2 - 1, computed in float64 for exactness; "halves":
        exp(-i · ln(10000) / (d_model/2 - 1)), in float32 as fairseq and transformers' FSMT compute it."""
        if layout == "halves":
            half = d_model // 2
            return torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
        exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
        return (1.0 / 10000.0**exponents).float()

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """The encodings of the given positions (§3.5).

        Args:
            position_ids: `(..., seq_len)` positions, counted from 0 (`offset` is added here).

        Returns:
            `(..., seq_len, d_model)` float32 encodings.
        """
        angles = (position_ids + self.offset).float().unsqueeze(-1) * self.inv_freq  # (..., len, d_model / 2)
        if self.layout == "halves":
            return torch.cat((angles.sin(), angles.cos()), dim=-1)  # (..., seq_len, d_model)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (..., seq_len, d_model)


class VaswaniTransformerLearnedPositionalEmbedding(nn.Embedding):
    """Table 3 row (E): learned positional embeddings instead of sinusoids (`offset` rows before the first)."""

    def __init__(self, max_positions: int, d_model: int, offset: int = 0) -> None:
        super().__init__(max_positions + offset, d_model)
        self.max_positions, self.offset = max_positions, offset

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """The learned embeddings of the given positions.

        Args:
            position_ids: `(..., seq_len)` positions, counted from 0, each below `max_positions`.

        Returns:
            `(..., seq_len, d_model)` embeddings.

        Raises:
            ValueError: a position at or beyond `max_positions`.
        """
        if position_ids.max() >= self.max_positions:
            raise ValueError(
                f"Position {int(position_ids.max())} exceeds max_position_embeddings={self.max_positions} of the "
                "learned position table; use position_embedding_type='sinusoidal' or a larger table."
            )
        return super().forward(position_ids + self.offset)


# §3.2.1 Scaled Dot-Product Attention (the eager path; sdpa, flash and flex come from transformers' interface)
def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, and the weights. transformers gives sdpa no mask for an unpadded causal batch
    (its `is_causal` masks), so a causal module with several queries and no mask masks the future here too.

    Args:
        module: the attention module (its `config.fast_path`, `training` and `is_causal` are read).
        query: `(batch, heads, tgt_len, d_k)`.
        key: `(batch, heads, src_len, d_k)`.
        value: `(batch, heads, src_len, d_v)`.
        attention_mask: boolean (True: attend) or additive, broadcastable to `(batch, heads, tgt_len, src_len)`;
            None for no mask.
        scaling: the factor of the scores, 1 / sqrt(d_k).
        dropout: the attention dropout's probability (0 outside training).
        **kwargs: what transformers' attention interface passes on; ignored here.

    Returns:
        The output, `(batch, tgt_len, heads, d_v)`, and the weights, `(batch, heads, tgt_len, src_len)`.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (batch, heads, tgt_len, src_len)
    if attention_mask is None and getattr(module, "is_causal", False) and query.shape[2] > 1:
        attention_mask = query.new_ones(query.shape[2], key.shape[2], dtype=torch.bool).tril()
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = dropout_function(module.config.fast_path)(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (batch, tgt_len, heads, d_v)
    return output, weights


# §3.2.2 Multi-Head Attention
# The beams of a sentence share its source (§6.1 decoding keeps one row per sentence): the encoder output and the
# cross-attention keys and values stay at one row per sentence, and a sentence's `group` consecutive decoder rows
# (its beams) attend to them as extra query positions of that one row (also the ONNX export's decoder step).
def queries_per_source(query: torch.Tensor, sources: int) -> torch.Tensor:
    """(batch, heads, tgt_len, d) queries as (sources, heads, group · tgt_len, d), with group = batch / sources."""
    return query.unflatten(0, (sources, -1)).transpose(1, 2).flatten(2, 3)


def rows_per_beam(grouped: torch.Tensor, tgt_len: int) -> torch.Tensor:
    """(sources, heads, group · tgt_len, d) back to (batch, heads, tgt_len, d): `queries_per_source` undone."""
    return grouped.unflatten(2, (-1, tgt_len)).transpose(1, 2).flatten(0, 1)


def rows_per_source(states: torch.Tensor, sources: int) -> torch.Tensor:
    """(batch, len, d) decoder states as (sources, group · len, d): the query shape the cross-attention mask needs.
    Equal batches stay as they are (reshaping them would tie an exported graph's batch size to its example's)."""
    if states.shape[0] == sources:
        return states
    return states.reshape(sources, -1, states.shape[-1])


class VaswaniTransformerAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""

    def __init__(
        self, config: VaswaniTransformerConfig, layer_idx: int | None = None, is_causal: bool = False
    ) -> None:
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.num_heads = config.num_heads
        self.d_k = config.head_dim_k
        self.d_v = config.head_dim_v
        self.scaling = self.d_k**-0.5
        self.dropout = config.attention_dropout
        # The paper's projections W^Q, W^K, W^V, W^O are plain matrices: no biases (as in tensor2tensor); fairseq's
        # have them (`attention_bias`, for its published weights).
        self.q_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=config.attention_bias)
        self.k_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=config.attention_bias)
        self.v_proj = nn.Linear(config.d_model, self.num_heads * self.d_v, bias=config.attention_bias)
        self.out_proj = nn.Linear(self.num_heads * self.d_v, config.d_model, bias=config.attention_bias)

    def _split_heads(self, states: torch.Tensor, head_dim: int) -> torch.Tensor:
        return states.unflatten(-1, (self.num_heads, head_dim)).transpose(1, 2)  # (batch, heads, len, dim)

    def keys_values(
        self, key_value_states: torch.Tensor, past_key_values: Cache | None, is_cross_attention: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V through the decoding cache (transformers' Cache API, as Marian's attention uses it):
        self-attention appends this step's to the cache's; cross-attention's are computed at a generation's first
        step and read from the cache after. Without a cache, the keys and values of `key_value_states` alone."""
        cache = past_key_values
        if isinstance(past_key_values, EncoderDecoderCache):
            if is_cross_attention and past_key_values.is_updated.get(self.layer_idx):
                layer = past_key_values.cross_attention_cache.layers[self.layer_idx]
                return layer.keys, layer.values
            cache = (
                past_key_values.cross_attention_cache if is_cross_attention else cache.self_attention_cache
            )
        key_value_states = residual_stream(key_value_states, self.config.fast_path)  # one cast for K and V
        keys = self._split_heads(self.k_proj(key_value_states), self.d_k)  # (batch, heads, src_len, d_k)
        values = self._split_heads(self.v_proj(key_value_states), self.d_v)  # (batch, heads, src_len, d_v)
        if cache is not None:
            keys, values = cache.update(keys, values, self.layer_idx)
            if is_cross_attention:
                past_key_values.is_updated[self.layer_idx] = True
        return keys, values

    def _attention_function(self, query: torch.Tensor, weights_wanted: bool) -> Callable:
        """The configured kernel (transformers' attention interface), or the eager path where the fast path
        prefers it or the call wants the weights (`output_attentions`), which sdpa and flash attention never give."""
        implementation = self.config._attn_implementation
        if weights_wanted or prefers_eager_attention(query, implementation, self.config.fast_path):
            return eager_attention_forward
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Multi-head attention of `hidden_states` over itself (self-attention) or over `key_value_states`.

        Args:
            hidden_states: `(batch, tgt_len, d_model)`, the queries' states.
            key_value_states: `(sources, src_len, d_model)`, the encoder's output for cross-attention (`sources` is
                `batch` or, while beams share their sentence's source, `batch / beams`); None for self-attention.
            attention_mask: the mask of `eager_attention_forward` (or of the configured kernel); None for none.
            past_key_values: the decoding cache, updated in place; None outside decoding.
            **kwargs: transformers' attention options (`output_attentions`, ...).

        Returns:
            The output, `(batch, tgt_len, d_model)`, and the weights, `(batch, heads, tgt_len, src_len)`, or None where
            the kernel gives none (sdpa, flash attention).
        """
        is_cross_attention = key_value_states is not None
        query = self._split_heads(self.q_proj(hidden_states), self.d_k)  # (batch, heads, tgt_len, d_k)
        kv_states = key_value_states if is_cross_attention else hidden_states
        keys, values = self.keys_values(kv_states, past_key_values, is_cross_attention)
        grouped = query.shape[0] != keys.shape[0]  # beams sharing their sentence's keys and values
        if grouped:
            query = queries_per_source(query, keys.shape[0])  # (sources, heads, group · tgt_len, d_k)
        dropout = self.dropout if self.training else 0.0
        output, weights = self._attention_function(query, bool(kwargs.get("output_attentions")))(
            self, query, keys, values, attention_mask, dropout=dropout, scaling=self.scaling, **kwargs
        )
        output = output.reshape(
            *hidden_states.shape[:-1], -1
        )  # Concat(head_1, …, head_h): (batch, tgt_len, h·d_v)
        if grouped and weights is not None:
            weights = rows_per_beam(weights, hidden_states.shape[1])  # (batch, heads, tgt_len, src_len)
        return self.out_proj(output), weights


# §3.3 Position-wise Feed-Forward Networks
class VaswaniTransformerFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2."""

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = dropout_module(config.activation_dropout, config.fast_path)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """FFN(x), position by position.

        Args:
            hidden_states: `(batch, len, d_model)`.

        Returns:
            `(batch, len, d_model)`.
        """
        hidden_states = self.activation_fn(self.fc1(hidden_states))  # (batch, len, d_ff)
        return self.fc2(self.activation_dropout(hidden_states))  # (batch, len, d_model)


# §3.1 Encoder and Decoder Stacks: each sub-layer's output is LayerNorm(x + Dropout(Sublayer(x))) (post-norm, §5.4).
# Each layer registers its feed-forward block first, as the first release did: initialisation draws its random
# numbers in registration order, so a seed still gives the same model.
class VaswaniTransformerEncoderLayer(GradientCheckpointingLayer):
    """Self-attention, then the feed-forward network; each wrapped in residual dropout and a layer norm."""

    def __init__(self, config: VaswaniTransformerConfig, layer_idx: int) -> None:
        super().__init__()
        self.feed_forward = VaswaniTransformerFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.self_attn = VaswaniTransformerAttention(config, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = dropout_module(config.dropout, config.fast_path)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """One encoder layer: self-attention, then the feed-forward network, each post-norm.

        Args:
            hidden_states: `(batch, src_len, d_model)`.
            attention_mask: the source's padding mask as the attention kernel takes it, or None.
            **kwargs: transformers' attention options.

        Returns:
            `(batch, src_len, d_model)`.
        """
        attended, _ = self.self_attn(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = self.self_attn_layer_norm(hidden_states + self.dropout(attended))
        transformed = self.feed_forward(hidden_states)
        return self.final_layer_norm(hidden_states + self.dropout(transformed))  # (batch, src_len, d_model)


class VaswaniTransformerDecoderLayer(GradientCheckpointingLayer):
    """Masked self-attention, encoder-decoder attention, then the feed-forward network; each post-norm."""

    def __init__(self, config: VaswaniTransformerConfig, layer_idx: int) -> None:
        super().__init__()
        self.feed_forward = VaswaniTransformerFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.self_attn = VaswaniTransformerAttention(config, layer_idx, is_causal=True)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = VaswaniTransformerAttention(config, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.dropout = dropout_module(config.dropout, config.fast_path)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        """One decoder layer: masked self-attention, encoder-decoder attention, the feed-forward network.

        Args:
            hidden_states: `(batch, tgt_len, d_model)`.
            attention_mask: the causal (and padding) mask of the target, or None.
            encoder_hidden_states: `(sources, src_len, d_model)`, the encoder's output (`sources` is `batch`, or
                `batch / beams` while beams share their source).
            encoder_attention_mask: the source's padding mask for cross-attention, or None.
            past_key_values: the decoding cache, updated in place; None outside decoding.
            **kwargs: transformers' attention options.

        Returns:
            `(batch, tgt_len, d_model)`.
        """
        attended, _ = self.self_attn(
            hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs
        )
        hidden_states = self.self_attn_layer_norm(hidden_states + self.dropout(attended))
        attended, _ = self.encoder_attn(
            hidden_states,
            key_value_states=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self.encoder_attn_layer_norm(hidden_states + self.dropout(attended))
        transformed = self.feed_forward(hidden_states)
        return self.final_layer_norm(hidden_states + self.dropout(transformed))  # (batch, tgt_len, d_model)


class VaswaniTransformerPreTrainedModel(RemoteCodeSavingMixin, PreTrainedModel):
    """Weight initialisation and transformers plumbing shared by all Vaswani Transformer classes (saved with the
    translation pipeline's code: `RemoteCodeSavingMixin`)."""

    config: VaswaniTransformerConfig
    config_class = VaswaniTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VaswaniTransformerEncoderLayer", "VaswaniTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True  # the decoding step traces as one graph (tested), as CUDA graphs need

    def mark_tied_weights_as_initialized(self, loading_info: Any) -> None:
        """transformers' marking of tied targets as loaded, less the decoder's table: it is the encoder's very
        parameter (see `VaswaniTransformerModel`), so marking it would leave a checkpoint without it on the meta
        device, uninitialised and unreported."""
        declared = self.all_tied_weights_keys
        self.all_tied_weights_keys = {
            target: source
            for target, source in declared.items()
            if self.get_parameter(target) is not self.get_parameter(source)
        }
        try:
            super().mark_tied_weights_as_initialized(loading_info)
        finally:
            self.all_tied_weights_keys = declared

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Projections and the shared embedding by `config.init_scheme`; LayerNorm to identity; biases to zero.
        "normal" (N(0, 0.02), the default) starts each post-norm layer near the identity; "xavier" makes 6 encoder
        layers' outputs nearly one vector, which small corpora turn into collapse (docs/decisions/
        initialisation.md)."""
        xavier = self.config.init_scheme == "xavier"
        if isinstance(module, VaswaniTransformerSinusoidalPositionalEncoding):
            init.copy_(module.inv_freq, module.compute_inv_freq(module.d_model, module.layout))
        elif isinstance(module, nn.Linear):
            if xavier:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # fairseq / tensor2tensor: N(0, d_model^-0.5), so that the sqrt(d_model)-scaled input has std 1.
            std = self.config.d_model**-0.5 if xavier else self.config.init_std
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)


# §3.4 Embeddings and Softmax: embeddings × sqrt(d_model) + positions, then dropout (§5.4)
class VaswaniTransformerStack(VaswaniTransformerPreTrainedModel):
    """What the encoder and decoder stacks share: token embeddings, positions, and their N layers."""

    def __init__(self, config: VaswaniTransformerConfig, layers: list[nn.Module]) -> None:
        super().__init__(config)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        d_model, offset = config.d_model, config.position_offset
        self.embed_positions = (  # the §3.5 sinusoids, or Table 3 row (E)'s learned table
            VaswaniTransformerLearnedPositionalEmbedding(config.max_position_embeddings, d_model, offset)
            if config.position_embedding_type == "learned"
            else VaswaniTransformerSinusoidalPositionalEncoding(d_model, config.sinusoid_layout, offset)
        )
        self.dropout = dropout_module(config.dropout, config.fast_path)
        self.layers = nn.ModuleList(layers)
        self.gradient_checkpointing = False
        self.post_init()

    def _scaled_embeddings(
        self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None
    ) -> torch.Tensor:
        """Token embeddings multiplied by sqrt(d_model) (§3.4), from ids or given embeddings."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(
                "Pass exactly one of input_ids or inputs_embeds (decoder_input_ids or decoder_inputs_embeds)."
            )
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        return inputs_embeds * self.embed_scale

    def embed(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """A stack's input for `input_ids` at `position_ids` (each row may stand at its own positions): scaled
        embeddings plus positional encodings, then dropout (§3.4, §3.5)."""
        return self._add_positions(self._scaled_embeddings(input_ids, None), position_ids)

    def _add_positions(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Embeddings + positional encodings, then dropout (§5.4 "we apply dropout to the sums")."""
        hidden_states = inputs_embeds + self.embed_positions(position_ids).to(inputs_embeds.dtype)
        hidden_states = residual_stream(hidden_states, self.config.fast_path)  # (batch, len, d_model)
        return self.dropout(hidden_states)


class VaswaniTransformerEncoder(VaswaniTransformerStack):
    """The encoder stack: N identical layers, no final layer norm (post-norm)."""

    _can_record_outputs = {
        "hidden_states": VaswaniTransformerEncoderLayer,
        "attentions": VaswaniTransformerAttention,
    }

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__(
            config, [VaswaniTransformerEncoderLayer(config, i) for i in range(config.num_encoder_layers)]
        )

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """The source's encoding: scaled embeddings plus positions through the N encoder layers.

        Args:
            input_ids: `(batch, src_len)` source token ids; or `inputs_embeds` instead.
            attention_mask: `(batch, src_len)`, 1 for real tokens and 0 for padding; None for none.
            inputs_embeds: `(batch, src_len, d_model)` embeddings, unscaled (× sqrt(d_model) is applied here).
            **kwargs: transformers' options (`output_attentions`, `output_hidden_states`, ...).

        Returns:
            `BaseModelOutput` with `last_hidden_state` `(batch, src_len, d_model)` (and the hidden states and attention
            weights asked for).

        Raises:
            ValueError: both or neither of `input_ids` and `inputs_embeds`.
        """
        inputs_embeds = self._scaled_embeddings(input_ids, inputs_embeds)
        # Positions count real tokens only, so left- and right-padded batches see the same positions.
        if attention_mask is not None:
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (batch, src_len)
        else:
            position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
        hidden_states = self._add_positions(inputs_embeds, position_ids)
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=inputs_embeds, attention_mask=attention_mask
        )
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VaswaniTransformerDecoder(VaswaniTransformerStack):
    """The decoder stack: N identical layers with masked self-attention and encoder-decoder attention."""

    _can_record_outputs = {
        "hidden_states": VaswaniTransformerDecoderLayer,
        "attentions": OutputRecorder(VaswaniTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VaswaniTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__(
            config, [VaswaniTransformerDecoderLayer(config, i) for i in range(config.num_decoder_layers)]
        )

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """The target's states given the source's encoding: N layers of masked self-attention and encoder-decoder attention.

        Args:
            input_ids: `(batch, tgt_len)` target token ids so far (one position a step while decoding with a cache); or
                `inputs_embeds` instead.
            attention_mask: `(batch, past_len + tgt_len)` target padding mask, or None.
            encoder_hidden_states: `(sources, src_len, d_model)`, the encoder's output.
            encoder_attention_mask: `(sources, src_len)` source padding mask, or None.
            past_key_values: the decoding cache (`EncoderDecoderCache`), updated in place; None to start one when
                `use_cache`.
            inputs_embeds: `(batch, tgt_len, d_model)` embeddings, unscaled.
            use_cache: keep a cache of keys and values for the next step.
            **kwargs: transformers' options (`output_attentions`, `output_hidden_states`, ...).

        Returns:
            `BaseModelOutputWithPastAndCrossAttentions` with `last_hidden_state` `(batch, tgt_len, d_model)` and the
            cache.
        """
        past_key_values = take_cache(past_key_values, kwargs)
        if use_cache and past_key_values is None:  # decoding: keys and values of self- and cross-attention
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())
        inputs_embeds = self._scaled_embeddings(input_ids, inputs_embeds)
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        # arange of a fixed length, then shifted: the static cache's length is data-dependent under torch.compile
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_length
        hidden_states = self._add_positions(inputs_embeds, position_ids)

        self_attention_cache = (
            past_key_values.self_attention_cache
            if isinstance(past_key_values, EncoderDecoderCache)
            else past_key_values
        )
        causal_mask = create_causal_mask(
            config=self.config,
            inputs_embeds=inputs_embeds,
            attention_mask=attention_mask,
            **{CACHE_NAME: self_attention_cache},
            position_ids=position_ids.unsqueeze(0),
        )
        cross_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=rows_per_source(inputs_embeds, encoder_hidden_states.shape[0]),
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, as gradient checkpointing requires
                encoder_attention_mask=cross_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **{CACHE_NAME: past_key_values}
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Decoder inputs for teacher forcing: <s> y_1 … y_{n-1}, with ignored (-100) labels turned into padding.

    Args:
        labels: `(batch, tgt_len)` target ids, -100 where ignored.
        pad_token_id: the padding id that replaces -100.
        decoder_start_token_id: the first decoder input.

    Returns:
        `(batch, tgt_len)` decoder input ids.
    """
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class VaswaniTransformerModel(VaswaniTransformerPreTrainedModel):
    """Encoder and decoder; the source and target embeddings are one shared BPE table (§3.4)."""

    # One table (see __init__) under two names, declared so transformers' checks know it; saved once.
    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}
    _keys_to_ignore_on_save = {"decoder.embed_tokens.weight"}

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__(config)
        self.encoder = VaswaniTransformerEncoder(config)
        self.decoder = VaswaniTransformerDecoder(config)
        # The decoder embeds with the encoder's module itself, so FSDP sees one module holding the table.
        self.decoder.embed_tokens = self.encoder.embed_tokens
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        """The shared token embedding (§3.4).

        Returns:
            The `(vocab_size, d_model)` embedding both stacks use.
        """
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        """Replace the shared token embedding of the encoder and the decoder at once.

        Args:
            value: the new `(vocab_size, d_model)` embedding, set on both stacks.
        """
        self.encoder.embed_tokens = self.decoder.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...] | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """Encode the source (unless `encoder_outputs` is given) and decode the target.

        Args:
            input_ids: `(batch, src_len)` source ids; not needed with `encoder_outputs`.
            attention_mask: `(batch, src_len)` source padding mask (1 real, 0 padding), or None.
            decoder_input_ids: `(batch, tgt_len)` decoder inputs (`<s> y_1 … y_{n-1}` in training).
            decoder_attention_mask: `(batch, tgt_len)` target padding mask, or None.
            encoder_outputs: the encoder's output of an earlier call (its `last_hidden_state` `(batch, src_len,
                d_model)`), to skip encoding.
            past_key_values: the decoding cache, updated in place, or None.
            inputs_embeds: `(batch, src_len, d_model)` source embeddings instead of `input_ids`.
            decoder_inputs_embeds: `(batch, tgt_len, d_model)` target embeddings instead of `decoder_input_ids`.
            use_cache: keep the decoder's keys and values for the next step.
            **kwargs: transformers' options (`output_attentions`, `output_hidden_states`, `return_dict`, ...).

        Returns:
            `Seq2SeqModelOutput`: `last_hidden_state` `(batch, tgt_len, d_model)`, `encoder_last_hidden_state`
            `(batch, src_len, d_model)`, the cache and the hidden states and attentions asked for.
        """
        past_key_values = take_cache(past_key_values, kwargs)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_NAME: getattr(decoder_outputs, CACHE_NAME)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class VaswaniTransformerForConditionalGeneration(
    VaswaniTransformerPreTrainedModel, VaswaniTransformerLossMixin, VaswaniTransformerGenerationMixin
):
    """The translation model: decoder output → tied linear → softmax (§3.4), with the §5.4 training loss
    (`VaswaniTransformerLossMixin`) and the §6.1 decoding (`VaswaniTransformerGenerationMixin`)."""

    _tied_weights_keys = {"lm_head.weight": "model.encoder.embed_tokens.weight"}
    _keys_to_ignore_on_save = {"model.decoder.embed_tokens.weight"}  # as VaswaniTransformerModel's
    # The loss is normalised by the Trainer's token count, which keeps gradient accumulation exact.
    accepts_loss_kwargs = True

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__(config)
        self.model = VaswaniTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()
        # §6.1: beam size 4, length penalty α = 0.6 (GNMT form, see `length_penalty_type`).
        self.generation_config.update(num_beams=4, length_penalty=0.6, early_stopping=True)

    def save_pretrained(self, save_directory: Any, *args: Any, **kwargs: Any) -> None:
        """As saved before, with the decoding settings as generation reads them (not transformers' fallbacks).

        Args:
            save_directory: the folder to write (made if missing).
            *args: `PreTrainedModel.save_pretrained`'s.
            **kwargs: `PreTrainedModel.save_pretrained`'s.
        """
        with self.settings_as_generation_reads_them():
            super().save_pretrained(save_directory, *args, **kwargs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Teacher forcing's decoder inputs for `labels` (what `DataCollatorForSeq2Seq` asks the model for).

        Args:
            labels: `(batch, tgt_len)` target ids, -100 where ignored.

        Returns:
            `(batch, tgt_len)` decoder input ids: `shift_tokens_right` with the config's ids.
        """
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple[torch.Tensor, ...] | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """Next-token logits through the tied softmax (§3.4), and the loss when `labels` are given.

        Args:
            input_ids: `(batch, src_len)` source ids; not needed with `encoder_outputs`.
            attention_mask: `(batch, src_len)` source padding mask (1 real, 0 padding), or None.
            decoder_input_ids: `(batch, tgt_len)` decoder inputs; made from `labels` when None.
            decoder_attention_mask: `(batch, tgt_len)` target padding mask, or None.
            encoder_outputs: the encoder's output of an earlier call, to skip encoding.
            past_key_values: the decoding cache, updated in place, or None.
            inputs_embeds: `(batch, src_len, d_model)` source embeddings instead of `input_ids`.
            decoder_inputs_embeds: `(batch, tgt_len, d_model)` target embeddings instead of `decoder_input_ids`.
            labels: `(batch, tgt_len)` target ids, -100 where ignored: the loss is computed (label-smoothed in
                training, §5.4; the plain negative log-likelihood per token in eval mode) and no cache is kept.
            use_cache: keep the decoder's keys and values for the next step.
            num_items_in_batch: the number of target tokens the loss is normalised by (the Trainer's count over
                accumulated batches); None: this batch's.
            **kwargs: transformers' options (`output_attentions`, `output_hidden_states`, `return_dict`, ...).

        Returns:
            `Seq2SeqLMOutput`: `loss` (a scalar, with `labels`), `logits` `(batch, tgt_len, vocab_size)` (None where the
            fused loss computed the loss without them), the cache and the hidden states and attentions asked for.
        """
        past_key_values = take_cache(past_key_values, kwargs)
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits, loss = None, None
        if labels is not None and self.fuses_loss():
            loss = self.fused_loss(outputs.last_hidden_state, labels, num_items_in_batch)  # no logits held
        else:
            logits = self.lm_head(outputs.last_hidden_state)  # (batch, tgt_len, vocab)
            if labels is not None:
                # §5.4: smoothing regularises training ("hurts perplexity"); in eval mode the loss is the plain
                # negative log-likelihood per token, so eval_loss gives the perplexity (exp) of Table 3
                smoothing = None if self.training else 0.0
                loss = self.label_smoothed_loss(logits, labels, num_items_in_batch, smoothing)
        # the model's outputs (cache, hidden states, attentions) pass through under the same names
        passed_on = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return Seq2SeqLMOutput(loss=loss, logits=logits, **passed_on)


# save_pretrained writes `auto_map` and copies these files, so that a saved folder loads with
# AutoModel / AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True) where this package is not installed
VaswaniTransformerModel.register_for_auto_class("AutoModel")
VaswaniTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "VaswaniTransformerForConditionalGeneration",
    "VaswaniTransformerModel",
    "VaswaniTransformerPreTrainedModel",
]
