"""Batched translation with the paper's decoding settings (transformers v5 has no `translation` pipeline)."""

from collections.abc import Sequence
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase


def length_sorted_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices grouped into batches of similar length (longest first), so little padding is decoded."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}.")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


@torch.inference_mode()
def translate(
    texts: Sequence[str],
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    *,
    batch_size: int = 64,
    show_progress: bool = False,
    **generate_kwargs: Any,
) -> list[str]:
    """Translate `texts` and return the translations in input order.

    Decoding uses the model's generation config (for this package: beam 4, GNMT length penalty α = 0.6,
    output limit = source length + 50, §6.1) unless `generate_kwargs` override it.
    """
    if not texts:
        return []
    encodings = tokenizer(list(texts), add_special_tokens=True)["input_ids"]
    batches = length_sorted_batches([len(ids) for ids in encodings], batch_size)
    results: list[str] = [""] * len(texts)
    was_training = model.training
    model.eval()
    for batch in tqdm(batches, desc="translating", unit="batch", disable=not show_progress):
        inputs = tokenizer.pad({"input_ids": [encodings[i] for i in batch]}, return_tensors="pt").to(
            model.device
        )
        outputs = model.generate(**inputs, **generate_kwargs)
        for index, text in zip(batch, tokenizer.batch_decode(outputs, skip_special_tokens=True), strict=True):
            results[index] = text.strip()
    model.train(was_training)
    return results
