"""CEL for DRA device selectors, on cel-expr-python (Google's cel-cpp).

Follows k8s.io/dynamic-resource-allocation/cel/compile.go: one variable ``device`` with
``driver``, ``attributes[domain][id]`` and ``capacity[domain][id]``; attribute and capacity names
without a domain belong to the driver's domain; versions are semver values and capacities are
quantities; an unknown domain is an empty map while an unknown key is an error.

cel-expr-python cannot carry Python objects as CEL values, so quantities and versions travel as
tagged maps (``{"__k8s_quantity__": "<exact fraction>"}``, ``{"__k8s_semver__": "1.2.3"}``) that
the Kubernetes library functions (quantity, semver, compareTo, ...) unwrap.
Not covered: Kubernetes' cost estimate and cost limit (no Python engine has one); list-type
attributes (alpha, DRAListTypeAttributes): they are left out of ``device``, so a selector that
does not name one decides as upstream's does, and one that names one fails as for a missing key
(``kubectl dra explain`` names such a selector as not modelled).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Any, cast

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_strings

from .quantity import parse_quantity

MAX_EXPRESSION_LENGTH = 10 * 1024  # CELSelectorExpressionMaxLength

_Q, _SV = "__k8s_quantity__", "__k8s_semver__"
LIST_KINDS = ("ints", "bools", "strings", "versions")  # DeviceAttribute's list-type values


class SelectorError(Exception):
    """An expression that does not compile, fails at runtime, or is not a bool."""


# -- Kubernetes quantities (exact fractions, operators.core.dra.quantity) ------------------------


# Parsing quantities and fractions was most of an evaluation's time (the same few texts over
# and over: every device's capacities, every ``quantity("16Gi")`` literal): parsed once each.
@functools.lru_cache(maxsize=4096)
def _quantity_text(text: str) -> str:
    return str(parse_quantity(text))


@functools.lru_cache(maxsize=4096)
def _fraction(text: str) -> Fraction:
    return Fraction(text)


def quantity_value(text: str) -> dict[str, str]:
    return {_Q: _quantity_text(text)}


# -- semantic versions -------------------------------------------------------------------------

_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


# major, minor, patch, then the pre-release's precedence: ((1,),) for a release, else (0,) and one
# (numeric?, number, text) per identifier.
SemverKey = tuple[int, int, int, tuple[tuple[int | str, ...], ...]]


@functools.lru_cache(maxsize=1024)
def parse_semver(text: str) -> SemverKey:
    match = _SEMVER.match(text)
    if not match:
        raise ValueError(f"could not parse {text!r} as semver")
    major, minor, patch, pre, _ = match.groups()
    # Precedence (semver 2.0): a pre-release sorts before the release; numeric identifiers
    # sort numerically and before alphanumeric ones.
    pre_key = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")) if pre else None
    return int(major), int(minor), int(patch), ((1,),) if pre_key is None else ((0,), *pre_key)


def _unwrap(value: Any) -> tuple[str, Any]:
    if isinstance(value, dict) and _Q in value:
        return "quantity", _fraction(value[_Q])
    if isinstance(value, dict) and _SV in value:
        return "semver", parse_semver(value[_SV])
    raise TypeError(f"not a quantity or semver: {value!r}")


def _compare(a: Any, b: Any) -> int:
    kind_a, x = _unwrap(a)
    kind_b, y = _unwrap(b)
    if kind_a != kind_b:
        raise TypeError(f"cannot compare {kind_a} with {kind_b}")
    return int(x > y) - int(x < y)


def _quantity(a: Any) -> Fraction:
    kind, value = _unwrap(a)
    if kind != "quantity":
        raise TypeError("not a quantity")
    return cast(Fraction, value)


def _semver_part(a: Any, index: int) -> int:
    kind, value = _unwrap(a)
    if kind != "semver":
        raise TypeError("not a semver")
    return int(value[index])


def _valid(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


def _as_integer(a: Any) -> int:
    value = _quantity(a)
    if value.denominator != 1 or not -(2**63) <= value < 2**63:
        raise ValueError("cannot convert value to integer")
    return int(value)


# -- the environment -----------------------------------------------------------------------------

# The overloads' types: CEL's string, int, bool, double and the tagged maps.
STR, INT, BOOL, DOUBLE = cel.Type.STRING, cel.Type.INT, cel.Type.BOOL, cel.Type.DOUBLE
MAP = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)


def _fn(name: str, *overloads: tuple[str, list[Any], Any, bool, Any]) -> cel.FunctionDecl:
    return cel.FunctionDecl(
        name, [cel.Overload(oid, ret, params, member, impl) for oid, params, ret, member, impl in overloads]
    )


def _functions() -> list[cel.FunctionDecl]:
    return [
        _fn("quantity", ("quantity_string", [STR], MAP, False, quantity_value)),
        _fn("isQuantity", ("isQuantity_string", [STR], BOOL, False, lambda s: _valid(parse_quantity, s))),
        _fn("semver", ("semver_string", [STR], MAP, False, lambda s: (parse_semver(s), {_SV: s})[1])),
        _fn("isSemver", ("isSemver_string", [STR], BOOL, False, lambda s: _valid(parse_semver, s))),
        _fn("compareTo", ("compareTo_map", [MAP, MAP], INT, True, _compare)),
        _fn("isGreaterThan", ("isGreaterThan_map", [MAP, MAP], BOOL, True, lambda a, b: _compare(a, b) > 0)),
        _fn("isLessThan", ("isLessThan_map", [MAP, MAP], BOOL, True, lambda a, b: _compare(a, b) < 0)),
        _fn("asInteger", ("asInteger_map", [MAP], INT, True, _as_integer)),
        _fn("asApproximateFloat", ("asApproximateFloat_map", [MAP], DOUBLE, True, lambda a: float(_quantity(a)))),
        _fn("isInteger", ("isInteger_map", [MAP], BOOL, True, lambda a: _quantity(a).denominator == 1)),
        _fn("sign", ("sign_map", [MAP], INT, True, lambda a: (_quantity(a) > 0) - (_quantity(a) < 0))),
        _fn(
            "add",
            ("add_map", [MAP, MAP], MAP, True, lambda a, b: {_Q: str(_quantity(a) + _quantity(b))}),
            ("add_int", [MAP, INT], MAP, True, lambda a, b: {_Q: str(_quantity(a) + b)}),
        ),
        _fn(
            "sub",
            ("sub_map", [MAP, MAP], MAP, True, lambda a, b: {_Q: str(_quantity(a) - _quantity(b))}),
            ("sub_int", [MAP, INT], MAP, True, lambda a, b: {_Q: str(_quantity(a) - b)}),
        ),
        _fn("major", ("major_map", [MAP], INT, True, lambda a: _semver_part(a, 0))),
        _fn("minor", ("minor_map", [MAP], INT, True, lambda a: _semver_part(a, 1))),
        _fn("patch", ("patch_map", [MAP], INT, True, lambda a: _semver_part(a, 2))),
    ]


@functools.lru_cache(maxsize=1)
def _env() -> cel.Env:
    return cel.NewEnv(
        variables={"device": MAP},
        extensions=[ext_strings.ExtStrings(), ext_bindings.ExtBindings()],
        functions=_functions(),
    )


_DOMAIN_LITERAL = re.compile(r"""device\s*\.\s*(attributes|capacity)\s*\[\s*(?:"([^"]*)"|'([^']*)')\s*\]""")


