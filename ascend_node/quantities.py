"""The kinds of value an option holds, each refusing what means nothing (pure, no imports).

A number of seconds is finite and above zero (or at least zero where zero means "none"):
`ASCEND_NODE_TIMEOUT=1e999` is an endless wait, `--wait-timeout -1` no wait at all, and
both are refused with the same words whether they come from a flag or the environment.
The command line (`cli.options`) and the settings (`settings`) both parse through here,
so a flag and its environment twin cannot accept different values.
"""

from __future__ import annotations

import math


def check_seconds(value: float, zero_ok: bool = False) -> float:
    """`value` itself, or ValueError saying what a number of seconds must be."""
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise ValueError(f"{value:g} is not {seconds_rule(zero_ok)}")
    return value


def parse_seconds(text: str, zero_ok: bool = False) -> float:
    """`'60'`, `'0.5'`, `'1e3'` -> seconds; ValueError naming the text otherwise."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"{text!r} is not {seconds_rule(zero_ok)}") from None
    return check_seconds(value, zero_ok)


def seconds_rule(zero_ok: bool = False) -> str:
    return "a finite number of seconds >= 0" if zero_ok else "a finite number of seconds > 0"


__all__ = ["check_seconds", "parse_seconds", "seconds_rule"]
