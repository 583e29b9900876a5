"""§5.4 label smoothing fused with the tied softmax, for the package's training: the loss and gradients of the
model's logits path (`label_smoothed_loss(lm_head(hidden_states), labels)`) without ever holding the
(tokens × vocabulary) logits. `use_fused_loss` gives a model it (its `fused_loss_function`, which the model's
forward takes while training where `config.fused_loss`); a saved folder carries the plain loss only.
"""

from typing import Any

import torch
from torch import nn

from ..modeling.fast_path_vaswani_transformer import compute_dtype
from ..modeling.loss_vaswani_transformer import per_token

# §5.4 Label Smoothing, fused with the tied softmax projection for training: logits are made and consumed one
# chunk of target tokens at a time, and their gradient is formed in the same pass, so the (tokens × vocab) fp32
# logits and their log-softmax, smoothing and gradient copies never exist at once (on a GPU the biggest tensors
# of a step; on a CPU fewer passes over them).
# Logits per chunk: large GEMMs on GPUs, cache-sized on CPUs (and other devices).
LOSS_CHUNK_ELEMENTS = {"cuda": 2**25, "cpu": 2**21}


def scratch(
    workspace: dict[str, torch.Tensor] | None,
    name: str,
    like: torch.Tensor,
    rows: int,
    *shape: int,
    dtype: torch.dtype,
) -> torch.Tensor:
    """An uninitialised (rows, *shape) buffer: the workspace's own when it has one at least that large, so a CPU
    reuses its pages from step to step (new ones cost a page fault every 4 KiB: glibc returns freed large blocks
    to the kernel); a new one without a workspace (a GPU's caching allocator reuses memory itself)."""
    buffer = None if workspace is None else workspace.get(name)
    if buffer is None or buffer.shape[0] < rows or buffer.shape[1:] != shape or buffer.dtype != dtype:
        buffer = like.new_empty((rows, *shape), dtype=dtype)
        if workspace is not None:
            workspace[name] = buffer
    return buffer[:rows]


class LinearLabelSmoothedCrossEntropy(torch.autograd.Function):
    """Σ over target tokens of the label-smoothed cross-entropy of softmax(hidden · weightᵀ); labels -100 skipped.

    The matrix products run in the precision autocast gives them (bf16 logits, float32 log-probabilities, bf16
    gradient products accumulated in float32), through (chunk, vocab) buffers written in place and, given a
    `workspace` dict, kept there for the next call (`scratch`: 7,200 → 500 page faults a `small` CPU step).
    """

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        labels: torch.Tensor,
        epsilon: float,
        workspace: dict[str, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        # hidden (tokens, d_model), weight (vocab, d_model), labels (tokens,)
        (tokens, d_model), vocab, dtype = hidden.shape, weight.shape[0], compute_dtype(hidden)
        chunk = max(1, LOSS_CHUNK_ELEMENTS.get(hidden.device.type, LOSS_CHUNK_ELEMENTS["cpu"]) // vocab)
        chunk = min(chunk, tokens)
        inputs, weights = hidden.to(dtype), weight.to(dtype)
        needs_grad_hidden, needs_grad_weight = ctx.needs_input_grad[:2]
        grad_inputs = torch.empty_like(inputs) if needs_grad_hidden else None
        grad_weight = None  # float32, from the first chunk's product on
        logits_buffer = scratch(workspace, "logits", hidden, chunk, vocab, dtype=dtype)
        log_probs_buffer = scratch(workspace, "log_probs", hidden, chunk, vocab, dtype=torch.float32)
        if needs_grad_weight:
            grad_weight_chunk = scratch(workspace, "grad_weight", hidden, vocab, d_model, dtype=dtype)
        total = hidden.new_zeros((), dtype=torch.float32)
        for start in range(0, tokens, chunk):
            rows = slice(start, start + chunk)
            states, kept = inputs[rows], (labels[rows] != -100).unsqueeze(1)  # (chunk, d_model), (chunk, 1)
            target = labels[rows].clamp(min=0).unsqueeze(1)  # (chunk, 1)
            logits = torch.mm(states, weights.t(), out=logits_buffer[: states.shape[0]])  # (chunk, vocab)
            # one fused kernel for log p: fewer passes over (chunk, vocab) than logsumexp and a subtraction
            log_probs = log_probs_buffer[: states.shape[0]]  # float32 (chunk, vocab)
            # On a CPU, log_softmax(dtype=float32) of bf16 logits first converts them into a new (chunk, vocab)
            # tensor (fresh pages every chunk): convert into the kept buffer and work in place. A GPU converts
            # inside the kernel, and float32 logits need no conversion.
            if logits.is_cpu and logits.dtype != torch.float32:
                torch.log_softmax(log_probs.copy_(logits), dim=-1, out=log_probs)
            else:
                torch.log_softmax(logits, dim=-1, dtype=torch.float32, out=log_probs)
            # −Σ_v q_v log p_v with q = (1 − ε)·one-hot + ε/V: −(1 − ε)·log p_y − ε·mean(log p)
            smoothed = -(1 - epsilon) * log_probs.gather(1, target) - epsilon * log_probs.mean(
                -1, keepdim=True
            )
            total += (smoothed * kept).sum()
            if not (needs_grad_hidden or needs_grad_weight):
                continue
            grad = log_probs.exp_().sub_(epsilon / vocab)  # ∂/∂z = softmax(z) − q
            grad.scatter_add_(1, target, grad.new_full(target.shape, epsilon - 1)).mul_(kept)
            grad = logits.copy_(grad) if dtype != torch.float32 else grad  # into the logits' buffer
            if needs_grad_hidden:
                torch.mm(grad, weights, out=grad_inputs[rows])
            if needs_grad_weight:
                product = torch.mm(grad.t(), states, out=grad_weight_chunk)  # (vocab, d_model)
                first = grad_weight is None  # a copy: the product's buffer is overwritten by the next chunk
                grad_weight = product.to(torch.float32, copy=True) if first else grad_weight.add_(product)
        grad_hidden = grad_inputs.to(hidden.dtype) if needs_grad_hidden else None
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
        return grad_hidden, grad_weight, None, None, None


def fused_label_smoothed_loss(
    hidden_states: torch.Tensor,
    output_weight: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float,
    num_items_in_batch: int | torch.Tensor | None = None,
    workspace: dict[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """`label_smoothed_loss(hidden_states @ output_weight.T, labels, …)` without materialising the logits; its
    buffers kept in `workspace` for the next call when one is given."""
    loss = LinearLabelSmoothedCrossEntropy.apply(
        hidden_states.flatten(0, -2), output_weight, labels.flatten(), label_smoothing, workspace
    )
    return per_token(loss, labels, num_items_in_batch)


def use_fused_loss(model: nn.Module) -> None:
    """Give `model` the fused loss for its training forwards, its CPU buffers kept with it from step to step."""
    workspace: dict[str, torch.Tensor] = {}

    def fused(
        hidden_states: torch.Tensor,
        output_weight: torch.Tensor,
        labels: torch.Tensor,
        label_smoothing: float,
        num_items_in_batch: int | torch.Tensor | None,
    ) -> torch.Tensor:
        buffers = workspace if hidden_states.is_cpu else None
        return fused_label_smoothed_loss(
            hidden_states, output_weight, labels, label_smoothing, num_items_in_batch, buffers
        )

    model.fused_loss_function = fused
