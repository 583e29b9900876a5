"""Per-sentence scores for the native API: the mean log-probability per token (end of sentence included) of each
translation given its source, under the model that produced it (teacher-forced; 0 is certain, lower is less
likely). PyTorch and ONNX Runtime score with the PyTorch model in float32; CTranslate2 with its `score_batch`."""

from collections.abc import Sequence

import torch
from transformers import BatchEncoding, PreTrainedTokenizerBase

from ..decoding.engine import Engine
from ..engines.torch_engine import TorchEngine


def padded(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> BatchEncoding:
    """`texts` encoded and padded by `pad`, in Python: not by the tokenizer's own padding, a setting every thread
    that encodes with it shares (a decoding worker encoding while another switched it gets rows of unequal
    length)."""
    return tokenizer.pad(tokenizer(list(texts)), return_tensors="pt")


def torch_scores(
    engine: TorchEngine, sources: Sequence[str], translations: Sequence[str]
) -> list[float | None]:
    """Mean token log-probabilities of `translations` given `sources` (None for a blank source)."""
    tokenizer, model = engine.tokenizer, engine.model
    inputs = padded(tokenizer, sources).to(model.device)
    labels = padded(tokenizer, translations)
    target = labels["input_ids"].masked_fill(labels["attention_mask"] == 0, -100).to(model.device)
    with torch.no_grad():
        logits = model(**inputs, labels=target).logits.float()
    chosen = logits.log_softmax(-1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    mask = target != -100
    means = (chosen * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return [None if not source.strip() else float(mean) for source, mean in zip(sources, means, strict=True)]


def ctranslate2_scores(
    engine: Engine, sources: Sequence[str], translations: Sequence[str]
) -> list[float | None]:
    """CTranslate2's own scores of `translations` given `sources` (`score_batch`: the mean log-probability of the
    target tokens, end of sentence included)."""
    tokenizer = engine.tokenizer

    def tokens(texts: Sequence[str]) -> list[list[str]]:
        return [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(list(texts))["input_ids"]]

    # CTranslate2 ends each target with the end of sentence itself
    targets = [
        pieces[:-1] if pieces[-1:] == [tokenizer.eos_token] else pieces for pieces in tokens(translations)
    ]
    results = engine.translator.translator.score_batch(tokens(sources), targets)
    return [
        None if not source.strip() else sum(result.log_probs) / max(1, len(result.log_probs))
        for source, result in zip(sources, results, strict=True)
    ]


def sentence_scores(
    engine: Engine, sources: Sequence[str], translations: Sequence[str]
) -> list[float | None]:
    """Each translation's score with the engine that translated it."""
    if engine.name == "ctranslate2":
        return ctranslate2_scores(engine, sources, translations)
    return torch_scores(engine, sources, translations)
