"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), in paper order.

§3.5 positions → §3.2 attention → §3.3 feed-forward → §3.1 post-norm encoder/decoder layers → stacks with
§3.4 scaled, tied embeddings → encoder-decoder model → model with the tied softmax, the §5.4 label-smoothed
loss and §6.1 beam search with the GNMT length penalty.
"""

import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import __version__ as transformers_version
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
from .generation_vaswani_transformer import beam_search, is_plain_request, pad_after_end
from .remote_code import ship_translation_pipeline


# §3.5 Positional Encoding
class VaswaniTransformerSinusoidalPositionalEncoding(nn.Module):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same): interleaved, any length."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        # Only the frequencies are stored, so there is no maximum length. The buffer is not saved; transformers
        # materialises it as garbage on `from_pretrained`, so `_init_weights` recomputes it.
        self.register_buffer("inv_freq", self.compute_inv_freq(d_model), persistent=False)

    @staticmethod
    def compute_inv_freq(d_model: int) -> torch.Tensor:
        """1 / 10000^(2i / d_model) for i = 0 … d_model/2 - 1, computed in float64 for exactness."""
        exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
        return (1.0 / 10000.0**exponents).float()

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        angles = position_ids.float().unsqueeze(-1) * self.inv_freq  # (..., seq_len, d_model / 2)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (..., seq_len, d_model)


class VaswaniTransformerLearnedPositionalEmbedding(nn.Embedding):
    """Table 3 row (E): learned positional embeddings instead of sinusoids."""

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        if position_ids.max() >= self.num_embeddings:
            raise ValueError(
                f"Position {int(position_ids.max())} exceeds max_position_embeddings={self.num_embeddings} of the "
                "learned position table; use position_embedding_type='sinusoidal' or a larger table."
            )
        return super().forward(position_ids)


# §5.4 Residual Dropout (also the optional attention and activation dropout)
def apply_dropout(hidden_states: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`nn.functional.dropout`: zero each entry with probability p, scale the rest by 1 / (1 − p).

    On a CPU the keep-mask is drawn with `torch.rand`, twice as fast there as the `bernoulli_` draw of
    nn.functional.dropout, which took 17% of a `tiny` training step (benchmarks/RESULTS.md); the same mask
    distribution, from the same random state. Elsewhere nn.functional.dropout (one fused kernel on a GPU).
    """
    if not training or not 0.0 < p < 1.0 or hidden_states.device.type != "cpu":
        return nn.functional.dropout(hidden_states, p=p, training=training)
    keep = torch.rand(hidden_states.shape, device=hidden_states.device) >= p
    return hidden_states * keep * (1.0 / (1.0 - p))


# §3.2.1 Scaled Dot-Product Attention (the eager path; sdpa/flash come from the transformers interface)
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
    """softmax(Q K^T / sqrt(d_k)) V, returning the attention weights too.

    Masks as either path makes them: transformers gives sdpa no mask for an unpadded causal batch (sdpa's
    `is_causal` then masks), so a causal module with several queries and no mask masks the future here too.
    """
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (batch, heads, tgt_len, src_len)
    if attention_mask is None and getattr(module, "is_causal", False) and query.shape[2] > 1:
        attention_mask = torch.ones(
            query.shape[2], key.shape[2], dtype=torch.bool, device=query.device
        ).tril()
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = apply_dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (batch, tgt_len, heads, d_v)
    return output, weights


