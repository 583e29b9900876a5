"""The fast path (config.fast_path, fast_path_vaswani_transformer.py) against the plain reference path: the same
model, the same outputs, only faster."""

import pytest
import torch
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from tests.conftest import tiny_config
from vaswani_transformer import VaswaniTransformerForConditionalGeneration
from vaswani_transformer.modeling.fast_path_vaswani_transformer import FastDropout

SOURCE = torch.tensor([[5, 6, 7, 8, 9, 3], [10, 11, 12, 3, 0, 0]])
TARGET = torch.tensor([[2, 13, 14, 15, 3], [2, 16, 17, 3, 0]])


def model_pair(**config: object) -> tuple[nn.Module, nn.Module]:
    """The same weights twice: on the fast path and on the reference path."""
    torch.manual_seed(0)
    fast = VaswaniTransformerForConditionalGeneration(tiny_config(**config))
    reference = VaswaniTransformerForConditionalGeneration(tiny_config(**config, fast_path=False))
    reference.load_state_dict(fast.state_dict())
    return fast, reference


def logits(model: nn.Module, **kwargs: object) -> torch.Tensor:
    mask = (SOURCE != 0).long()
    return model(input_ids=SOURCE, attention_mask=mask, decoder_input_ids=TARGET, **kwargs).logits


def test_the_reference_path_is_plain_pytorch_dropout() -> None:
    fast, reference = model_pair(dropout=0.1, activation_dropout=0.1)
    fast_dropouts = [module for module in fast.modules() if isinstance(module, nn.Dropout)]
    reference_dropouts = [module for module in reference.modules() if isinstance(module, nn.Dropout)]
    assert fast_dropouts and all(type(module) is FastDropout for module in fast_dropouts)
    assert len(reference_dropouts) == len(fast_dropouts)
    assert all(type(module) is nn.Dropout for module in reference_dropouts)
    assert fast.state_dict().keys() == reference.state_dict().keys()  # the switch changes no weight


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_in_float32_both_paths_compute_the_same_numbers(implementation: str) -> None:
    fast, reference = model_pair(attn_implementation=implementation)
    with torch.no_grad():
        assert torch.equal(logits(fast.eval()), logits(reference.eval()))
    fast.train(), reference.train()  # dropout 0: training computes the same too
    mask = (SOURCE != 0).long()
    for model in (fast, reference):
        model(input_ids=SOURCE, attention_mask=mask, labels=TARGET).loss.backward()
    for (name, fast_parameter), reference_parameter in zip(
        fast.named_parameters(), reference.parameters(), strict=True
    ):
        assert torch.equal(fast_parameter.grad, reference_parameter.grad), name


def test_under_bf16_autocast_the_fast_path_keeps_a_bf16_stream_and_the_same_translation_quality() -> None:
    """The fast path's residual stream is bfloat16 (one cast at the embeddings), the reference's float32; the
    logits agree to bfloat16's precision."""
    fast, reference = model_pair()
    mask = (SOURCE != 0).long()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        fast_encoded = fast.get_encoder()(input_ids=SOURCE, attention_mask=mask).last_hidden_state
        reference_encoded = reference.get_encoder()(input_ids=SOURCE, attention_mask=mask).last_hidden_state
        fast_logits, reference_logits = logits(fast.eval()), logits(reference.eval())
    assert fast_encoded.dtype == torch.bfloat16 and reference_encoded.dtype == torch.float32
    with torch.no_grad():
        exact = logits(reference)
    fast_error = (fast_logits.float() - exact).abs().max()
    reference_error = (reference_logits.float() - exact).abs().max()
    assert fast_error < 0.1 and reference_error < 0.1  # both within bfloat16's rounding of float32's logits


def test_on_a_cpu_in_bf16_the_fast_path_takes_the_eager_attention_and_the_reference_sdpa(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
    monkeypatch.setitem(
        ALL_ATTENTION_FUNCTIONS, "sdpa", lambda *args, **kwargs: calls.append("sdpa") or sdpa(*args, **kwargs)
    )
    fast, reference = model_pair(attn_implementation="sdpa")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        logits(fast.eval())
        assert calls == []
        logits(reference.eval())
    assert calls  # the configured kernel, as transformers would run it
    in_bf16 = len(calls)
    with torch.no_grad():
        logits(fast)  # float32: the configured kernel on both paths
    assert len(calls) > in_bf16


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_both_dropouts_keep_a_share_1_minus_p_and_scale_by_its_inverse(p: float) -> None:
    states = torch.ones(200_000)
    for dropout in (FastDropout(p), nn.Dropout(p)):
        dropped = dropout.train()(states)
        kept = dropped != 0
        assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.005)
        assert torch.allclose(dropped[kept], torch.full_like(dropped[kept], 1 / (1 - p)))
        assert torch.equal(dropout.eval()(states), states)
