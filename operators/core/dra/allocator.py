"""The scheduler's device allocation for one Node, as a search that gives the same answer:
k8s.io/dynamic-resource-allocation/structured/internal/experimental/allocator_experimental.go
at v0.37.1 (the allocator kube-scheduler 1.37 picks with every DRA feature on: ``Allocate``,
``validateDeviceRequest``, ``allocateOne``, ``isSelectable``, ``allocateDevice``,
``checkAvailableCounters``, ``taintPreventsAllocation``) and constraint.go
(``matchAttribute``, ``distinctAttribute``).

The order is upstream's (pools by driver and name, binding-condition pools last; slices by name;
devices in slice order; requests and subrequests in claim order), so a CEL selector that fails
at runtime fails here exactly when the scheduler reaches it, and the search backtracks the same
way. Not covered: derived attributes, compatibility groups, list-type attributes, node-allocatable
resources (operators.explain.unmodelled finds where they reach a claim), optional node
operations (``skipNodeOperations`` devices are never usable on a Node that does not declare the
feature, as on kwok Nodes), the filter timeout.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from . import cel
from .capacity import Amounts, add, capacity_problem, consumed_amounts
from .counters import Counters, add_consumption
from .nodeselection import node_matches
from .pools import AllocatedState, DeviceID, Pool, available_counters, gather_pools
from .tolerations import untolerated

Obj = dict[str, Any]

ALLOCATION_RESULTS_MAX_SIZE = 32  # resourceapi.AllocationResultsMaxSize
# The scheduler gives a node's search 10 s (DRASchedulerFilterTimeout's default) and then
# stops with an error; a bound on the steps keeps explain from searching for ever instead.
MAX_STEPS = 2_000_000


class AllocationError(Exception):
    """What makes the scheduler abort the Pod's scheduling attempt (a Filter error, not
    "unschedulable"): a CEL selector that fails, a request for all devices of a pool being
    updated, a constraint that cannot hold for all devices."""


class _MaxSizeExceeded(Exception):
    pass


@dataclass
class Request:
    """``requestAccessor``: a request, or one subrequest of ``firstAvailable``."""

    name: str
    parent: str | None
    class_name: str
    mode: str
    count: int
    admin: bool
    selectors: list[Obj]
    tolerations: list[Obj]
    capacity: Obj | None

    @property
    def full_name(self) -> str:
        return f"{self.parent}/{self.name}" if self.parent else self.name

    @classmethod
    def exact(cls, request: Obj) -> Request:
        e = request.get("exactly") or {}
        return cls(
            request["name"],
            None,
            e.get("deviceClassName", ""),
            e.get("allocationMode") or "ExactCount",
            int(e.get("count") or 1),
            bool(e.get("adminAccess")),
            e.get("selectors") or [],
            e.get("tolerations") or [],
            e.get("capacity"),
        )

    @classmethod
    def sub(cls, parent: str, sub: Obj) -> Request:
        return cls(
            sub["name"],
            parent,
            sub.get("deviceClassName", ""),
            sub.get("allocationMode") or "ExactCount",
            int(sub.get("count") or 1),
            False,
            sub.get("selectors") or [],
            sub.get("tolerations") or [],
            sub.get("capacity"),
        )


def requests_of(claim: Obj) -> list[list[Request]]:
    """Per request of the claim: its alternatives (one, or the subrequests in order)."""
    out = []
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if request.get("firstAvailable"):
            out.append([Request.sub(request["name"], s) for s in request["firstAvailable"]])
        else:
            out.append([Request.exact(request)])
    return out


def claim_key(claim: Obj) -> str:
    return f"{claim['metadata'].get('namespace')}/{claim['metadata']['name']}"


# -- selectors ---------------------------------------------------------------------------------


def selector_failure(selectors: list[Obj], driver: str, device: Obj) -> tuple[int, str] | None:
    """The first selector that does not select the device: (index, expression); raises
    ``cel.SelectorError`` (with the index and expression in ``args``) for one that cannot say."""
    for i, selector in enumerate(selectors):
        expression = (selector.get("cel") or {}).get("expression")
        if expression is None:
            raise cel.SelectorError(f"selector #{i}: CEL expression empty (unsupported selector type?)")
        try:
            if not cel.matches(expression, driver, device):
                return i, expression
        except cel.SelectorError as e:
            raise cel.SelectorError(f"selector #{i} `{expression}`: {e}") from None
    return None


def attribute(device: Obj, driver: str, name: str) -> Obj | None:
    """``lookupStaticAttribute``: a fully qualified name, or the driver's own unqualified one."""
    attributes: dict[str, Obj] = device.get("attributes") or {}
    if name in attributes:
        return attributes[name]
    domain, sep, ident = name.partition("/")
    if sep and domain == driver and ident in attributes:
        return attributes[ident]
    return None


