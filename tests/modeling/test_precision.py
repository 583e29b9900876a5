"""Which precision the package computes in: bfloat16 by a fixed rule on the device and the model's width, the
same on every run of a machine whatever its load."""

from pathlib import Path

import pytest
import torch

from vaswani_transformer import precision as precision

AMD = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
INTEL = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"


def on_cpu(monkeypatch: pytest.MonkeyPatch, instructions: str | None, vendor: str | None) -> None:
    monkeypatch.setattr(precision, "cpu_bf16_instructions", lambda: instructions)
    monkeypatch.setattr(precision, "cpu_vendor", lambda: vendor)


def test_the_vendor_is_read_from_cpuinfo(tmp_path: Path) -> None:
    for text, vendor in ((AMD, "AuthenticAMD"), (INTEL, "GenuineIntel"), ("processor\t: 0\n", None)):
        (tmp_path / "cpuinfo").write_text(text, encoding="utf-8")
        assert precision.cpu_vendor.__wrapped__(tmp_path / "cpuinfo") == vendor
    assert precision.cpu_vendor.__wrapped__(tmp_path / "missing") is None


@pytest.mark.parametrize(
    ("instructions", "vendor", "trains", "decodes_128", "decodes_512", "reason"),
    [
        # no native bfloat16: it would convert through float32
        (None, "AuthenticAMD", False, False, False, "no native bfloat16"),
        # AMD EPYC with AVX512-BF16: products 2.2-4.3x float32, `tiny` decodes 1.14x
        ("AVX512-BF16", "AuthenticAMD", True, True, True, "natively (AVX512-BF16, AMD)"),
        # an Intel Xeon whose AMX its hypervisor hides: AVX512-BF16 products at half float32's speed
        ("AVX512-BF16", "GenuineIntel", False, False, False, "AVX512-BF16 but not AMX (GenuineIntel)"),
        # an Intel Xeon with AMX: training 2.1x, but `tiny`'s 128-wide layers decode 0.77x
        ("AMX", "GenuineIntel", True, False, True, "natively (AMX)"),
    ],
)
def test_the_rule_gives_each_kind_of_cpu_the_precision_it_measured_fastest_in(
    monkeypatch: pytest.MonkeyPatch,
    instructions: str | None,
    vendor: str,
    trains: bool,
    decodes_128: bool,
    decodes_512: bool,
    reason: str,
) -> None:
    on_cpu(monkeypatch, instructions, vendor)
    assert precision.bf16_is_faster("cpu") == trains
    for width, decodes in ((128, decodes_128), (512, decodes_512)):
        expected = torch.bfloat16 if decodes else torch.float32
        assert precision.decoding_precision(torch.float32, "cpu", width=width) == expected
        assert precision.decoding_precision(torch.float32, "cpu", torch.float32, width=width) == torch.float32
    # bfloat16 weights compute in bfloat16 whatever the CPU; a width not known is the CPU's choice
    assert precision.decoding_precision(torch.bfloat16, "cpu", width=128) == torch.bfloat16
    assert precision.decoding_precision(torch.float32, "cpu") == (torch.bfloat16 if trains else torch.float32)
    assert reason in precision.bf16_reason("cpu")


def test_this_cpu_gets_the_rules_precision_and_the_words_for_it() -> None:
    """On whatever CPU runs the tests: the choice follows the instructions and the vendor, and the reason says so."""
    instructions, vendor = precision.cpu_bf16_instructions(), precision.cpu_vendor()
    faster = instructions == "AMX" or (instructions == "AVX512-BF16" and vendor == "AuthenticAMD")
    assert precision.bf16_is_faster("cpu") == faster
    assert ("natively" in precision.bf16_reason("cpu")) == faster


def test_autocast_to_computes_in_the_precision_over_the_weights() -> None:
    weights = torch.nn.Linear(8, 8)
    inputs = torch.randn(2, 8)
    with precision.autocast_to(torch.bfloat16, torch.float32, "cpu"):
        assert weights(inputs).dtype == torch.bfloat16
    with (
        torch.autocast("cpu", dtype=torch.bfloat16),
        precision.autocast_to(torch.float32, torch.float32, "cpu"),
    ):
        assert weights(inputs).dtype == torch.float32  # float32 switches an outer autocast off
