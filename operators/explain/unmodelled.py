"""The 1.37 allocator features explain's model does not implement, found where they are used
(pure functions), so the verdict names them instead of guessing.

kube-scheduler 1.37 with their gates on (the experimental allocator,
k8s.io/dynamic-resource-allocation/structured/internal/experimental at v0.37.1) handles:

- derived attributes (DRADerivedAttributes): ``derivedAttributes`` of a request or subrequest,
  CEL-computed values that constraints compare (allocator_experimental.go, ``validateDeviceRequest``
  and ``exactDeviceRequestAccessor.derivedAttributes``);
- compatibility groups (DRADeviceCompatibilityGroups): ``consumesCounters[].compatibilityGroups``
  of a device; devices on one counter set are co-allocated only if their groups intersect,
  counting the pool's allocated devices (``checkAndConsumeCompatibilityGroups``);
- list-type attributes (DRAListTypeAttributes): ``ints``/``bools``/``strings``/``versions``
  attribute values, which CEL (``includes``) and ``matchAttribute``/``distinctAttribute`` treat
  as sets (k8s.io/dynamic-resource-allocation/cel/compile.go; constraint.go,
  ``matchesAttribute``);
- node-allocatable resources (DRANodeAllocatableResources): a device's
  ``nodeAllocatableResources``, which the scheduler counts against the Node's cpu, memory, ...
  (k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources/
  nodeallocatabledynamicresources.go, ``calculateAndCheckNodeAllocatableResources``).

A claim-side feature counts wherever it is written. A device-side one counts when the device is
in a pool that has a candidate for one of the claim's requests (a device the class and request
selectors select, or on which they fail, in this model's CEL, which leaves list-type attributes
out), since the features act across a pool's devices. A list-type attribute also counts wherever
it is when a selector or constraint of the claim or its classes names it: this model cannot say
what such a selector selects or how such a constraint compares.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..core.dra import cel
from ..core.dra.allocator import requests_of, selector_failure
from ..core.dra.pools import Pool, all_pools

Obj = dict[str, Any]

DERIVED = "derived attributes"
GROUPS = "compatibility groups"
LISTS = "list-type attributes"
NODE_ALLOCATABLE = "node-allocatable resources"
GATES = {
    DERIVED: "DRADerivedAttributes",
    GROUPS: "DRADeviceCompatibilityGroups",
    LISTS: "DRAListTypeAttributes",
    NODE_ALLOCATABLE: "DRANodeAllocatableResources",
}


@dataclass(frozen=True)
class NotModelled:
    feature: str
    field: str  # where it is used: object and field path

    @property
    def gate(self) -> str:
        return GATES[self.feature]

    def text(self) -> str:
        return f"not modelled: {self.feature} ({self.field})"

    def to_json(self) -> Obj:
        return {"feature": self.feature, "featureGate": self.gate, "field": self.field}


def claim_features(claim: Obj) -> list[NotModelled]:
    """Derived attributes in the claim's requests and subrequests."""
    name = claim["metadata"]["name"]
    found = []
    for i, request in enumerate(((claim.get("spec") or {}).get("devices") or {}).get("requests") or []):
        if (request.get("exactly") or {}).get("derivedAttributes"):
            found.append(
                NotModelled(DERIVED, f"ResourceClaim {name}: spec.devices.requests[{i}].exactly.derivedAttributes")
            )
        for j, sub in enumerate(request.get("firstAvailable") or []):
            if sub.get("derivedAttributes"):
                found.append(
                    NotModelled(
                        DERIVED,
                        f"ResourceClaim {name}: spec.devices.requests[{i}].firstAvailable[{j}].derivedAttributes",
                    )
                )
    return found


def list_attributes(device: Obj) -> list[str]:
    """The names of the device's list-type attributes."""
    return [n for n, v in (device.get("attributes") or {}).items() if any(k in (v or {}) for k in cel.LIST_KINDS)]


def device_features(slice_: Obj, device: Obj) -> list[NotModelled]:
    where = f"ResourceSlice {slice_['metadata']['name']}: device {device.get('name')}"
    found = []
    for i, consumption in enumerate(device.get("consumesCounters") or []):
        if consumption.get("compatibilityGroups"):
            found.append(NotModelled(GROUPS, f"{where} consumesCounters[{i}].compatibilityGroups"))
    for name in list_attributes(device):
        found.append(NotModelled(LISTS, f"{where} attributes[{name}]"))
    if device.get("nodeAllocatableResources"):
        found.append(NotModelled(NODE_ALLOCATABLE, f"{where} nodeAllocatableResources"))
    return found


def _candidate(selectors: list[Obj], driver: str, device: Obj) -> bool:
    # This model's CEL leaves list-type attributes out (a selector naming one counts by name).
    try:
        return selector_failure(selectors, driver, device) is None
    except cel.SelectorError:
        return True  # cannot say: the scheduler may select it


def _pool_in_scope(pool: Pool, selector_sets: list[list[Obj]]) -> bool:
    return any(
        _candidate(selectors, pool.driver, d)
        for _, d in pool.device_entries(with_other=True)
        for selectors in selector_sets
    )


def _names_in(texts: list[str], attribute: str) -> bool:
    short = attribute.rpartition("/")[2]
    return any(re.search(rf"\b{re.escape(short)}\b", t) for t in texts)


def features(claims: list[Obj], classes: dict[str, Obj], slices: list[Obj]) -> list[NotModelled]:
    """Every use of an unmodelled feature that can change these claims' allocation, in order,
    each once."""
    found: list[NotModelled] = []
    selector_sets: list[list[Obj]] = []
    texts: list[str] = []
    for claim in claims:
        found += claim_features(claim)
        for constraint in ((claim.get("spec") or {}).get("devices") or {}).get("constraints") or []:
            texts += [constraint.get("matchAttribute") or "", constraint.get("distinctAttribute") or ""]
        for alternatives in requests_of(claim):
            for r in alternatives:
                class_selectors = ((classes.get(r.class_name) or {}).get("spec") or {}).get("selectors") or []
                selector_sets.append(class_selectors + r.selectors)
                texts += [(s.get("cel") or {}).get("expression") or "" for s in class_selectors + r.selectors]
    for pool in all_pools(slices):
        in_scope = None  # evaluated once, only for a pool that uses a feature
        for s, d in pool.device_entries(with_other=True):
            for feature in device_features(s, d):
                if feature.feature == LISTS and _names_in(texts, feature.field.rpartition("[")[2].rstrip("]")):
                    found.append(feature)
                    continue
                if in_scope is None:
                    in_scope = _pool_in_scope(pool, selector_sets)
                if in_scope:
                    found.append(feature)
    return list(dict.fromkeys(found))


def summary(found: list[NotModelled]) -> str:
    shown = "; ".join(f.text() for f in found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return f"{shown}: what kube-scheduler does with it is unknown to explain"
