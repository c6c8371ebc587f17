"""Shared counters of partitionable devices (KEP-4815): a pool's ``sharedCounters`` (counter
sets, published in ResourceSlices of their own) and what each device takes of them
(``consumesCounters``), as exact amounts per counter set and counter.

The one arithmetic behind the structured allocator's view (k8s.io/dynamic-resource-allocation/
structured/internal/experimental/allocator_experimental.go at v0.37.1, ``checkAvailableCounters``:
operators.core.dra.pools and allocator) and the pool status controller's (k8s.io/kubernetes
pkg/controller/resourcepoolstatusrequest/views.go at v1.37.1: ``availableCounters``,
``deductInUse``, ``deductCounters``, ``deviceFits``, ``cloneCounters``: operators.poolstatus).
Both start from the counter sets' values, subtract what every allocated device consumes
(counters the sets do not have are skipped, amounts may go negative) and then ask whether one
more device fits.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any, NamedTuple

from .quantity import parse_quantity

Obj = dict[str, Any]
Counters = dict[str, dict[str, Fraction]]  # counter set -> counter -> amount


def amounts(counters: Obj | None) -> dict[str, Fraction]:
    """A ``counters`` map (``{name: {value: quantity}}``, of a counter set or of one entry of
    ``consumesCounters``) as amounts; a counter without a value is 0."""
    return {name: parse_quantity(str((c or {}).get("value", "0"))) for name, c in (counters or {}).items()}


def capacities(counter_sets: Iterable[Obj]) -> Counters:
    """``sharedCounters`` entries (``{name, counters}``) as amounts. A set named twice is merged,
    the later value of a counter winning, as views.go ``availableCounters`` does; the allocator
    refuses such a pool instead (pools: "duplicate counter set name")."""
    found: Counters = {}
    for counter_set in counter_sets:
        found.setdefault(counter_set.get("name", ""), {}).update(amounts(counter_set.get("counters")))
    return found


def copy_counters(counters: Counters) -> Counters:
    """``cloneCounters``: a copy whose amounts can be changed without touching ``counters``."""
    return {name: dict(values) for name, values in counters.items()}


def deduct(available: Counters, consumes: Iterable[Obj] | None, sign: int = 1) -> None:
    """``deductCounters``: subtract one device's ``consumesCounters`` from ``available`` in place
    (``sign=-1`` gives it back). Counter sets and counters ``available`` does not have are
    skipped; amounts may go negative ("treated as no counters available")."""
    for consumption in consumes or []:
        counters = available.get(consumption.get("counterSet", ""))
        if counters is None:
            continue
        for name, value in amounts(consumption.get("counters")).items():
            if name in counters:
                counters[name] -= sign * value


def counters_left(capacity: Counters, consumed: Iterable[Iterable[Obj] | None]) -> Counters:
    """``availableCounters``: a copy of ``capacity`` minus the ``consumesCounters`` of every
    device in ``consumed`` (the allocated ones: each device once)."""
    available = copy_counters(capacity)
    for consumes in consumed:
        deduct(available, consumes)
    return available


def add_consumption(into: Counters, consumes: Iterable[Obj] | None, sign: int = 1) -> None:
    """Add one device's ``consumesCounters`` to a running total (``sign=-1`` takes it out again):
    the allocator's ``consumedCounters`` of the devices it is trying. Unlike ``deduct`` every
    counter set and counter named is kept."""
    for consumption in consumes or []:
        counters = into.setdefault(consumption.get("counterSet", ""), {})
        for name, value in amounts(consumption.get("counters")).items():
            counters[name] = counters.get(name, Fraction(0)) + sign * value


class Shortfall(NamedTuple):
    """A counter one device needs more of than is left; ``have`` is None when the counter set
    has no such counter (or there is no such counter set)."""

    counter_set: str
    counter: str
    need: Fraction
    have: Fraction | None


def shortfall(consumes: Iterable[Obj] | None, available: Counters) -> Shortfall | None:
    """``deviceFits``: None when every counter the device consumes is there with at least that
    much left, else the first one that is not (in the order the device names them). A counter
    that does not exist never fits, not even for an amount of 0."""
    for consumption in consumes or []:
        counters = available.get(consumption.get("counterSet", "")) or {}
        for name, need in amounts(consumption.get("counters")).items():
            have = counters.get(name)
            if have is None or have < need:
                return Shortfall(consumption.get("counterSet") or "", name, need, have)
    return None
