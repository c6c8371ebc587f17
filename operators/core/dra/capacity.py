"""Consumable capacity of DRA devices (``allowMultipleAllocations``), as the structured
allocator computes it: k8s.io/dynamic-resource-allocation/structured/internal/experimental/
consumable_capacity.go at v0.37.1 (``CmpRequestOverCapacity``, ``calculateConsumedCapacity``,
``violatesPolicy``), with quantities as exact fractions (operators.core.dra.quantity).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

from .quantity import format_binary, parse_quantity

Obj = dict[str, Any]
Amounts = dict[str, Fraction]


def q(value: Any) -> Fraction:
    return parse_quantity(str(value))


def show(value: Fraction) -> str:
    """A quantity for people: binary suffixes when they fit, else the plain number."""
    text = format_binary(value)
    return text


def _consumed(requested: Fraction | None, capacity: Obj) -> Fraction:
    """``calculateConsumedCapacity``: the request rounded up to what the policy allows, or the
    policy's default (else the whole capacity) when the request does not name it."""
    policy = capacity.get("requestPolicy")
    if requested is None:
        if policy and policy.get("default") is not None:
            return q(policy["default"])
        return q(capacity.get("value", "0"))
    if not policy:
        return requested
    valid_range = policy.get("validRange")
    if valid_range and valid_range.get("min") is not None:
        minimum = q(valid_range["min"])
        if requested < minimum:
            return minimum
        if valid_range.get("step") is None:
            return requested
        step = q(valid_range["step"])
        return minimum + step * math.ceil((requested - minimum) / step)
    if policy.get("validValues") is not None:
        for value in policy["validValues"]:
            if requested <= q(value):
                return q(value)
    return requested


def _violates(value: Fraction, policy: Obj | None) -> str | None:
    """``violatesPolicy``: why ``value`` is not allowed, or None."""
    if not policy:
        return None
    if policy.get("default") is not None and value == q(policy["default"]):
        return None
    if (valid_range := policy.get("validRange")) is not None:
        if valid_range.get("max") is not None and value > q(valid_range["max"]):
            return f"more than the maximum {valid_range['max']}"
        if valid_range.get("step") is not None:
            minimum = q(valid_range.get("min") or 0)
            if (value - minimum) % q(valid_range["step"]) != 0:
                return f"not {valid_range.get('min')} plus a multiple of {valid_range['step']}"
        return None
    if policy.get("validValues"):
        if not any(value == q(v) for v in policy["validValues"]):
            return f"not one of {', '.join(map(str, policy['validValues']))}"
    return None


def requested_amounts(capacity_requirements: Obj | None) -> Amounts:
    return {name: q(v) for name, v in ((capacity_requirements or {}).get("requests") or {}).items()}


def consumed_amounts(capacity_requirements: Obj | None, device: Obj) -> Amounts:
    """``GetConsumedCapacityFromRequest``: what a share of the device takes, per capacity."""
    requested = requested_amounts(capacity_requirements)
    return {name: _consumed(requested.get(name), cap) for name, cap in (device.get("capacity") or {}).items()}


def capacity_problem(capacity_requirements: Obj | None, device: Obj, in_use: Amounts | None = None) -> str | None:
    """``CmpRequestOverCapacity``: None when the request fits next to ``in_use`` (what other
    claims and this allocation already consume of the device), else why not."""
    capacities = device.get("capacity") or {}
    requested = requested_amounts(capacity_requirements)
    for name in requested:
        if name not in capacities:
            return f"has no capacity {name!r}"
    in_use = in_use or {}
    for name, cap in capacities.items():
        consumed = _consumed(requested.get(name), cap)
        if consumed < 0:
            raise ValueError(f"capacity {name!r}: capacity value is negative")
        if why := _violates(consumed, cap.get("requestPolicy")):
            return f"{name} {show(consumed)} is {why}"
        total, used = q(cap.get("value", "0")), in_use.get(name, Fraction(0))
        if used + consumed > total:
            return f"{name}: needs {show(consumed)}, {show(max(total - used, Fraction(0)))} of {show(total)} left"
    return None


def add(into: Amounts, amounts: Amounts, sign: int = 1) -> None:
    for name, value in amounts.items():
        into[name] = into.get(name, Fraction(0)) + sign * value
