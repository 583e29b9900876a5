"""Which precision the package computes in: bfloat16 only where the device measures it faster than float32."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vaswani_transformer import precision


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
