"""Kubernetes resource quantities ("80Gi", "500m", "1e3") as exact fractions, so two spellings
of one amount compare equal, as the API server's canonical form does; ``Quantity`` adds the format
apimachinery's resource.Quantity keeps and prints them in (the one copy of its suffix rules)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL = {suffix: Fraction(10) ** exponent for suffix, exponent in _DECIMAL_EXPONENTS.items()}
_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?\d+))?$")


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str | int) -> Fraction:
    """The exact value of a quantity; ValueError for anything the API server would reject.
    Cached: a cluster spells few distinct quantities, and explain and the allocator parse the
    same capacities of every device again for every request (a tenth of explain's time at
    40,000 devices)."""
    match = _PATTERN.match(str(text).strip())
    if not match:
        raise ValueError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
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
    """Bytes as apimachinery prints a BinarySI quantity: the largest binary suffix that divides
    them exactly (42949672960 -> "40Gi"), small numbers and fractions in decimal."""
    return str(Quantity(Fraction(value), BINARY_SI))


BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT = "BinarySI", "DecimalSI", "DecimalExponent"
# The tables above by exponent: 10 -> "Ki", ...; -3 -> "m", ...
_BIN_SUFFIXES = {0: "", **{factor.bit_length() - 1: suffix for suffix, factor in _BINARY.items()}}
_EXPONENT = re.compile(r"[eE][+-]?\d+$")
_DEC_SUFFIXES = {exponent: suffix for suffix, exponent in _DECIMAL_EXPONENTS.items()}


@dataclass(frozen=True)
class Quantity:
    """A value and the format it prints in ("" for Go's zero ``Quantity{}``)."""

    value: Fraction = Fraction(0)
    format: str = ""

    @classmethod
    def parse(cls, text: Any) -> Quantity:
        text = str(text).strip()
        if text[-2:] in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
            fmt = BINARY_SI
        elif _EXPONENT.search(text):  # "1e3"; a bare "E" is the exa suffix
            fmt = DECIMAL_EXPONENT
        else:
            fmt = DECIMAL_SI
        return cls(parse_quantity(text), fmt)

    def add(self, other: Quantity) -> Quantity:
        """``Quantity.Add``: a zero quantity takes the format of what is added to it."""
        return Quantity(self.value + other.value, other.format if self.value == 0 else self.format)

    def sub(self, other: Quantity) -> Quantity:
        """``Quantity.Sub``: likewise."""
        return Quantity(self.value - other.value, other.format if self.value == 0 else self.format)

    def __str__(self) -> str:
        """``CanonicalizeBytes``: what the API server and kubectl print."""
        value = self.value
        if value == 0:
            return "0"
        fmt = self.format if self.format in (BINARY_SI, DECIMAL_SI, DECIMAL_EXPONENT) else DECIMAL_EXPONENT
        if fmt == BINARY_SI:
            if -1024 < value < 1024 or value.denominator != 1:
                fmt = DECIMAL_SI  # small numbers and fractions are not shown in binary
            else:
                number, exponent = int(value), 0
                while number % 1024 == 0 and exponent < 60:
                    number //= 1024
                    exponent += 10
                return f"{number}{_BIN_SUFFIXES[exponent]}"
        # Base 10: an integer mantissa, all factors of ten in the exponent, then the exponent
        # lowered to a multiple of three (int64Amount.AsCanonicalBytes).
        exponent = 0
        while value.denominator != 1:
            value *= 10
            exponent -= 1
        mantissa = int(value)
        while mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        if exponent % 3 == 1:
            mantissa, exponent = mantissa * 10, exponent - 1
        elif exponent % 3 == 2:
            mantissa, exponent = mantissa * 100, exponent - 2
        if fmt == DECIMAL_EXPONENT:
            return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
        return f"{mantissa}{_DEC_SUFFIXES.get(exponent, '')}"


def non_negative_diff(a: Quantity, b: Quantity) -> Quantity:
    """views.go ``nonNegativeDiff``: max(0, a-b) in a's format."""
    out = a.sub(b)
    return Quantity(Fraction(0), a.format) if out.value < 0 else out
