"""Quantities as apimachinery's resource.Quantity parses, adds and prints them (the one copy of
the suffix rules, used by the pool status answers, capacities, CEL and the node agent)."""

from fractions import Fraction

import pytest

from operators.core.dra.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    Quantity,
    format_binary,
    non_negative_diff,
    parse_quantity,
    same_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("80Gi", 80 * 2**30),
        ("500m", Fraction(1, 2)),
        ("1e3", 1000),
        ("1.5k", 1500),
        ("0", 0),
        ("-2Ki", -2048),
        ("1E", 10**18),
        ("10n", Fraction(1, 10**8)),
    ],
)
def test_parse(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1X", "Gi", "1.2.3", "1 Gi"])
def test_parse_refuses_what_the_api_server_refuses(text):
    with pytest.raises(ValueError, match="quantities must match"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "fmt", "canonical"),
    [
        ("40Gi", BINARY_SI, "40Gi"),
        ("1024Mi", BINARY_SI, "1Gi"),
        ("1536", DECIMAL_SI, "1536"),
        ("1500m", DECIMAL_SI, "1500m"),
        ("1e3", DECIMAL_EXPONENT, "1e3"),
        ("100", DECIMAL_SI, "100"),
        ("0.5Gi", BINARY_SI, "512Mi"),
    ],
)
def test_formats_and_canonical_text(text, fmt, canonical):
    quantity = Quantity.parse(text)
    assert quantity.format == fmt
    assert str(quantity) == canonical


def test_add_sub_keep_the_first_nonzero_format():
    total = Quantity().add(Quantity.parse("40Gi")).add(Quantity.parse("40Gi"))
    assert str(total) == "80Gi"
    assert str(non_negative_diff(total, Quantity.parse("90Gi"))) == "0"
    assert str(Quantity.parse("1Gi").sub(Quantity.parse("1000Mi"))) == "24Mi"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (42949672960, "40Gi"),
        (512, "512"),
        (1536, "1536"),
        (0, "0"),
        (-2048, "-2Ki"),
        (2**70, "1024Ei"),
    ],
)
def test_format_binary(value, text):
    assert format_binary(value) == text


def test_same_quantity_compares_values_not_spellings():
    assert same_quantity("1Gi", "1024Mi") and same_quantity("1k", 1000)
    assert not same_quantity("1Gi", "1G")
    assert same_quantity(None, None) and not same_quantity("1", None)
    assert same_quantity("x", "x") and not same_quantity("x", "y")
