"""§5.4 Label Smoothing: the translation model's training loss, ε_ls = `config.label_smoothing`.

Summed over target tokens and divided by their count (`per_token`). The package's training computes the same loss
fused with the tied softmax, never holding the (tokens × vocabulary) logits: it sets the model's
`fused_loss_function` (`vaswani_transformer.training.fused_loss`); a model without one trains through the logits.
"""

from collections.abc import Callable

import torch
from torch import nn


def per_token(
    loss: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
) -> torch.Tensor:
    """The summed loss divided by the token count: the Trainer's `num_items_in_batch` (all target tokens of the
    accumulated batch) when given, so that accumulating 2 batches of B equals one batch of 2B; otherwise this
    batch's non-ignored tokens.

    Args:
        loss: the summed loss, a scalar.
        labels: `(batch, tgt_len)` target ids, -100 where ignored.
        num_items_in_batch: the token count to divide by, or None for this batch's.

    Returns:
        The loss per token, a scalar.
    """
    if num_items_in_batch is None:
        num_items_in_batch = (labels != -100).sum().clamp(min=1)
    if isinstance(num_items_in_batch, torch.Tensor):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


def label_smoothed_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing: float,
    num_items_in_batch: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Label-smoothed cross-entropy per token (label_smoothing 0: the plain negative log-likelihood).

    Args:
        logits: `(batch, tgt_len, vocab_size)`, in any precision (computed in float32).
        labels: `(batch, tgt_len)` target ids, -100 where ignored.
        label_smoothing: ε_ls, 0 to 1.
        num_items_in_batch: the token count to divide by (`per_token`), or None for this batch's.

    Returns:
        The loss per token, a float32 scalar.
    """
    loss = nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]),
        labels.reshape(-1),
        ignore_index=-100,
        reduction="sum",
        label_smoothing=label_smoothing,
    )
    return per_token(loss, labels, num_items_in_batch)


class VaswaniTransformerLossMixin:
    """The translation model's loss: label-smoothed while training, fused where the model has a fused loss."""

    # (hidden_states, output_weight, labels, label_smoothing, num_items_in_batch) → `label_smoothed_loss` of
    # hidden_states @ output_weight.T without the logits; None: the logits path
    fused_loss_function: Callable[..., torch.Tensor] | None = None

    def label_smoothed_loss(
        self,
        logits: torch.Tensor,
        labels: torch.Tensor,
        num_items_in_batch: int | torch.Tensor | None = None,
        label_smoothing: float | None = None,
    ) -> torch.Tensor:
        """§5.4 label smoothing (ε_ls = config.label_smoothing unless given; 0: the plain negative
        log-likelihood) per target token (`per_token`).

        Args:
            logits: `(batch, tgt_len, vocab_size)`.
            labels: `(batch, tgt_len)` target ids, -100 where ignored.
            num_items_in_batch: the token count to divide by, or None for this batch's.
            label_smoothing: ε_ls instead of the config's, or None.

        Returns:
            The loss per token, a float32 scalar.
        """
        smoothing = self.config.label_smoothing if label_smoothing is None else label_smoothing
        return label_smoothed_loss(logits, labels, smoothing, num_items_in_batch)

    def fuses_loss(self) -> bool:
        """Whether a forward with labels takes the fused loss: one is set, `config.fused_loss`, training with
        gradients, a plain lm_head. Not while torch.compile traces (the compiler fuses the logits path itself),
        nor when lm_head was wrapped (e.g. by an adapter), whose own forward the fused loss would bypass.

        Returns:
            True where `forward` computes the loss with `fused_loss`.
        """
        return (
            self.fused_loss_function is not None
            and self.config.fused_loss
            and self.training
            and torch.is_grad_enabled()
            and type(self.lm_head) is nn.Linear
            and not torch.compiler.is_compiling()
        )

    def fused_loss(
        self, hidden_states: torch.Tensor, labels: torch.Tensor, num_items_in_batch: int | torch.Tensor | None
    ) -> torch.Tensor:
        """`label_smoothed_loss(self.lm_head(hidden_states), labels, …)`, never holding the logits.

        Args:
            hidden_states: `(batch, tgt_len, d_model)`, the decoder's output.
            labels: `(batch, tgt_len)` target ids, -100 where ignored.
            num_items_in_batch: the token count to divide by, or None for this batch's.

        Returns:
            The loss per token, a float32 scalar.
        """
        smoothing = self.config.label_smoothing
        return self.fused_loss_function(
            hidden_states, self.lm_head.weight, labels, smoothing, num_items_in_batch
        )
