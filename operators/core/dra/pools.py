"""ResourceSlices grouped into pools as the structured allocator sees them from one Node, and
the devices other claims hold: k8s.io/dynamic-resource-allocation/structured/internal/
experimental/pools_experimental.go (``GatherPools``, ``addSlice``, ``buildPool``,
``checkSlicesInPool``) and k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources/
allocateddevices.go (``foreachAllocatedDevice``) at v1.37.1.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .capacity import Amounts, add, q
from .counters import Counters, amounts, counters_left
from .nodeselection import node_matches
from .resourceclaim import allocation_results

Obj = dict[str, Any]
DeviceID = tuple[str, str, str]  # driver, pool, device


@dataclass
class Pool:
    driver: str
    name: str
    incomplete: bool = False
    invalid: str = ""
    slices: list[Obj] = field(default_factory=list)  # device slices that reach the node
    other_slices: list[Obj] = field(default_factory=list)  # the pool's device slices that do not
    counter_sets: Counters = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def has_binding_conditions(self) -> bool:
        """``poolHasBindingConditions``: such pools are tried last."""
        return any(d.get("bindingConditions") for s in self.slices for d in s["spec"].get("devices") or [])

    def device_entries(self, with_other: bool = False) -> Iterable[tuple[Obj, Obj]]:
        for s in self.slices + (self.other_slices if with_other else []):
            for d in s["spec"].get("devices") or []:
                yield s, d


def _pool_key(s: Obj) -> tuple[str, str]:
    return s["spec"]["driver"], s["spec"]["pool"]["name"]


def _generation(s: Obj) -> int:
    return int(s["spec"]["pool"].get("generation") or 0)


def _slice_count(s: Obj) -> int:
    return int(s["spec"]["pool"].get("resourceSliceCount") or 0)


def slice_reaches_node(s: Obj, node: Obj | None) -> bool:
    """Whether ``GatherPools`` takes the slice for this node: its node name, all nodes or node
    selector match, or (per-device node selection) one of its devices does."""
    spec = s["spec"]
    if spec.get("nodeName") or spec.get("allNodes") or spec.get("nodeSelector") is not None:
        return node_matches(node, spec.get("nodeName") or "", bool(spec.get("allNodes")), spec.get("nodeSelector"))
    if spec.get("perDeviceNodeSelection"):
        return any(
            node_matches(node, d.get("nodeName") or "", bool(d.get("allNodes")), d.get("nodeSelector"))
            for d in spec.get("devices") or []
        )
    return False


def _build(driver: str, name: str, slices: list[Obj], all_of_pool: list[Obj] | None) -> Pool:
    """``buildPool``: counter-set slices apart, duplicate names and missing counter sets make
    the pool invalid."""
    slices = sorted(slices, key=lambda s: s["metadata"]["name"])
    device_slices = [s for s in slices if not s["spec"].get("sharedCounters")]
    counter_slices = [s for s in slices if s["spec"].get("sharedCounters")]
    other: list[Obj] = []
    if all_of_pool is not None and len(slices) < len(all_of_pool):
        names = {s["metadata"]["name"] for s in slices}
        for s in all_of_pool:
            if s["metadata"]["name"] in names:
                continue
            (counter_slices if s["spec"].get("sharedCounters") else other).append(s)
    pool = Pool(driver, name, slices=device_slices, other_slices=other)
    seen: set[str] = set()
    for s in device_slices:
        for d in s["spec"].get("devices") or []:
            if d["name"] in seen:
                pool.invalid = f"duplicate device name {d['name']}"
                return pool
            seen.add(d["name"])
    for s in counter_slices:
        for counter_set in s["spec"].get("sharedCounters") or []:
            if counter_set["name"] in pool.counter_sets:
                pool.invalid = f"duplicate counter set name {counter_set['name']}"
                return pool
            pool.counter_sets[counter_set["name"]] = amounts(counter_set.get("counters"))
    for s in device_slices + other:
        for d in s["spec"].get("devices") or []:
            for consumption in d.get("consumesCounters") or []:
                counters = pool.counter_sets.get(consumption.get("counterSet"))
                if counters is None:
                    pool.invalid = f"counter set {consumption.get('counterSet')} not found"
                    return pool
                for counter in consumption.get("counters") or {}:
                    if counter not in counters:
                        pool.invalid = f"counter {counter} not found in counter set {consumption['counterSet']}"
                        return pool
    return pool


def slices_by_node(slices: list[Obj]) -> Callable[[str], list[Obj]]:
    """For a Node's name, the slices ``gather_pools`` may take for it: those naming it and those
    naming no Node (all nodes, a node selector), in the order given. Made once for a question
    about every Node (``kubectl dra explain``): filtering all slices for each Node was Nodes
    times slices (bench/RESULTS.md, issue 32)."""
    named: dict[str, list[tuple[int, Obj]]] = {}
    shared: list[tuple[int, Obj]] = []
    for i, s in enumerate(slices):
        node_name = s["spec"].get("nodeName") or ""
        (named.setdefault(node_name, []) if node_name else shared).append((i, s))

    def for_node(name: str) -> list[Obj]:
        return [s for _, s in heapq.merge(named.get(name, []), shared, key=lambda item: item[0])]

    return for_node


def gather_pools(node: Obj | None, slices: list[Obj]) -> list[Pool]:
    """``GatherPools`` for ``node``: the newest generation of every pool with a slice for the
    node, sorted by driver and pool name, pools with binding conditions last."""
    node_name = node["metadata"]["name"] if node else ""
    for_node = [s for s in slices if (s["spec"].get("nodeName") or "") in ("", node_name)]
    pools: dict[tuple[str, str], list[Obj]] = {}
    for s in for_node:
        if not slice_reaches_node(s, node):
            continue
        key = _pool_key(s)
        current = pools.get(key)
        if current is None or _generation(s) > _generation(current[0]):
            pools[key] = [s]
        elif _generation(s) == _generation(current[0]):
            current.append(s)
    result: list[Pool] = []
    with_binding: list[Pool] = []
    for (driver, name), pool_slices in pools.items():
        generation, count = _generation(pool_slices[0]), _slice_count(pool_slices[0])
        if len(pool_slices) == count:
            pool = _build(driver, name, pool_slices, None)
        else:
            same = [s for s in slices if _pool_key(s) == (driver, name)]
            if any(_generation(s) > generation for s in same):
                continue  # obsolete: a newer generation is being published
            all_of_pool = [s for s in same if _generation(s) == generation]
            if len(all_of_pool) != count:
                result.append(Pool(driver, name, incomplete=True))
                continue
            pool = _build(driver, name, pool_slices, all_of_pool)
        (with_binding if pool.has_binding_conditions else result).append(pool)
    result.sort(key=lambda p: (p.driver, p.name))
    with_binding.sort(key=lambda p: (p.driver, p.name))
    return result + with_binding


def newest_slices(slices: list[Obj]) -> tuple[list[Obj], dict[tuple[str, str], str]]:
    """The slices of each pool's newest generation, and the pools whose newest generation is
    not complete yet (with why): the devices a person should look at."""
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        newest[_pool_key(s)] = max(newest.get(_pool_key(s), 0), _generation(s))
    current = [s for s in slices if _generation(s) == newest[_pool_key(s)]]
    by_pool: dict[tuple[str, str], list[Obj]] = {}
    for s in current:  # grouped once: a pass over the slices per pool grew with pools squared
        by_pool.setdefault(_pool_key(s), []).append(s)
    problems: dict[tuple[str, str], str] = {}
    for key, of_pool in by_pool.items():
        if len(of_pool) != _slice_count(of_pool[0]):
            problems[key] = (
                f"pool {key[0]}/{key[1]} is being updated: generation {newest[key]} has "
                f"{len(of_pool)} of {_slice_count(of_pool[0])} slices"
            )
    return current, problems


# -- what other claims hold ------------------------------------------------------------------


@dataclass
class AllocatedState:
    """``schedulerapi.AllocatedState``: devices held exclusively, shares of shared devices and
    the capacity they consume. Admin-access results hold nothing."""

    devices: dict[DeviceID, list[str]] = field(default_factory=dict)  # -> claims (ns/name)
    shared: dict[DeviceID, list[str]] = field(default_factory=dict)
    capacity: dict[DeviceID, Amounts] = field(default_factory=dict)

    def is_allocated(self, device: DeviceID) -> bool:
        """``IsDeviceAllocated``: exclusively, or by at least one share (its counters are used)."""
        return device in self.devices or device in self.shared or device in self.capacity

    def holders(self, device: DeviceID) -> list[str]:
        return self.devices.get(device, []) + self.shared.get(device, [])


def allocated_state(claims: Iterable[Obj], skip: Iterable[str] = ()) -> AllocatedState:
    """From every allocated claim except those in ``skip`` (``ns/name``)."""
    skip = set(skip)
    state = AllocatedState()
    for claim in claims:
        key = f"{claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
        if key in skip:
            continue
        for r in allocation_results(claim):
            if r.get("adminAccess"):
                continue
            device = (r["driver"], r["pool"], r["device"])
            if r.get("shareID"):
                state.shared.setdefault(device, []).append(key)
                if r.get("consumedCapacity"):
                    add(state.capacity.setdefault(device, {}), {n: q(v) for n, v in r["consumedCapacity"].items()})
                continue
            state.devices.setdefault(device, []).append(key)
    return state


def available_counters(pool: Pool, state: AllocatedState) -> Counters:
    """The pool's counters minus what allocated devices consume (``checkAvailableCounters``'s
    first part, operators.core.dra.counters); may go negative."""
    return counters_left(
        pool.counter_sets,
        (
            d.get("consumesCounters")
            for s, d in pool.device_entries(with_other=True)
            if d.get("consumesCounters")
            and state.is_allocated((s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]))
        ),
    )


def all_pools(slices: list[Obj]) -> list[Pool]:
    """Every pool at its newest generation, seen from no particular Node (all its device slices
    count as reaching): what ``explain`` goes through device by device."""
    current, problems = newest_slices(slices)
    by_pool: dict[tuple[str, str], list[Obj]] = {}
    for s in current:
        by_pool.setdefault(_pool_key(s), []).append(s)
    pools = []
    for (driver, name), pool_slices in sorted(by_pool.items()):
        pool = _build(driver, name, pool_slices, None)
        if (driver, name) in problems:
            pool.incomplete = True
        pools.append(pool)
    return pools