def attribute_value(value: Obj | None) -> tuple[str, Any] | None:
    if not value:
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return kind, value[kind]
    return None


# -- the search ------------------------------------------------------------------------------


@dataclass
class _Data:
    request: Request
    class_: Obj
    num: int = 0
    all_devices: list[tuple[Pool, Obj, Obj]] = field(default_factory=list)
    selected_sub: int = 0


class _Constraint:
    def __init__(self, spec: Obj):
        self.requests = set(spec.get("requests") or [])
        # One of the two (the API server's validation).
        self.match: str | None = spec.get("matchAttribute")
        self.distinct: str | None = spec.get("distinctAttribute")
        self.values: list[tuple[str, Any]] = []

    def applies(self, r: Request) -> bool:
        if not self.requests:
            return True
        return (r.parent in self.requests or r.full_name in self.requests) if r.parent else r.name in self.requests

    def add(self, r: Request, driver: str, device: Obj) -> bool:
        if not self.applies(r):
            return True
        value = attribute_value(attribute(device, driver, self.match or self.distinct or ""))
        if value is None:
            return False
        if self.match:
            if self.values and self.values[0] != value:
                return False
        elif value in self.values:
            return False
        self.values.append(value)
        return True

    def remove(self, r: Request) -> None:
        if self.applies(r):
            self.values.pop()


