"""Why one device can or cannot serve one request, checked in the order the structured
allocator checks it (``isSelectable``, then ``allocateDevice``: see operators.core.dra.allocator),
so that a person sees the first rule that rejects each device. The verdict of the whole claim
still comes from the search (``allocator.allocate``); this is the per-device explanation.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from . import cel
from .allocator import Request, selector_failure
from .capacity import Amounts, add, capacity_problem, show
from .counters import Counters, shortfall
from .nodeselection import NodeReach
from .pools import AllocatedState, DeviceID, Pool, available_counters
from .tolerations import describe_taint, untolerated

Obj = dict[str, Any]

# Reasons, in the order the allocator meets them; a device is rejected by the first.
POOL = "pool"
NODE = "node"
CLASS_SELECTOR = "class-selector"
CLASS_SELECTOR_ERROR = "class-selector-error"
REQUEST_SELECTOR = "request-selector"
REQUEST_SELECTOR_ERROR = "request-selector-error"
HELD = "held"
CAPACITY = "capacity"
COUNTERS = "counters"
TAINTED = "tainted"
FITS = "fits"
ORDER = (
    POOL,
    NODE,
    CLASS_SELECTOR_ERROR,
    CLASS_SELECTOR,
    REQUEST_SELECTOR_ERROR,
    REQUEST_SELECTOR,
    HELD,
    CAPACITY,
    COUNTERS,
    TAINTED,
    FITS,
)


@dataclass(frozen=True)
class Fit:
    device: DeviceID
    nodes: tuple[str, ...]  # usable nodes the device reaches
    reason: str
    detail: str = ""  # what the counts group by
    note: str = ""  # more about this device (which claims hold it)

    @property
    def name(self) -> str:
        return "/".join(self.device)

    @property
    def stage(self) -> int:
        return ORDER.index(self.reason)

    def sentence(self, count: int = 1) -> str:
        """ "<count> devices ..." for this reason."""
        one, many = _SENTENCES[self.reason]
        return f"{count} " + (one if count == 1 else many).format(d=self.detail)


_SENTENCES = {
    POOL: ("is in a pool that cannot be used: {d}", "are in a pool that cannot be used: {d}"),
    NODE: ("is not on a node the Pod can use ({d})", "are not on a node the Pod can use ({d})"),
    CLASS_SELECTOR: ("fails the class selector `{d}`", "fail the class selector `{d}`"),
    CLASS_SELECTOR_ERROR: ("makes the class selector fail: {d}", "make the class selector fail: {d}"),
    REQUEST_SELECTOR: ("fails the request's selector `{d}`", "fail the request's selector `{d}`"),
    REQUEST_SELECTOR_ERROR: ("makes the request's selector fail: {d}", "make the request's selector fail: {d}"),
    HELD: ("is held by other claims", "are held by other claims"),
    CAPACITY: ("lacks capacity: {d}", "lack capacity: {d}"),
    COUNTERS: ("shares counters that are used up: {d}", "share counters that are used up: {d}"),
    TAINTED: ("is tainted {d}", "are tainted {d}"),
    FITS: ("fits", "fit"),
}


def _holders(state: AllocatedState, device: DeviceID) -> str:
    holders = state.devices.get(device, [])
    return ", ".join(holders[:3]) + (f" and {len(holders) - 3} more" if len(holders) > 3 else "")


def counters_problem(pool: Pool, device: Obj, available: Counters) -> str | None:
    """Whether the device's counter consumption fits what allocated devices leave
    (operators.core.dra.counters.shortfall)."""
    short = shortfall(device.get("consumesCounters"), available)
    if short is None:
        return None
    if short.have is None:  # a valid pool has every counter its devices name (pools._build)
        return f"counter set {short.counter_set} has no counter {short.counter}"
    return (
        f"counter set {short.counter_set} {short.counter}: needs {show(short.need)}, "
        f"{show(max(short.have, Fraction(0)))} left"
    )


def device_fit(
    request: Request,
    device_class: Obj | None,
    pool: Pool,
    s: Obj,
    d: Obj,
    usable_nodes: NodeReach,
    state: AllocatedState,
    available: Counters | None = None,
) -> Fit:
    """The first rule that rejects device ``d`` (of slice ``s`` in ``pool``) for ``request``;
    ``usable_nodes``: the Nodes the Pod may use."""
    spec = s["spec"]
    device = (spec["driver"], spec["pool"]["name"], d["name"])
    nodes = usable_nodes.of(spec, d)
    if pool.incomplete or pool.invalid:
        # The allocator skips such pools whole; a device the class would not select anyway is
        # reported as such, so other drivers' pools do not crowd the answer.
        try:
            failed = selector_failure((device_class or {}).get("spec", {}).get("selectors") or [], spec["driver"], d)
        except cel.SelectorError:
            failed = None
        if failed:
            return Fit(device, nodes, CLASS_SELECTOR, failed[1])
        return Fit(
            device,
            nodes,
            POOL,
            "being updated (not all slices of its newest generation are published)"
            if pool.incomplete
            else f"invalid: {pool.invalid}",
        )
    if not nodes:
        where = spec.get("nodeName") or d.get("nodeName") or "a node selection"
        return Fit(device, nodes, NODE, f"{where}")
    driver = spec["driver"]
    for selectors, wrong, broken in (
        ((device_class or {}).get("spec", {}).get("selectors") or [], CLASS_SELECTOR, CLASS_SELECTOR_ERROR),
        (request.selectors, REQUEST_SELECTOR, REQUEST_SELECTOR_ERROR),
    ):
        try:
            failed = selector_failure(selectors, driver, d)
        except cel.SelectorError as e:
            return Fit(device, nodes, broken, str(e))
        if failed:
            return Fit(device, nodes, wrong, failed[1])
    if not request.admin and device in state.devices:
        return Fit(device, nodes, HELD, note=_holders(state, device))
    in_use: Amounts = {}
    add(in_use, state.capacity.get(device, {}))
    try:
        problem = capacity_problem(request.capacity, d, in_use)
    except ValueError as e:
        problem = str(e)
    if problem:
        return Fit(device, nodes, CAPACITY, problem)
    shared_in_use = d.get("allowMultipleAllocations") and (device in state.capacity or device in state.shared)
    if d.get("consumesCounters") and not shared_in_use:
        if available is None:
            available = available_counters(pool, state)
        if problem := counters_problem(pool, d, available):
            return Fit(device, nodes, COUNTERS, problem)
    if taints := untolerated(d.get("taints") or [], request.tolerations):
        return Fit(device, nodes, TAINTED, describe_taint(taints[0]))
    return Fit(device, nodes, FITS)
