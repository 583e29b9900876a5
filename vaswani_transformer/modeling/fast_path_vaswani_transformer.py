"""The model's speed machinery, behind `config.fast_path`; False gives the plain reference path the tests compare.

None of it changes what the model computes, only how fast (docs/decisions/fast-path.md):

- Dropout (§5.4) on a CPU. PyTorch's CPU dropout draws a random number per entry on one core; the fast draw
  takes 16 random bits per entry (p rounded to 2^-17), four entries per 64-bit draw: 7× fewer random draws.
- The residual stream under bfloat16 autocast. Autocast casts each linear layer's input to bfloat16 on its own
  (W^Q, W^K and W^V cast the same states three times) and keeps the stream in float32; the fast path casts the
  embedded input once, so the whole stream is bfloat16 (as Megatron does), with layer norms and the softmax
  still computing in float32 inside. float16 (narrow range) keeps a float32 stream.
- The attention kernel. PyTorch's sdpa in bfloat16 on a CPU is slower than the eager path's two matrix
  products, so the fast path takes the eager path there.

Shipped beside the model file as remote code: it imports only torch.
"""

from collections.abc import Callable

import torch
from torch import nn


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype matrix products of `tensor` run in: autocast's where it is on, else the tensor's own."""
    device = tensor.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else tensor.dtype


def cpu_dropout(states: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """`nn.functional.dropout` (zero each entry with probability p, scale the rest by 1 / (1 − p)), drawing 16
    random bits per entry on a CPU: four entries per 64-bit draw."""
    if not training or not 0.0 < p < 1.0 or states.device.type != "cpu":
        return nn.functional.dropout(states, p=p, training=training)
    entries = states.numel()
    words = torch.randint(-(2**63), 2**63 - 1, ((entries + 3) // 4,), dtype=torch.int64)
    keep = words.view(torch.int16)[:entries].view(states.shape) >= round(p * 2**16) - 2**15
    # the mask in the states' dtype: a product with a boolean converts it again forward and backward
    return (states * keep.to(states.dtype)).mul_(1.0 / (1.0 - p))


class FastDropout(nn.Dropout):
    """`nn.Dropout` with the CPU's 16-bit draw (`cpu_dropout`); the same on other devices."""

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return cpu_dropout(states, self.p, self.training)


def dropout_module(p: float, fast_path: bool) -> nn.Dropout:
    """The dropout of one place in the model: `FastDropout` on the fast path, else plain `nn.Dropout`."""
    return FastDropout(p) if fast_path else nn.Dropout(p)


def dropout_function(fast_path: bool) -> Callable[..., torch.Tensor]:
    """Dropout as a function (for the attention weights, which the attention interface drops itself)."""
    return cpu_dropout if fast_path else nn.functional.dropout


def residual_stream(states: torch.Tensor, fast_path: bool) -> torch.Tensor:
    """The embedded input as the residual stream carries it: bfloat16 under bfloat16 autocast on the fast path
    (cast once, not by every linear layer), else as it is."""
    if fast_path and states.dtype == torch.float32 and compute_dtype(states) == torch.bfloat16:
        return states.to(torch.bfloat16)
    return states


def prefers_eager_attention(query: torch.Tensor, implementation: str, fast_path: bool) -> bool:
    """Whether the fast path replaces the configured sdpa by the eager path: bfloat16 queries on a CPU, where
    sdpa's kernel is slower than two matrix products."""
    return (
        fast_path
        and implementation == "sdpa"
        and query.device.type == "cpu"
        and query.dtype == torch.bfloat16
    )
