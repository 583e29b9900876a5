"""Per-sentence scores (the native API's "scores") leave the tokenizer the decoding workers share as it was: before,
scoring switched the tokenizer's own padding on, and a worker encoding at that moment (or the event loop counting
tokens, which switches it off) got rows of unequal length and failed its whole batch."""

from pathlib import Path

import pytest
import torch

from tests.serving.server_process import sample_folder
from vaswani_transformer.engines import EngineOptions, load_engine
from vaswani_transformer.serving.scores import torch_scores

SOURCES = ["No.", "Tom is reading a book in the garden."]


def test_scoring_pads_in_python_and_leaves_the_shared_tokenizer_s_padding_off(tmp_path: Path) -> None:
    engine = load_engine(sample_folder(tmp_path / "model"), EngineOptions(device="cpu", dtype="float32"))
    translations = engine.translate(SOURCES, num_beams=1, max_new_tokens=8)
    assert engine.tokenizer.backend_tokenizer.padding is None
    scores = torch_scores(engine, SOURCES, translations)
    assert engine.tokenizer.backend_tokenizer.padding is None
    # each sentence scored alone (no padding at all) gives the same score as in the padded batch
    alone = [
        torch_scores(engine, [source], [translation])[0]
        for source, translation in zip(SOURCES, translations, strict=True)
    ]
    assert scores == pytest.approx(alone, abs=1e-5)
    assert all(score is not None and score <= 0 and torch.isfinite(torch.tensor(score)) for score in scores)
