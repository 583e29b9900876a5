"""The model against an independent plain-torch forward written from the paper, with the model's own weights.

The reference reads parameters by name and must use every one of them, so an added bias, a missing scale or a
moved LayerNorm anywhere fails here: §3.1 post-norm LayerNorm(x + Sublayer(x)), §3.2.1 softmax(QKᵀ/√d_k)·V with
bias-free projections, §3.3 ReLU feed-forward, §3.4 embeddings × √d_model tied to the pre-softmax projection,
§3.5 interleaved sinusoids, §5.4 dropout on each sub-layer output and on the embedding sums.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerConfig, VaswaniTransformerForConditionalGeneration


class Weights:
    """A state dict that records which entries the reference used."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.tensors = dict(model.named_parameters(remove_duplicate=False))
        self.used: set[str] = set()

    def __getitem__(self, name: str) -> torch.Tensor:
        self.used.add(name)
        return self.tensors[name]


def positional_encoding(length: int, d_model: int) -> torch.Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d))."""
    table = torch.zeros(length, d_model)
    for pos in range(length):
        for i in range(0, d_model, 2):
            table[pos, i] = math.sin(pos / 10000 ** (i / d_model))
            table[pos, i + 1] = math.cos(pos / 10000 ** (i / d_model))
    return table


def multi_head_attention(
    w: Weights, prefix: str, queries: torch.Tensor, memory: torch.Tensor, allowed: torch.Tensor, heads: int
) -> torch.Tensor:
    """§3.2.2 MultiHead(Q, K, V) = Concat(head_1..h) W^O, head_i = softmax(Q W_i^Q (K W_i^K)ᵀ / √d_k) V W_i^V."""
    batch, d_model = queries.shape[0], queries.shape[-1]
    d_k = d_model // heads

    def split(x: torch.Tensor) -> torch.Tensor:  # (batch, heads, length, d_k)
        return x.view(batch, -1, heads, d_k).transpose(1, 2)

    q = split(queries @ w[f"{prefix}.q_proj.weight"].T)
    k = split(memory @ w[f"{prefix}.k_proj.weight"].T)
    v = split(memory @ w[f"{prefix}.v_proj.weight"].T)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_k)  # (batch, heads, tgt_len, src_len)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    heads_out = torch.softmax(scores, dim=-1) @ v
    return heads_out.transpose(1, 2).reshape(batch, -1, d_model) @ w[f"{prefix}.out_proj.weight"].T


def feed_forward(w: Weights, prefix: str, x: torch.Tensor) -> torch.Tensor:
    """§3.3 FFN(x) = max(0, x W1 + b1) W2 + b2."""
    hidden = torch.relu(x @ w[f"{prefix}.fc1.weight"].T + w[f"{prefix}.fc1.bias"])
    return hidden @ w[f"{prefix}.fc2.weight"].T + w[f"{prefix}.fc2.bias"]


def add_and_norm(
    w: Weights, name: str, x: torch.Tensor, sublayer: torch.Tensor, p: float, eps: float
) -> torch.Tensor:
    """§3.1 LayerNorm(x + Sublayer(x)), with §5.4 dropout on the sub-layer output (p = 1 drops it all)."""
    sublayer = torch.zeros_like(sublayer) if p == 1.0 else sublayer
    return F.layer_norm(x + sublayer, x.shape[-1:], w[f"{name}.weight"], w[f"{name}.bias"], eps=eps)


def embed(w: Weights, ids: torch.Tensor, d_model: int, p: float) -> torch.Tensor:
    """§3.4 shared embedding × √d_model, + §3.5 positions, then §5.4 dropout on the sums."""
    table = w["model.encoder.embed_tokens.weight"]
    sums = table[ids] * math.sqrt(d_model) + positional_encoding(ids.shape[1], d_model)
    return torch.zeros_like(sums) if p == 1.0 else sums


def reference_forward(
    w: Weights,
    config: VaswaniTransformerConfig,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    decoder_input_ids: torch.Tensor,
    p: float = 0.0,
) -> tuple[list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
    """Encoder and decoder hidden states (embeddings, then each layer's output) and the logits."""
    d, h, eps = config.d_model, config.num_heads, config.layer_norm_eps
    source_keys = attention_mask.bool()[:, None, :]  # (batch, 1, src_len): padding is never attended to
    encoder_states = [embed(w, input_ids, d, p)]
    for i in range(config.num_encoder_layers):
        x, name = encoder_states[-1], f"model.encoder.layers.{i}"
        attended = multi_head_attention(w, f"{name}.self_attn", x, x, source_keys, h)
        x = add_and_norm(w, f"{name}.self_attn_layer_norm", x, attended, p, eps)
        x = add_and_norm(w, f"{name}.final_layer_norm", x, feed_forward(w, f"{name}.feed_forward", x), p, eps)
        encoder_states.append(x)
    memory, length = encoder_states[-1], decoder_input_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool).tril()[None]  # (1, tgt_len, tgt_len)
    decoder_states = [embed(w, decoder_input_ids, d, p)]
    for i in range(config.num_decoder_layers):
        x, name = decoder_states[-1], f"model.decoder.layers.{i}"
        attended = multi_head_attention(w, f"{name}.self_attn", x, x, causal, h)
        x = add_and_norm(w, f"{name}.self_attn_layer_norm", x, attended, p, eps)
        attended = multi_head_attention(w, f"{name}.encoder_attn", x, memory, source_keys, h)
        x = add_and_norm(w, f"{name}.encoder_attn_layer_norm", x, attended, p, eps)
        x = add_and_norm(w, f"{name}.final_layer_norm", x, feed_forward(w, f"{name}.feed_forward", x), p, eps)
        decoder_states.append(x)
    logits = decoder_states[-1] @ w["lm_head.weight"].T  # §3.4 the embedding matrix is the softmax's weight
    return encoder_states, decoder_states, logits


