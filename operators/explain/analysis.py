"""Unallocated claims evaluated as kube-scheduler evaluates them (pure functions).

The verdict is the scheduler's own procedure: the Nodes the Pod may use (operators.core.
nodeselection), the claims' existing allocations' node selectors, then the structured
allocator's search per Node (operators.core.dra.allocator); a CEL error anywhere aborts the attempt,
as DynamicResources.Filter's ``statusError`` does (k8s.io/kubernetes/pkg/scheduler/framework/
plugins/dynamicresources/dynamicresources.go). The per-device reasons (operators.core.dra.devicefit)
say why each device of every pool's newest generation does or does not serve each request.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..core.dra.allocator import AllocationError, Request, allocate, attribute, attribute_value, claim_key, requests_of
from ..core.dra.devicefit import FITS, ORDER, Fit, device_fit
from ..core.dra.nodeselection import NodeReach, node_selector_matches, pod_node_problem
from ..core.dra.pools import AllocatedState, Pool, all_pools, available_counters, slices_by_node
from ..core.dra.resourceclaim import is_allocated
from . import unmodelled

Obj = dict[str, Any]
CLOSEST = 3


def usable_nodes(pod: Obj, nodes: list[Obj]) -> tuple[list[Obj], dict[str, str]]:
    """The Nodes the scheduler's node filters leave the Pod, and why each other one is out."""
    usable, rejected = [], {}
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        if problem := pod_node_problem(pod, node):
            rejected[node["metadata"]["name"]] = problem
        else:
            usable.append(node)
    return usable, rejected


@dataclass
class NodeOutcome:
    node: str
    fits: bool
    why: str = ""
    results: list[list[Obj]] | None = None
    error: str = ""
    filtered: bool = False  # ruled out by the Pod's node filters


@dataclass
class Verdict:
    allocatable: bool | None  # None: a feature explain does not model decides (not_modelled)
    summary: str
    nodes: list[NodeOutcome] = field(default_factory=list)
    error: str = ""
    not_modelled: list[unmodelled.NotModelled] = field(default_factory=list)

    def to_json(self) -> Obj:
        return {
            "allocatable": self.allocatable,
            "summary": self.summary,
            "error": self.error or None,
            "notModelled": [f.to_json() for f in self.not_modelled] or None,
            "nodes": [
                {
                    "node": o.node,
                    "fits": o.fits,
                    "why": o.why or None,
                    "filtered": o.filtered or None,
                    "error": o.error or None,
                    "devices": [
                        [f"{r['request']}: {r['driver']}/{r['pool']}/{r['device']}" for r in claim]
                        for claim in o.results or []
                    ]
                    or None,
                }
                for o in self.nodes
            ],
        }


def verdict(
    pod: Obj, pod_claims: list[Obj], nodes: list[Obj], slices: list[Obj], classes: dict[str, Obj], state: AllocatedState
) -> Verdict:
    """Whether kube-scheduler can place the Pod with its claims (all claims must exist)."""
    for claim in pod_claims:
        if claim["metadata"].get("deletionTimestamp"):
            return Verdict(False, f"resourceclaim {claim['metadata']['name']!r} is being deleted")
    to_allocate = [c for c in pod_claims if not is_allocated(c)]
    for claim in to_allocate:
        for alternatives in requests_of(claim):
            for r in alternatives:
                if r.class_name not in classes:
                    return Verdict(
                        False,
                        f"request {r.full_name} of claim {claim['metadata']['name']}: "
                        f"device class {r.class_name} does not exist",
                    )
    usable, rejected = usable_nodes(pod, nodes)
    outcomes = [NodeOutcome(name, False, why, filtered=True) for name, why in rejected.items()]
    if usable and (found := unmodelled.features(to_allocate, classes, slices)):
        # No yes/no from a model that leaves out what decides: the scheduler's answer may differ.
        return Verdict(None, unmodelled.summary(found), outcomes, not_modelled=found)
    errors = []
    slices_for = slices_by_node(slices)
    for node in usable:
        name = node["metadata"]["name"]
        elsewhere = [
            c["metadata"]["name"]
            for c in pod_claims
            if is_allocated(c)
            and (selector := c["status"]["allocation"].get("nodeSelector")) is not None
            and not node_selector_matches(selector, node)
        ]
        if elsewhere:
            outcomes.append(NodeOutcome(name, False, f"claim {elsewhere[0]} is allocated to devices on other nodes"))
            continue
        if not to_allocate:
            outcomes.append(NodeOutcome(name, True, "all claims are allocated"))
            continue
        try:
            results = allocate(node, to_allocate, slices_for(name), classes, state)
        except AllocationError as e:
            errors.append(f"node {name}: {e}")
            outcomes.append(NodeOutcome(name, False, "error", error=str(e)))
            continue
        outcomes.append(
            NodeOutcome(name, results is not None, "" if results is not None else "cannot allocate all claims", results)
        )
    outcomes.sort(key=lambda o: (not o.fits, o.node))
    fitting = [o.node for o in outcomes if o.fits]
    if errors:
        return Verdict(False, "the scheduler stops with an error: " + errors[0], outcomes, errors[0])
    if not usable:
        return Verdict(False, f"no node passes the Pod's node filters ({len(rejected)} rejected)", outcomes)
    if fitting:
        return Verdict(
            True,
            f"allocatable on {len(fitting)} of {len(nodes)} nodes: {', '.join(fitting[:5])}"
            + (" ..." if len(fitting) > 5 else ""),
            outcomes,
        )
    return Verdict(False, f"cannot allocate all claims on any of the {len(usable)} nodes the Pod can use", outcomes)