@functools.lru_cache(maxsize=256)
def compile_selector(expression: str) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """The compiled program and the (map, domain) literals it looks up."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise SelectorError(f"expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        program = _env().compile(expression)
    except RuntimeError as e:
        raise SelectorError(f"compilation failed: {e}") from None
    domains = tuple(
        (m.group(1), m.group(2) if m.group(2) is not None else m.group(3)) for m in _DOMAIN_LITERAL.finditer(expression)
    )
    return program, domains


def _attribute(value: dict[str, Any]) -> Any:
    for kind in ("int", "bool", "string"):
        if kind in value:
            return value[kind]
    if "version" in value:
        return {_SV: value["version"]}
    raise SelectorError(f"unsupported attribute value {value!r}")


def _qualified(driver: str, name: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def device_variable(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    """The ``device`` CEL variable for one ResourceSlice device (resource.k8s.io/v1 layout)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        if any(kind in (value or {}) for kind in LIST_KINDS):
            continue  # not covered, see above
        domain, ident = _qualified(driver, name)
        attributes.setdefault(domain, {})[ident] = _attribute(value)
    capacity: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("capacity") or {}).items():
        domain, ident = _qualified(driver, name)
        capacity.setdefault(domain, {})[ident] = quantity_value(str(value.get("value", "0")))
    return {
        "driver": driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": bool(device.get("allowMultipleAllocations")),
    }


# The ``device`` variable of the devices seen last (id of the device dict -> (the dict, driver,
# variable)): building it was a third of an evaluation, and the same published device is asked
# by every selector, request and rule. Entries hold the dict itself, so its id cannot be reused
# while cached; devices come from cached ResourceSlices, which are replaced on change, never
# edited in place. Bounded: emptied when full.
_VARIABLES: dict[int, tuple[dict[str, Any], str, dict[str, Any]]] = {}
MAX_CACHED_VARIABLES = 16384


def cached_device_variable(driver: str, device: dict[str, Any]) -> dict[str, Any]:
    entry = _VARIABLES.get(id(device))
    if entry is not None and entry[0] is device and entry[1] == driver:
        return entry[2]
    if len(_VARIABLES) >= MAX_CACHED_VARIABLES:
        _VARIABLES.clear()
    variable = device_variable(driver, device)
    _VARIABLES[id(device)] = (device, driver, variable)
    return variable


def matches(expression: str, driver: str, device: dict[str, Any]) -> bool:
    """Whether the selector expression selects the device; SelectorError when it cannot say."""
    program, domains = compile_selector(expression)
    variable = cached_device_variable(driver, device)
    for kind, domain in domains:  # an unknown domain is an empty map, not an error
        if domain not in variable[kind]:
            # A copy: the cached variable must not show this expression's empty domains to others.
            variable = {**variable, kind: {**variable[kind], domain: {}}}
    result = program.eval(data={"device": variable})
    if result.type() == cel.Type.ERROR:
        raise SelectorError(f"evaluation failed: {result.value()}")
    if result.type() != cel.Type.BOOL:
        raise SelectorError(f"CEL result of type {result.type().name()} could not be converted to bool")
    return bool(result.value())