def inputs(config: VaswaniTransformerConfig) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, config.vocab_size, (3, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:], attention_mask[2, 3:] = 0, 0  # right padding
    input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id)
    decoder_input_ids = torch.randint(3, config.vocab_size, (3, 7), generator=generator)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids}


def model_states(model: VaswaniTransformerForConditionalGeneration, batch: dict) -> tuple:
    output = model(**batch, output_hidden_states=True)
    return output.encoder_hidden_states, output.decoder_hidden_states, output.logits


def assert_states_equal(ours: tuple, reference: tuple, mask: torch.Tensor) -> None:
    """Layer by layer (real source positions only: padded positions' outputs are never read)."""
    for side, (ours_side, reference_side) in enumerate(zip(ours[:2], reference[:2], strict=True)):
        assert len(ours_side) == len(reference_side)
        for layer, (a, b) in enumerate(zip(ours_side, reference_side, strict=True)):
            keep = mask.bool() if side == 0 else torch.ones(a.shape[:2], dtype=torch.bool)
            torch.testing.assert_close(
                a[keep], b[keep], rtol=1e-4, atol=1e-5, msg=f"side {side}, layer {layer}"
            )
    torch.testing.assert_close(ours[2], reference[2], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_model_equals_the_papers_equations_layer_by_layer(implementation: str) -> None:
    config = tiny_config(dropout=0.0, num_encoder_layers=2, num_decoder_layers=2)
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(config).eval()
    model.config._attn_implementation = implementation
    for parameter in model.parameters():  # LayerNorms and biases away from their initial 1 / 0
        parameter.data += 0.1 * torch.randn_like(parameter)
    batch = inputs(config)
    weights = Weights(model)
    with torch.no_grad():
        reference = reference_forward(weights, config, **batch)
        assert_states_equal(model_states(model, batch), reference, batch["attention_mask"])
    # every parameter is one the paper's equations use (the three tied tables are one)
    assert weights.used | {"model.decoder.embed_tokens.weight"} == set(weights.tensors)


def test_dropout_acts_on_sublayer_outputs_and_embedding_sums_in_training_only() -> None:
    """With P_drop = 1 every sub-layer output and embedding sum is dropped, so each layer's output is its
    LayerNorm of the residual alone; a model without any of those dropouts (or with others) differs."""
    config = tiny_config(dropout=0.0, num_encoder_layers=2, num_decoder_layers=2)
    config.dropout = 1.0  # out of the valid range on purpose: it makes the places where dropout acts visible
    torch.manual_seed(0)
    model = VaswaniTransformerForConditionalGeneration(config)
    for parameter in model.parameters():
        parameter.data += 0.1 * torch.randn_like(parameter)
    batch = inputs(config)
    weights = Weights(model)
    with torch.no_grad():
        assert_states_equal(
            model_states(model.train(), batch),
            reference_forward(weights, config, **batch, p=1.0),
            batch["attention_mask"],
        )
        assert_states_equal(
            model_states(model.eval(), batch),
            reference_forward(weights, config, **batch),
            batch["attention_mask"],
        )
