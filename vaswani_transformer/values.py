"""What a number given on a command line or in a recipe must be: finite, and within what the code computes with.

`float("nan")`, `float("inf")` and `float("1e999")` all parse, and each passes a check such as `value > 0` or
flows into a computation that then fails far from the flag (or quietly changes the output); these checks name the
flag and the fix instead.
"""

import argparse
import math

# §6.1's α is 0.6 and GNMT tuned it within [0, 1]; a larger magnitude makes transformers raise |Y| to a power
# that overflows a float (1e308 did), long before it means anything.
LENGTH_PENALTY_LIMIT = 10.0


def check_finite(flag: str, value: float) -> float:
    """`value` if it is a finite number, else a ValueError naming `flag`."""
    if not math.isfinite(value):
        raise ValueError(f"{flag} {value}: give a finite number (not nan or inf).")
    return value


def finite_float(text: str) -> float:
    """An argparse `type` for a float flag: nan, inf and numbers too large for a float are refused (argparse
    names the flag)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number (not nan or inf)")
    return value


def check_length_penalty(flag: str, value: float | None) -> None:
    """A length penalty α is finite and at most LENGTH_PENALTY_LIMIT in magnitude (None: the model's)."""
    if value is None:
        return
    check_finite(flag, value)
    if abs(value) > LENGTH_PENALTY_LIMIT:
        raise ValueError(
            f"{flag} {value}: give α between -{LENGTH_PENALTY_LIMIT:g} and {LENGTH_PENALTY_LIMIT:g} (the paper: 0.6)."
        )
