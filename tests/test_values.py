"""Numbers from command lines and recipes are checked for what they are: finite, and within what the code computes
with."""

import argparse

import pytest

from vaswani_transformer.values import LENGTH_PENALTY_LIMIT, check_length_penalty, finite_float


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_finite_float_refuses_what_is_not_a_finite_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="give a finite number"):
        finite_float(text)


def test_finite_float_reads_numbers_and_names_what_is_not_one() -> None:
    assert finite_float("0.6") == 0.6 and finite_float("-1e-3") == -0.001 and finite_float("1e308") == 1e308
    with pytest.raises(argparse.ArgumentTypeError, match="'high' is not a number"):
        finite_float("high")


def test_an_argparse_flag_of_finite_floats_names_itself_and_exits_2(capsys) -> None:
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--alpha", type=finite_float)
    with pytest.raises(SystemExit) as stopped:
        parser.parse_args(["--alpha", "inf"])
    assert (
        stopped.value.code == 2 and "argument --alpha: 'inf': give a finite number" in capsys.readouterr().err
    )


def test_the_length_penalty_is_bounded_where_transformers_would_overflow() -> None:
    for value in (None, 0.0, 0.6, -LENGTH_PENALTY_LIMIT, LENGTH_PENALTY_LIMIT):
        check_length_penalty("--length_penalty", value)
    for value in (1e308, -11.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"--length_penalty"):
            check_length_penalty("--length_penalty", value)
    # what the bound prevents: transformers divides by |Y| ** α, a float power
    with pytest.raises(OverflowError):
        _ = 50.0**1e308
    assert float("inf") > 1074.0**LENGTH_PENALTY_LIMIT