class Allocation:
    """One ``Allocate`` call: ``run()`` gives the results per claim or None."""

    def __init__(
        self, node: Obj | None, claims: list[Obj], slices: list[Obj], classes: dict[str, Obj], state: AllocatedState
    ):
        self.node, self.claims, self.state = node, claims, state
        self.classes = classes
        self.pools = gather_pools(node, slices)
        self.data: dict[tuple[int, int, int], _Data] = {}
        self.parents: dict[tuple[int, int], list[Request]] = {}
        self.constraints: list[list[_Constraint]] = []
        # (driver, pool, device, (claim, request, subrequest)): whether the device's selectors match.
        self.matches: dict[tuple[str, str, str, tuple[int, int, int]], bool] = {}
        self.allocating: dict[DeviceID, set[int]] = {}
        self.allocating_capacity: dict[DeviceID, Amounts] = {}
        self.consumed_counters: dict[str, Counters] = {}  # pool id -> what the devices being tried take
        self.available: dict[str, Counters] = {}  # pool id -> what allocated devices leave
        self.results: list[list[Obj]] = [[] for _ in claims]
        self.calls = 0

    # -- set-up (``Allocate``, ``validateDeviceRequest``) --

    def _validate(self, ci: int, ri: int, si: int, r: Request) -> _Data:
        claim = self.claims[ci]
        class_ = self.classes.get(r.class_name)
        if class_ is None:
            raise AllocationError(
                f"claim {claim_key(claim)}, request {r.full_name}: could not retrieve device "
                f'class {r.class_name}: deviceclass.resource.k8s.io "{r.class_name}" not found'
            )
        data = _Data(r, class_)
        if r.mode == "ExactCount":
            data.num = r.count
        elif r.mode == "All":
            for pool in self.pools:
                if pool.incomplete:
                    raise AllocationError(
                        f"claim {claim_key(claim)}, request {r.full_name}: asks for all devices, "
                        f"but resource pool {pool.id} is currently being updated"
                    )
                if pool.invalid:
                    raise AllocationError(
                        f"claim {claim_key(claim)}, request {r.full_name}: asks for all devices, "
                        f"but resource pool {pool.id} is currently invalid"
                    )
                for s, d in pool.device_entries():
                    if not self._selectable((ci, ri, si), data, s, d):
                        continue
                    if self._capacity_problem(ci, r, s, d, {}) is not None:
                        continue
                    data.all_devices.append((pool, s, d))
            data.num = len(data.all_devices)
        else:
            raise AllocationError(f"claim {claim_key(claim)}, request {r.full_name}: unsupported count mode {r.mode}")
        return data

    def run(self) -> list[list[Obj]] | None:
        for ci, claim in enumerate(self.claims):
            for ri, alternatives in enumerate(requests_of(claim)):
                for si, r in enumerate(alternatives):
                    self.data[(ci, ri, si)] = self._validate(ci, ri, si, r)
                self.parents[(ci, ri)] = alternatives
            self.constraints.append(
                [_Constraint(c) for c in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []]
            )
        try:
            done = self._one(ci=0, ri=0, si=0, di=0, sub=False, start=(0, 0, 0))
        except _MaxSizeExceeded:
            done = False
        return self.results if done else None

    # -- per device --

    def _selectable(self, key: tuple[int, int, int], data: _Data, s: Obj, d: Obj) -> bool:
        spec = s["spec"]
        cache = (spec["driver"], spec["pool"]["name"], d["name"], key)
        if cache in self.matches:
            return self.matches[cache]
        claim = self.claims[key[0]]
        try:
            ok = selector_failure((data.class_ or {}).get("spec", {}).get("selectors") or [], spec["driver"], d) is None
        except cel.SelectorError as e:
            raise AllocationError(
                f"class {data.class_['metadata']['name']}: {e} on device "
                f"{spec['driver']}/{spec['pool']['name']}/{d['name']}: CEL runtime error"
            ) from None
        if ok:
            try:
                ok = selector_failure(data.request.selectors, spec["driver"], d) is None
            except cel.SelectorError as e:
                raise AllocationError(
                    f"claim {claim_key(claim)}: {e} on device "
                    f"{spec['driver']}/{spec['pool']['name']}/{d['name']}: CEL runtime error"
                ) from None
        if ok and spec.get("perDeviceNodeSelection"):
            ok = node_matches(self.node, d.get("nodeName") or "", bool(d.get("allNodes")), d.get("nodeSelector"))
        self.matches[cache] = ok
        return ok

    def _in_use(self, device: DeviceID) -> bool:
        return device in self.state.devices or bool(self.allocating.get(device))

    def _capacity_in_use(self, device: DeviceID) -> bool:
        return device in self.state.capacity or device in self.state.shared or device in self.allocating_capacity

    def _capacity_problem(self, ci: int, r: Request, s: Obj, d: Obj, in_use: Amounts) -> str | None:
        """``CmpRequestOverCapacity``, whose error (a negative consumed capacity) aborts."""
        try:
            return capacity_problem(r.capacity, d, in_use)
        except ValueError as e:
            spec = s["spec"]
            raise AllocationError(
                f"claim {claim_key(self.claims[ci])}, request {r.full_name}: checking capacity for device "
                f"{spec['driver']}/{spec['pool']['name']}/{d['name']}: {e}"
            ) from None

    def _capacity_fits(self, ci: int, r: Request, s: Obj, d: Obj) -> bool:
        device = (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        in_use: Amounts = {}
        add(in_use, self.state.capacity.get(device, {}))
        add(in_use, self.allocating_capacity.get(device, {}))
        return self._capacity_problem(ci, r, s, d, in_use) is None

    def _counters_fit(self, pool: Pool, d: Obj) -> bool:
        """``checkAvailableCounters``: reserve the device's counters if they fit. Every counter
        of the pool is compared, as upstream: one already over-used by allocated devices stops
        every device of the pool that consumes counters."""
        if pool.id not in self.available:
            self.available[pool.id] = available_counters(pool, self.state)
        consumed = self.consumed_counters.setdefault(pool.id, {})
        add_consumption(consumed, d.get("consumesCounters"))
        for set_name, counters in self.available[pool.id].items():
            for name, value in counters.items():
                if value < consumed.get(set_name, {}).get(name, Fraction(0)):
                    add_consumption(consumed, d.get("consumesCounters"), -1)
                    return False
        return True

    def _allocate_device(
        self, ci: int, ri: int, si: int, pool: Pool, s: Obj, d: Obj, must: bool
    ) -> Callable[[], None] | None:
        """``allocateDevice``: the undo function when the device was taken, else None."""
        data = self.data[(ci, ri, si)]
        r = data.request
        spec = s["spec"]
        device = (spec["driver"], spec["pool"]["name"], d["name"])
        multiple = bool(d.get("allowMultipleAllocations"))
        if not multiple and r.admin and ci in self.allocating.get(device, set()):
            return None
        if not r.admin and self._in_use(device):
            return None
        if spec.get("skipNodeOperations"):
            declared = ((self.node or {}).get("status") or {}).get("declaredFeatures") or []
            if "DRAOptionalNodeOperations" not in declared:
                return None
        skip_counters = multiple and self._capacity_in_use(device)
        undo: list[Callable[[], None]] = []

        def rollback() -> None:
            for step in reversed(undo):
                step()

        if not skip_counters and d.get("consumesCounters"):
            if not self._counters_fit(pool, d):
                return None
            undo.append(lambda: add_consumption(self.consumed_counters[pool.id], d.get("consumesCounters"), -1))
        if untolerated(d.get("taints") or [], r.tolerations):
            rollback()
            return None
        for constraint in self.constraints[ci]:
            if not constraint.add(r, spec["driver"], d):
                rollback()
                if must:
                    raise AllocationError(
                        f"claim {claim_key(self.claims[ci])}, request {r.name}: cannot add device "
                        f"{'/'.join(device)} because a claim constraint would not be satisfied"
                    )
                return None
            undo.append(functools.partial(constraint.remove, r))
        if not multiple:
            self.allocating.setdefault(device, set()).add(ci)
            undo.append(lambda: self.allocating[device].discard(ci))
        consumed: Amounts = {}
        if not self._capacity_fits(ci, r, s, d):
            rollback()
            return None
        result = {"request": r.full_name, "driver": device[0], "pool": device[1], "device": device[2]}
        if multiple:
            consumed = consumed_amounts(r.capacity, d)
            existed = device in self.allocating_capacity
            add(self.allocating_capacity.setdefault(device, {}), consumed)
            result["shared"] = True

            def drop() -> None:
                add(self.allocating_capacity[device], consumed, -1)
                if not existed:
                    del self.allocating_capacity[device]

            undo.append(drop)
        if r.admin:
            result["adminAccess"] = True
        if consumed:
            result["consumedCapacity"] = consumed
        n = len(self.results[ci])
        self.results[ci].append(result)
        undo.append(lambda: self.results[ci].__delitem__(slice(n, None)))
        return rollback

    # -- ``allocateOne`` --

    def _one(self, ci: int, ri: int, si: int, di: int, sub: bool, start: tuple[int, int, int]) -> bool:
        self.calls += 1
        if self.calls > MAX_STEPS:
            raise AllocationError(
                f"the search for devices took more than {MAX_STEPS} steps; kube-scheduler "
                "stops such a search after its filter timeout (10 s by default) with an error"
            )
        if ci >= len(self.claims):
            return True
        if (ci, ri) not in self.parents:
            try:
                return self._one(ci + 1, 0, 0, 0, False, (0, 0, 0))
            except _MaxSizeExceeded:
                return False
        data = self.data[(ci, ri, si)]
        alternatives = self.parents[(ci, ri)]
        if not sub and alternatives[0].parent is not None:
            all_exceeded = True
            for index in range(len(alternatives)):
                try:
                    ok = self._one(ci, ri, index, di, True, (0, 0, 0))
                except _MaxSizeExceeded:
                    continue
                all_exceeded = False
                if ok:
                    self.data[(ci, ri, 0)].selected_sub = index
                    return True
            if all_exceeded:
                raise _MaxSizeExceeded()
            return False
        r = data.request
        if r.mode == "All" and not data.all_devices:
            return False
        if di >= data.num:
            return self._one(ci, ri + 1, 0, 0, False, (0, 0, 0))
        if data.num - di > ALLOCATION_RESULTS_MAX_SIZE - len(self.results[ci]):
            raise _MaxSizeExceeded()
        if r.mode == "All":
            pool, s, d = data.all_devices[di]
            undo = self._allocate_device(ci, ri, si, pool, s, d, must=True)
            if undo is None:
                return False
            if self._one(ci, ri, si, di + 1, sub, (0, 0, 0)):
                return True
            undo()
            return False
        for pi in range(start[0], len(self.pools)):
            pool = self.pools[pi]
            if pool.incomplete or pool.invalid:
                continue
            for sli in range(start[1] if pi == start[0] else 0, len(pool.slices)):
                s = pool.slices[sli]
                devices = s["spec"].get("devices") or []
                for dvi in range(start[2] if (pi, sli) == start[:2] else 0, len(devices)):
                    d = devices[dvi]
                    device = (pool.driver, pool.name, d["name"])
                    if r.admin and ci in self.allocating.get(device, set()):
                        continue
                    if not r.admin and self._in_use(device):
                        continue
                    if not self._selectable((ci, ri, si), data, s, d):
                        continue
                    if not self._capacity_fits(ci, r, s, d):
                        continue
                    undo = self._allocate_device(ci, ri, si, pool, s, d, must=False)
                    if undo is None:
                        continue
                    if self._one(ci, ri, si, di + 1, sub, (pi, sli, dvi + 1)):
                        return True
                    undo()
        return False


def allocate(
    node: Obj | None, claims: list[Obj], slices: list[Obj], classes: dict[str, Obj], state: AllocatedState
) -> list[list[Obj]] | None:
    """The devices the scheduler would give ``claims`` on ``node`` (results per claim, in
    request order), None when they do not fit; raises AllocationError where the scheduler
    aborts the attempt."""
    return Allocation(node, claims, slices, classes, state).run()