# -- per request, device by device ------------------------------------------------------------


@dataclass
class AlternativeReport:
    request: Request
    total: int
    fits: list[Fit]
    rejected: list[Fit]

    @property
    def needed(self) -> int | None:
        return self.request.count if self.request.mode == "ExactCount" else None

    @property
    def enough(self) -> bool:
        return len(self.fits) >= (self.needed or 1)

    def counts(self) -> list[tuple[str, str, int, str]]:
        """(reason, detail, count, text) for the rejected devices, most common first."""
        counted = Counter((f.reason, f.detail) for f in self.rejected)
        examples = {(f.reason, f.detail): f for f in self.rejected}
        rows = [(reason, detail, n, examples[(reason, detail)].sentence(n)) for (reason, detail), n in counted.items()]
        return sorted(rows, key=lambda r: (-r[2], ORDER.index(r[0])))

    def closest(self) -> list[Fit]:
        """The rejected devices that got furthest through the allocator's checks."""
        return sorted(self.rejected, key=lambda f: (-f.stage, f.name))[:CLOSEST]

    def summary(self) -> str:
        r = self.request
        want = "all matching devices" if r.mode == "All" else f"{r.count} device{'s' if r.count != 1 else ''}"
        head = f"{self.total} devices: {len(self.fits)} fit"
        parts = [text for _, _, _, text in self.counts()]
        return f"wants {want} of class {r.class_name}; {head}" + (", " + ", ".join(parts) if parts else "")

    def to_json(self) -> Obj:
        r = self.request
        return {
            "name": r.full_name,
            "deviceClassName": r.class_name,
            "allocationMode": r.mode,
            "count": self.needed,
            "adminAccess": r.admin or None,
            "devices": self.total,
            "fit": [f.name for f in self.fits],
            "enough": self.enough,
            "summary": self.summary(),
            "reasons": [
                {"reason": reason, "detail": detail or None, "devices": n, "text": text}
                for reason, detail, n, text in self.counts()
            ],
            "closest": [
                {"device": f.name, "reason": f.reason, "detail": f.detail or f.note or None, "nodes": list(f.nodes)}
                for f in self.closest()
            ],
        }


def analyse_alternative(
    r: Request, classes: dict[str, Obj], pools: list[Pool], usable: NodeReach, state: AllocatedState
) -> AlternativeReport:
    fits: list[Fit] = []
    rejected: list[Fit] = []
    counters = {p.id: available_counters(p, state) for p in pools if p.counter_sets}
    device_class = classes.get(r.class_name)
    total = 0
    for pool in pools:
        for s, d in pool.device_entries():
            total += 1
            fit = device_fit(r, device_class, pool, s, d, usable, state, counters.get(pool.id, {}))
            (fits if fit.reason == FITS else rejected).append(fit)
    return AlternativeReport(r, total, fits, rejected)


def constraint_notes(claim: Obj, reports: list[list[AlternativeReport]], pools: list[Pool]) -> list[str]:
    """For each constraint of the claim: the values the fitting devices have, so a person sees
    why no set of devices agrees (matchAttribute) or differs (distinctAttribute)."""
    notes = []
    by_name = {(p.driver, p.name, d["name"]): (s, d) for p in pools for s, d in p.device_entries()}
    for constraint in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []:
        name = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        kind = "matchAttribute" if constraint.get("matchAttribute") else "distinctAttribute"
        scope = set(constraint.get("requests") or [])
        values: Counter = Counter()
        for alternatives in reports:
            for report in alternatives:
                r = report.request
                if scope and not ({r.name, r.full_name, r.parent} & scope):
                    continue
                for f in report.fits:
                    _, d = by_name[f.device]
                    value = attribute_value(attribute(d, f.device[0], name))
                    values[str(value[1]) if value else "(not set)"] += 1
        shown = ", ".join(f"{v}: {n}" for v, n in values.most_common(6)) or "no fitting device"
        notes.append(
            f"{kind} {name}"
            + (f" over {', '.join(sorted(scope))}" if scope else "")
            + f": fitting devices have {shown}"
        )
    return notes


def analyse_claim(
    claim: Obj, classes: dict[str, Obj], slices: list[Obj], usable: list[Obj], state: AllocatedState
) -> tuple[list[list[AlternativeReport]], list[str]]:
    pools = all_pools(slices)
    reach = NodeReach(usable)
    reports = [
        [analyse_alternative(r, classes, pools, reach, state) for r in alternatives]
        for alternatives in requests_of(claim)
    ]
    return reports, constraint_notes(claim, reports, pools)


def other_claims_state(claims: list[Obj], skip: list[Obj]) -> AllocatedState:
    from ..core.dra.pools import allocated_state

    return allocated_state(claims, skip=[claim_key(c) for c in skip])
