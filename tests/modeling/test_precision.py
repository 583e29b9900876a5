"""Which precision the package computes in: bfloat16 only where the device measures it faster than float32."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vaswani_transformer.decoding import precision as precision


class RecordProducts(TorchDispatchMode):
    """Records the dtypes of the matrix products that actually run."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.mm.default:
            self.dtypes.append(args[0].dtype)
        return func(*args, **(kwargs or {}))


def test_the_probe_times_both_precisions_without_touching_global_state() -> None:
    """The measurement multiplies float32 and bfloat16 matrices even inside a bf16 autocast region (which would
    otherwise turn the float32 products into bfloat16 ones) and leaves the global random state as it was."""
    rng_state = torch.get_rng_state()
    recorder = RecordProducts()
    with torch.autocast("cpu", dtype=torch.bfloat16), recorder:
        speedup = precision.cpu_bf16_speedup.__wrapped__(size=64, rounds=2)
    assert math.isfinite(speedup) and speedup > 0
    assert recorder.dtypes.count(torch.float32) == recorder.dtypes.count(torch.bfloat16) == 3  # 1 warm-up + 2
    assert torch.equal(torch.get_rng_state(), rng_state)


def test_a_cpu_without_bf16_instructions_keeps_float32_unmeasured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: None)
    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: pytest.fail("measured a CPU without bf16"))
    assert not precision.bf16_is_faster("cpu")
    assert precision.decoding_precision(torch.float32, "cpu") == torch.float32
    assert "no native bfloat16" in precision.bf16_reason("cpu")


@pytest.mark.parametrize(
    ("speedup", "expected", "reason"),
    [
        # an Intel Xeon whose AMX its hypervisor hides: AVX512-BF16 products at half float32's speed
        (0.5, torch.float32, "the CPU has AVX512-BF16 but computes bfloat16 at 0.5x float32's speed"),
        (1.2, torch.float32, "at 1.2x float32's speed in matrix products (measured), so float32 is faster"),
        # an AMD EPYC (Zen 4): 4x
        (4.0, torch.bfloat16, "the CPU computes bfloat16 natively (AVX512-BF16) at 4.0x float32's speed"),
    ],
)
def test_a_cpu_with_bf16_instructions_gets_bf16_only_where_it_measures_faster(
    monkeypatch: pytest.MonkeyPatch, speedup: float, expected: torch.dtype, reason: str
) -> None:
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: "AVX512-BF16")
    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: speedup)
    assert precision.bf16_is_faster("cpu") == (expected == torch.bfloat16)
    assert precision.decoding_precision(torch.float32, "cpu") == expected
    assert precision.decoding_precision(torch.float32, "cpu", torch.float32) == torch.float32  # --dtype wins
    assert reason in precision.bf16_reason("cpu")


def test_this_cpu_is_measured_and_described_consistently() -> None:
    """On whatever CPU runs the tests: the choice, the measured figure and the words agree."""
    if precision.cpu_bf16_instructions() is None:
        assert not precision.bf16_is_faster("cpu")
        return
    speedup = precision.cpu_bf16_speedup()
    assert precision.cpu_bf16_speedup() == speedup  # measured once per process
    assert precision.bf16_is_faster("cpu") == (speedup >= precision.BF16_MIN_SPEEDUP)
    assert f"{speedup:.1f}x float32's speed" in precision.bf16_reason("cpu")


def test_the_layer_probe_times_both_precisions_without_touching_global_state() -> None:
    """The decoding probe runs its linear layer in float32 and under bf16 autocast even inside an autocast region,
    casting the weight once per run, and leaves the global random state as it was."""
    rng_state = torch.get_rng_state()
    recorder = RecordProducts()
    with torch.autocast("cpu", dtype=torch.bfloat16), recorder:
        speedup = precision.cpu_bf16_layer_speedup.__wrapped__(48, rows=8, rounds=2, calls=3)
    assert math.isfinite(speedup) and speedup > 0
    assert (
        recorder.dtypes.count(torch.float32) == recorder.dtypes.count(torch.bfloat16) == 9
    )  # (1 + 2) runs × 3
    assert torch.equal(torch.get_rng_state(), rng_state)


@pytest.mark.parametrize(
    ("layer_speedup", "expected"),
    [
        (0.8, torch.float32),  # an Intel Xeon with AMX at `tiny`'s width 128: bf16 decodes 0.75x as fast
        (1.5, torch.bfloat16),  # the same CPU at `small`'s 256
    ],
)
def test_decoding_also_needs_the_models_own_layer_to_measure_faster(
    monkeypatch: pytest.MonkeyPatch, layer_speedup: float, expected: torch.dtype
) -> None:
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: "AMX")
    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: 3.5)
    asked: list[int] = []
    monkeypatch.setattr(
        precision, "cpu_bf16_layer_speedup", lambda width: asked.append(width) or layer_speedup
    )
    assert precision.bf16_is_faster("cpu")  # training's choice does not depend on it
    assert precision.decoding_precision(torch.float32, "cpu", width=128) == expected
    assert asked == [128]
    assert (
        precision.decoding_precision(torch.float32, "cpu") == torch.bfloat16
    )  # width unknown: the CPU's choice
    assert precision.decoding_precision(torch.float32, "cpu", torch.float32, width=128) == torch.float32


def test_a_cpu_whose_bf16_is_slower_never_measures_the_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: "AVX512-BF16")
    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: 0.5)
    monkeypatch.setattr(precision, "cpu_bf16_layer_speedup", lambda width: pytest.fail("measured the layer"))
    assert precision.decoding_precision(torch.float32, "cpu", width=128) == torch.float32


def test_this_cpu_decodes_in_the_precision_its_measurements_give() -> None:
    """On whatever CPU runs the tests: decoding's choice at a width agrees with the two measurements."""
    width = 64
    expected = precision.cpu_bf16_is_faster() and (
        precision.cpu_bf16_layer_speedup(width) >= precision.DECODING_MIN_SPEEDUP
    )
    assert precision.cpu_bf16_layer_speedup(width) == precision.cpu_bf16_layer_speedup(width)  # measured once
    assert precision.decoding_precision(torch.float32, "cpu", width=width) == (
        torch.bfloat16 if expected else torch.float32
    )