# §3.2.2 Multi-Head Attention
class VaswaniTransformerAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O with head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)."""

    def __init__(
        self, config: VaswaniTransformerConfig, layer_idx: int | None = None, is_causal: bool = False
    ):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.num_heads = config.num_heads
        self.d_k = config.head_dim_k
        self.d_v = config.head_dim_v
        self.scaling = self.d_k**-0.5
        self.dropout = config.attention_dropout
        # The paper's projections W^Q, W^K, W^V, W^O are plain matrices: no biases (as in tensor2tensor).
        self.q_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=False)
        self.k_proj = nn.Linear(config.d_model, self.num_heads * self.d_k, bias=False)
        self.v_proj = nn.Linear(config.d_model, self.num_heads * self.d_v, bias=False)
        self.out_proj = nn.Linear(self.num_heads * self.d_v, config.d_model, bias=False)

    def _split_heads(self, states: torch.Tensor, head_dim: int) -> torch.Tensor:
        batch, length = states.shape[:2]
        return states.view(batch, length, self.num_heads, head_dim).transpose(
            1, 2
        )  # (batch, heads, len, dim)

    def _project_keys_values(
        self,
        key_value_states: torch.Tensor,
        past_key_values: Cache | None,
        is_cross_attention: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V for this step; cross-attention K/V are computed once per generation and then reused."""
        cache = None
        if isinstance(past_key_values, EncoderDecoderCache):
            if is_cross_attention and past_key_values.is_updated.get(self.layer_idx):
                layer = past_key_values.cross_attention_cache.layers[self.layer_idx]
                return layer.keys, layer.values
            cache = (
                past_key_values.cross_attention_cache
                if is_cross_attention
                else past_key_values.self_attention_cache
            )
        elif past_key_values is not None:
            cache = past_key_values
        keys = self._split_heads(self.k_proj(key_value_states), self.d_k)
        values = self._split_heads(self.v_proj(key_value_states), self.d_v)
        if cache is not None:
            keys, values = cache.update(keys, values, self.layer_idx)
            if is_cross_attention:
                past_key_values.is_updated[self.layer_idx] = True
        return keys, values

    def _attention_function(self, query: torch.Tensor) -> Callable:
        """The configured kernel (transformers' attention interface), except sdpa in bfloat16 on a CPU.

        There torch's sdpa kernels are slower than the two matrix products of the eager path (training 3-6x,
        decoding 2-4x; benchmarks/RESULTS.md, "Using the whole CPU"), so the eager path computes the same function.
        """
        implementation = self.config._attn_implementation
        if implementation == "sdpa" and query.device.type == "cpu" and query.dtype == torch.bfloat16:
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
        is_cross_attention = key_value_states is not None
        query = self._split_heads(self.q_proj(hidden_states), self.d_k)  # (batch, heads, tgt_len, d_k)
        keys, values = self._project_keys_values(
            key_value_states if is_cross_attention else hidden_states, past_key_values, is_cross_attention
        )
        # Beams share their sentence's source (see `_expand_inputs_for_generation`): `group` consecutive query rows
        # per key row attend to one copy of its keys/values, as extra query positions of that row.
        group = query.shape[0] // keys.shape[0]
        if group > 1:
            # (sources, heads, group · tgt_len, d_k)
            query = query.unflatten(0, (-1, group)).transpose(1, 2).flatten(2, 3)
        output, weights = self._attention_function(query)(
            self,
            query,
            keys,
            values,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(
            *hidden_states.shape[:-1], -1
        )  # (batch, tgt_len, heads * d_v): Concat(head_i)
        if group > 1 and weights is not None:
            # (batch, heads, tgt_len, src_len) again, one row per beam
            weights = weights.unflatten(2, (group, -1)).transpose(1, 2).flatten(0, 1)
        return self.out_proj(output), weights


# §3.3 Position-wise Feed-Forward Networks
class VaswaniTransformerFeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2."""

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.activation_fn(self.fc1(hidden_states))
        hidden_states = apply_dropout(hidden_states, p=self.activation_dropout, training=self.training)
        return self.fc2(hidden_states)


# §3.1 Encoder and Decoder Stacks: each sub-layer is LayerNorm(x + Dropout(Sublayer(x))) (post-norm, §5.4)
class VaswaniTransformerPostNormLayer(GradientCheckpointingLayer):
    """Shared by encoder and decoder layers: the residual-dropout-norm wrapper and the feed-forward block."""

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__()
        self.dropout = config.dropout
        self.feed_forward = VaswaniTransformerFeedForward(config)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def _residual(
        self, residual: torch.Tensor, sublayer_output: torch.Tensor, norm: nn.LayerNorm
    ) -> torch.Tensor:
        sublayer_output = apply_dropout(sublayer_output, p=self.dropout, training=self.training)
        return norm(residual + sublayer_output)

    def _feed_forward_sublayer(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self._residual(hidden_states, self.feed_forward(hidden_states), self.final_layer_norm)


class VaswaniTransformerEncoderLayer(VaswaniTransformerPostNormLayer):
    """Self-attention then feed-forward, each wrapped in residual, dropout and layer norm."""

    def __init__(self, config: VaswaniTransformerConfig, layer_idx: int) -> None:
        super().__init__(config)
        self.self_attn = VaswaniTransformerAttention(config, layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attended, _ = self.self_attn(hidden_states, attention_mask=attention_mask, **kwargs)
        hidden_states = self._residual(hidden_states, attended, self.self_attn_layer_norm)
        return self._feed_forward_sublayer(hidden_states)


class VaswaniTransformerDecoderLayer(VaswaniTransformerPostNormLayer):
    """Masked self-attention, encoder-decoder attention, then feed-forward; each post-norm."""

    def __init__(self, config: VaswaniTransformerConfig, layer_idx: int) -> None:
        super().__init__(config)
        self.self_attn = VaswaniTransformerAttention(config, layer_idx, is_causal=True)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = VaswaniTransformerAttention(config, layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attended, _ = self.self_attn(
            hidden_states, attention_mask=attention_mask, past_key_values=past_key_values, **kwargs
        )
        hidden_states = self._residual(hidden_states, attended, self.self_attn_layer_norm)
        attended, _ = self.encoder_attn(
            hidden_states,
            key_value_states=encoder_hidden_states,
            attention_mask=encoder_attention_mask,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self._residual(hidden_states, attended, self.encoder_attn_layer_norm)
        return self._feed_forward_sublayer(hidden_states)


class VaswaniTransformerPreTrainedModel(PreTrainedModel):
    """Weight initialisation and transformers plumbing shared by all Vaswani Transformer classes."""

    config: VaswaniTransformerConfig
    config_class = VaswaniTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VaswaniTransformerEncoderLayer", "VaswaniTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _can_compile_fullgraph = True  # the decoding step traces as one graph (tested), as CUDA graphs need

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Projections and the shared embedding by `config.init_scheme`; LayerNorm to identity; biases to zero.

        Why "normal" is the default: with N(0, 0.02) every residual branch starts at 0.15-0.3 times the size of
        its input (base), so each post-norm layer LayerNorm(x + Sublayer(x)) starts close to the identity and
        the encoder's outputs at different positions stay distinct. "xavier" starts every branch at 0.6-1.0
        times its input; each layer then mixes the sentence average into every position, and after 6 layers
        the encoder's outputs are nearly the same vector everywhere (cosine 0.96), which training at the
        learning rates of small-corpus recipes turns into collapse. Measurements: benchmarks/RESULTS.md.
        """
        xavier = self.config.init_scheme == "xavier"
        if isinstance(module, VaswaniTransformerSinusoidalPositionalEncoding):
            init.copy_(module.inv_freq, module.compute_inv_freq(module.d_model))
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

    def save_pretrained(self, save_directory: Any, *args: Any, **kwargs: Any) -> None:
        """As transformers saves, with `AutoModel` (the encoder-decoder body) in the remote-code `auto_map` too,
        so that every saved model of this family loads with both Auto classes and `trust_remote_code=True`, and
        with the translation pipeline's code (`remote_code.ship_translation_pipeline`).

        FSDP2 shards a model by giving it a subclass defined in torch; while saving, the model is its own class
        again, so the folder gets this file and an `auto_map` naming it, not torch's FSDP code.
        """
        sharded_class = type(self)
        self.__class__ = next(cls for cls in sharded_class.__mro__ if cls.__module__ == __name__)
        try:
            if self._auto_class is not None:
                module = __name__.rpartition(".")[2]
                auto_map = getattr(self.config, "auto_map", None) or {}
                self.config.auto_map = {**auto_map, "AutoModel": f"{module}.VaswaniTransformerModel"}
            super().save_pretrained(save_directory, *args, **kwargs)
            if self._auto_class is not None and kwargs.get("is_main_process", args[0] if args else True):
                ship_translation_pipeline(Path(save_directory), self.config.name_or_path)
        finally:
            self.__class__ = sharded_class


def _make_positions(config: VaswaniTransformerConfig) -> nn.Module:
    """The §3.5 sinusoids, or Table 3 row (E)'s learned table."""
    if config.position_embedding_type == "learned":
        return VaswaniTransformerLearnedPositionalEmbedding(config.max_position_embeddings, config.d_model)
    return VaswaniTransformerSinusoidalPositionalEncoding(config.d_model)


# §3.4 Embeddings and Softmax: embeddings × sqrt(d_model) + positions, then dropout (§5.4)
class VaswaniTransformerStack(VaswaniTransformerPreTrainedModel):
    """What the encoder and decoder stacks share: token embeddings, positions, and their N layers."""

    def __init__(self, config: VaswaniTransformerConfig, layers: list[nn.Module]) -> None:
        super().__init__(config)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = _make_positions(config)
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

    def _add_positions(self, inputs_embeds: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        """Embeddings + positional encodings, then dropout (§5.4 "we apply dropout to the sums")."""
        hidden_states = inputs_embeds + self.embed_positions(position_ids).to(inputs_embeds.dtype)
        return apply_dropout(hidden_states, p=self.config.dropout, training=self.training)


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


# transformers 5.24 renamed the decoding cache `past_key_values` → `cache`: in forward arguments, output fields and
# mask helpers (the old name warns, until 5.40). Outputs and helpers get the installed version's name.
CACHE_NAME = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def _take_cache(past_key_values: Cache | None, kwargs: dict[str, Any]) -> Cache | None:
    """The decoding cache, named `past_key_values` (transformers 5.17–5.23) or `cache` (its name from 5.24)."""
    cache = kwargs.pop("cache", None)
    return past_key_values if past_key_values is not None else cache


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
        past_key_values = _take_cache(past_key_values, kwargs)
        inputs_embeds = self._scaled_embeddings(input_ids, inputs_embeds)
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())  # self- and cross-attention
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
            # One row per source: the query rows of beams sharing a source are its extra query positions.
            inputs_embeds=inputs_embeds.reshape(len(encoder_hidden_states), -1, inputs_embeds.shape[-1]),
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
    """Decoder inputs for teacher forcing: <s> y_1 … y_{n-1}, with ignored (-100) labels turned into padding."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


class VaswaniTransformerModel(VaswaniTransformerPreTrainedModel):
    """Encoder and decoder; the source and target embeddings are one shared BPE table (§3.4)."""

    _keys_to_ignore_on_save = {
        "decoder.embed_tokens.weight"
    }  # the encoder's table, saved once (see __init__)

    def __init__(self, config: VaswaniTransformerConfig) -> None:
        super().__init__(config)
        self.encoder = VaswaniTransformerEncoder(config)
        self.decoder = VaswaniTransformerDecoder(config)
        # The decoder embeds with the encoder's module itself, not a copy tied by weight: sharding (FSDP) then
        # sees one module holding the table, never one parameter in two places. It is saved once, under the
        # encoder's name, and is no `_tied_weights_keys` entry: one would mark the table loaded before it is, and
        # a checkpoint without it would leave it on the meta device.
        self.decoder.embed_tokens = self.encoder.embed_tokens
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
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
        past_key_values = _take_cache(past_key_values, kwargs)
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


def gnmt_as_power_of_length(alpha: float, length: int) -> float:
    """The exponent e with length^e == ((5 + length) / 6)^alpha: the paper's penalty in transformers' form."""
    if length <= 1:
        return 0.0  # ((5 + 1) / 6)^alpha == 1 == 1^e for any e
    return alpha * math.log((5.0 + length) / 6.0) / math.log(length)


# The GNMT penalty rests on two private hooks of transformers' beam search. Should a transformers release rename
# them, change their keywords or stop calling them, beam search would silently fall back to |Y|^α: refuse instead.
BEAM_SEARCH_HOOKS = {
    "_update_finished_beams": ("cur_len", "decoder_prompt_len", "length_penalty"),
    "_check_early_stop_heuristic": (
        "cur_len",
        "decoder_prompt_len",
        "length_penalty",
        "early_stopping",
        "max_length",
    ),
}


def check_beam_search_hooks(mixin: type = GenerationMixin) -> None:
    """Raise ImportError unless `mixin`'s beam search calls both hooks with the keywords the GNMT penalty uses."""
    try:
        beam_search = inspect.getsource(mixin._beam_search)
    except (AttributeError, OSError, TypeError):
        beam_search = None  # no source to read (e.g. a frozen install): the signatures are still checked
    for name, keywords in BEAM_SEARCH_HOOKS.items():
        hook = getattr(mixin, name, None)
        parameters = inspect.signature(hook).parameters if callable(hook) else {}
        missing = [keyword for keyword in keywords if keyword not in parameters]
        not_called = beam_search is not None and f"self.{name}(" not in beam_search
        if hook is None or missing or not_called:
            problem = (
                "is missing" if hook is None else f"lacks {missing}" if missing else "is no longer called"
            )
            raise ImportError(
                f"transformers {transformers_version}: GenerationMixin.{name} {problem}, so the paper's GNMT "
                "length penalty (§6.1) cannot be applied. Install a supported transformers (>=5.17,<6)."
            )


check_beam_search_hooks()


# §5.4 Label Smoothing, fused with the tied softmax projection for training: logits are made and consumed one
# chunk of target tokens at a time, and their gradient is formed in the same pass, so the (tokens × vocab) fp32
# logits and their log-softmax, smoothing and gradient copies never exist at once (on a GPU the biggest tensors
# of a step; on a CPU fewer passes over them).
# Logits per chunk: large GEMMs on GPUs, cache-sized on CPUs (and other devices).
LOSS_CHUNK_ELEMENTS = {"cuda": 2**25, "cpu": 2**21}


class LinearLabelSmoothedCrossEntropy(torch.autograd.Function):
    """Σ over target tokens of the label-smoothed cross-entropy of softmax(hidden · weightᵀ); labels -100 skipped."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, epsilon: float
    ) -> torch.Tensor:
        # hidden (tokens, d_model), weight (vocab, d_model), labels (tokens,)
        vocab = weight.shape[0]
        chunk = max(1, LOSS_CHUNK_ELEMENTS.get(hidden.device.type, LOSS_CHUNK_ELEMENTS["cpu"]) // vocab)
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if ctx.needs_input_grad[1] else None
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, hidden.shape[0], chunk):
            rows = slice(start, start + chunk)
            states, kept = hidden[rows], (labels[rows] != -100).unsqueeze(1)  # (chunk, d_model), (chunk, 1)
            target = labels[rows].clamp(min=0).unsqueeze(1)  # (chunk, 1)
            # one fused kernel for log p: fewer passes over (chunk, vocab) than logsumexp and a subtraction
            log_probs = torch.log_softmax(nn.functional.linear(states, weight).float(), dim=-1)
            # −Σ_v q_v log p_v with q = (1 − ε)·one-hot + ε/V: −(1 − ε)·log p_y − ε·mean(log p)
            smoothed = -(1 - epsilon) * log_probs.gather(1, target) - epsilon * log_probs.mean(
                -1, keepdim=True
            )
            total += (smoothed * kept).sum()
            if grad_hidden is None and grad_weight is None:
                continue
            grad = log_probs.exp_().sub_(epsilon / vocab)  # ∂/∂z = softmax(z) − q
            grad.scatter_add_(1, target, grad.new_full(target.shape, epsilon - 1)).mul_(kept)
            grad = grad.to(states.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = grad @ weight.to(states.dtype)
            if grad_weight is not None:
                grad_weight += grad.t() @ states
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx: Any, grad_total: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_total
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_total).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None


class VaswaniTransformerForConditionalGeneration(VaswaniTransformerPreTrainedModel, GenerationMixin):
    """The translation model: decoder output → tied linear → softmax (§3.4), with the §5.4 training loss."""

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

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def label_smoothed_loss(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_items_in_batch: int | torch.Tensor | None = None,
        label_smoothing: float | None = None,
    ) -> torch.Tensor:
        """§5.4 label smoothing (ε_ls = config.label_smoothing unless given; 0 is the plain negative
        log-likelihood), summed over tokens, divided by the token count.

        The count is the Trainer's `num_items_in_batch` (all target tokens of the accumulated batch) when given,
        so that accumulating 2 batches of B equals one batch of 2B; otherwise this batch's non-ignored tokens.
        """
        loss = nn.functional.cross_entropy(
            logits.float().reshape(-1, logits.shape[-1]),
            labels.reshape(-1),
            ignore_index=-100,
            reduction="sum",
            label_smoothing=self.config.label_smoothing if label_smoothing is None else label_smoothing,
        )
        return self._per_token(loss, labels, num_items_in_batch)

    def fused_label_smoothed_loss(
        self,
        hidden_states: torch.Tensor,
        labels: torch.Tensor,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`label_smoothed_loss(lm_head(hidden_states), labels, …)` without materialising the logits."""
        loss = LinearLabelSmoothedCrossEntropy.apply(
            hidden_states.flatten(0, -2), self.lm_head.weight, labels.flatten(), self.config.label_smoothing
        )
        return self._per_token(loss, labels, num_items_in_batch)

    @staticmethod
    def _per_token(
        loss: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
    ) -> torch.Tensor:
        if num_items_in_batch is None:
            num_items_in_batch = (labels != -100).sum().clamp(min=1)
        if isinstance(num_items_in_batch, torch.Tensor):
            num_items_in_batch = num_items_in_batch.to(loss.device)
        return loss / num_items_in_batch

    def _fuses_loss(self) -> bool:
        """Whether a forward with labels takes the fused loss: training with gradients, a plain lm_head.

        Not while torch.compile traces (the compiler fuses the logits path itself), nor when lm_head was wrapped
        (e.g. by an adapter), whose own forward the fused loss would bypass.
        """
        return (
            self.config.fused_loss
            and self.training
            and torch.is_grad_enabled()
            and type(self.lm_head) is nn.Linear
            and not torch.compiler.is_compiling()
        )

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
        past_key_values = _take_cache(past_key_values, kwargs)
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
        if labels is not None and self._fuses_loss():
            loss = self.fused_label_smoothed_loss(outputs.last_hidden_state, labels, num_items_in_batch)
        else:
            logits = self.lm_head(outputs.last_hidden_state)  # (batch, tgt_len, vocab)
            if labels is not None:
                # §5.4: smoothing regularises training ("hurts perplexity"); in eval mode the loss is the plain
                # negative log-likelihood per token, so eval_loss gives the perplexity (exp) of Table 3
                smoothing = None if self.training else 0.0
                loss = self.label_smoothed_loss(logits, labels, num_items_in_batch, smoothing)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            **{CACHE_NAME: getattr(outputs, CACHE_NAME)},
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )

    # §6.1 decoding: "maximum output length … input length + 50, but terminate early when possible".
    def generate(
        self, inputs: torch.Tensor | None = None, generation_config: Any = None, **kwargs: Any
    ) -> Any:
        """`GenerationMixin.generate`, defaulting the output limit to the longest source + `max_length_offset`."""
        limits = ("max_length", "max_new_tokens")
        configs = [c for c in (generation_config, self.generation_config) if c is not None]
        has_limit = any(kwargs.get(k) is not None for k in limits) or any(
            getattr(c, k, None) is not None for c in configs for k in limits
        )
        source = inputs if inputs is not None else kwargs.get("input_ids")
        if not has_limit and source is not None:
            mask = kwargs.get("attention_mask")
            source_length = int(mask.sum(-1).max()) if mask is not None else source.shape[-1]
            kwargs["max_new_tokens"] = source_length + self.config.max_length_offset
        return super().generate(inputs, generation_config, **kwargs)

    # transformers copies the encoder output and the source mask for every beam (and every returned sequence).
    # They stay at one row per sentence instead: the cross-attention keys/values are then projected, cached and
    # read once per source, not once per beam (1/num_beams of the cross-attention cache and its memory traffic).
    def _expand_inputs_for_generation(
        self,
        expand_size: int = 1,
        is_encoder_decoder: bool = False,
        input_ids: torch.LongTensor | None = None,
        **model_kwargs: Any,
    ) -> tuple[torch.LongTensor | None, dict[str, Any]]:
        per_source = ("encoder_outputs", "attention_mask")
        shared = {key: model_kwargs.pop(key) for key in per_source if key in model_kwargs}
        if shared.get("attention_mask") is not None and shared.get("encoder_outputs") is not None:
            shared["attention_mask"] = self._cross_attention_mask(
                shared["attention_mask"], shared["encoder_outputs"]
            )
        input_ids, model_kwargs = super()._expand_inputs_for_generation(
            expand_size=expand_size, is_encoder_decoder=False, input_ids=input_ids, **model_kwargs
        )
        return input_ids, {**model_kwargs, **shared}

    def _cross_attention_mask(self, source_mask: torch.Tensor, encoder_outputs: Any) -> torch.Tensor | None:
        """The (sources, 1, 1, src_len) mask every decoding step's cross-attention broadcasts, made once.

        Made per step from the 2D source mask, transformers' mask helper checks whether anything is padded (a host
        sync: the GPU waits at every step). Once per generation it is one check; None when nothing is padded (sdpa).
        flex and flash attention keep the 2D mask: they build their own (a block mask holds one query length).
        """
        if source_mask.ndim != 2 or self.config._attn_implementation not in ("eager", "sdpa"):
            return source_mask
        encoder_states = encoder_outputs[0]  # (sources, src_len, d_model)
        return create_bidirectional_mask(
            config=self.config,
            inputs_embeds=encoder_states[:, :1],  # one query position: the mask broadcasts over the rest
            attention_mask=source_mask,
            encoder_hidden_states=encoder_states,
        )

    # Beam search keeps the beams that scored best; only the decoder's self-attention cache follows them. Every
    # beam of a sentence holds the same source, so its cross-attention keys/values (one row per sentence, see
    # above) need no reordering.
    # A pre-allocated (static) cache is reordered in place: CUDA graphs replay on fixed addresses, and transformers'
    # reorder gives every layer new tensors, after a length check that waits for the GPU.
    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        cache = (
            past_key_values.self_attention_cache
            if isinstance(past_key_values, EncoderDecoderCache)
            else past_key_values
        )
        if not cache.is_compileable:
            cache.reorder_cache(beam_idx)
            return past_key_values
        for layer in cache.layers:
            if layer.is_initialized:
                layer.keys.copy_(layer.keys.index_select(0, beam_idx))
                layer.values.copy_(layer.values.index_select(0, beam_idx))
        return past_key_values

    # Plain requests (the translations of `translate`, the pipeline and the commands) go to the sibling module's
    # beam search, which picks each step's continuations with less work over the vocabulary and otherwise follows
    # transformers' step for step; the rest to transformers'. transformers compiles the decoding step of greedy
    # search over a static cache (on GPUs with CUDA graphs), but its beam search calls the model uncompiled. Under
    # the same conditions (static cache, a GPU or compile_config, compiling not disabled) beam search's steps run
    # through a compiled forward too; a forward set on the model (say, compiled by hand) is used as it is. Both
    # searches' outputs are padded with the pad id after EOS, as greedy search's are (`pad_after_end`).
    def _beam_search(
        self,
        input_ids: torch.LongTensor,
        logits_processor: Any,
        stopping_criteria: Any,
        generation_config: Any,
        synced_gpus: bool = False,
        **model_kwargs: Any,
    ) -> Any:
        compiles = "forward" not in vars(self) and self._valid_auto_compile_criteria(
            model_kwargs, generation_config
        )
        if compiles:
            self.forward = self._compiled_forward(generation_config.compile_config)
        try:
            if is_plain_request(generation_config, logits_processor, synced_gpus):
                output = beam_search(self, input_ids, stopping_criteria, generation_config, **model_kwargs)
            else:
                search = (input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus)
                output = super()._beam_search(*search, **model_kwargs)
        finally:
            if compiles:
                del self.forward  # back to the class's forward
        if isinstance(output, torch.Tensor):
            return pad_after_end(output, input_ids.shape[1], generation_config)
        output.sequences = pad_after_end(output.sequences, input_ids.shape[1], generation_config)
        return output

    def _compiled_forward(self, compile_config: Any) -> Callable:
        """`forward` compiled with `compile_config` (transformers' default: CUDA graphs), kept for reuse.

        Not transformers' `get_compiled_call`: that compiles `__call__`, which calls `forward`, so set as the
        forward it would call itself.
        """
        compile_config = compile_config or self._default_compile_config()
        if getattr(self, "_forward_compile_config", None) != compile_config:
            self._forward_compile_config = compile_config
            self._forward_compiled = torch.compile(
                type(self).forward.__get__(self), **compile_config.to_dict()
            )
        return self._forward_compiled

    # transformers divides a finished beam's log-probability by |Y|^length_penalty. With length_penalty_type
    # "gnmt" we hand it, at each length, the exponent that makes that divisor ((5 + |Y|) / 6)^α instead.
    def _update_finished_beams(
        self, *, cur_len: int, decoder_prompt_len: int, length_penalty: float, **kwargs: Any
    ):
        if self.config.length_penalty_type == "gnmt":
            length_penalty = gnmt_as_power_of_length(length_penalty, cur_len + 1 - decoder_prompt_len)
        return super()._update_finished_beams(
            cur_len=cur_len, decoder_prompt_len=decoder_prompt_len, length_penalty=length_penalty, **kwargs
        )

    def _check_early_stop_heuristic(
        self,
        *,
        cur_len: int,
        decoder_prompt_len: int,
        length_penalty: float,
        early_stopping: Any,
        **kwargs: Any,
    ):
        if self.config.length_penalty_type == "gnmt":
            length = kwargs["max_length"] if early_stopping == "never" else cur_len
            length_penalty = gnmt_as_power_of_length(length_penalty, length - decoder_prompt_len)
        return super()._check_early_stop_heuristic(
            cur_len=cur_len,
            decoder_prompt_len=decoder_prompt_len,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
            **kwargs,
        )


__all__ = [
    "VaswaniTransformerForConditionalGeneration",
    "VaswaniTransformerModel",
    "VaswaniTransformerPreTrainedModel",
]
