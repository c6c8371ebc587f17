"""Kubernetes resource quantities ("80Gi", "500m", "1e3") as exact fractions, so two spellings
of one amount compare equal, as the API server's canonical form does."""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$")


def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity; ValueError for anything the API server would reject."""
    match = _PATTERN.match(str(text).strip())
    if not match:
        raise ValueError(f"quantities must match the regular expression "
                         f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}")
    number, suffix, exponent = match.groups()
    value = Fraction(number)
    if exponent is not None:
        return value * Fraction(10) ** int(exponent)
    suffix = suffix or ""
    return value * (_BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix])


def same_quantity(a: str | int | None, b: str | int | None) -> bool:
    if a is None or b is None:
        return a is b
    try:
        return parse_quantity(a) == parse_quantity(b)
    except ValueError:
        return str(a) == str(b)


def format_binary(value: Fraction | int) -> str:
    """Bytes in the largest binary suffix that divides them exactly (42949672960 -> "40Gi")."""
    value = Fraction(value)
    if value.denominator != 1:
        return str(float(value))
    number = int(value)
    for suffix, factor in sorted(_BINARY.items(), key=lambda kv: -kv[1]):
        if number and number % factor == 0:
            return f"{number // factor}{suffix}"
    return str(number)
