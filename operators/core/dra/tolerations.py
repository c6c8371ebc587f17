"""Taints and tolerations, as the scheduler and the DRA helpers compare them.

- Device taints (ResourceSlice devices, DeviceTaintRules) against a request's tolerations:
  ``resourceclaim.ToleratesTaint`` (k8s.io/dynamic-resource-allocation/resourceclaim/toleration.go).
- DeviceTaintRules' device selectors against devices (``device_selector_matches``).
- Node taints against a Pod's tolerations: ``v1helper.TolerationsTolerateTaint`` and
  ``Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go), as the scheduler's
  TaintToleration filter uses them (only NoSchedule and NoExecute taints filter).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]

NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "NoExecute"
FILTERING_EFFECTS = (NO_SCHEDULE, NO_EXECUTE)


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """``resourceclaim.ToleratesTaint`` (and ``v1.Toleration.ToleratesTaint``: the same rules)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def tolerated(taint: Obj, tolerations: Iterable[Obj]) -> bool:
    return any(tolerates(t, taint) for t in tolerations)


def untolerated(taints: Iterable[Obj], tolerations: Iterable[Obj]) -> list[Obj]:
    """The NoSchedule/NoExecute taints no toleration tolerates (``taintPreventsAllocation`` in
    the structured allocator; the TaintToleration filter for Nodes). Other effects (None,
    PreferNoSchedule) never prevent anything."""
    tolerations = list(tolerations)
    return [t for t in taints if t.get("effect") in FILTERING_EFFECTS and not tolerated(t, tolerations)]


def describe_taint(taint: Obj) -> str:
    """``key=value:Effect``, as kubectl prints taints."""
    value = taint.get("value")
    return f"{taint.get('key', '')}{'=' + value if value else ''}:{taint.get('effect', '')}"


def device_selector_matches(selector: Obj | None, driver: str, pool: str, device: str) -> bool:
    """A DeviceTaintRule's ``spec.deviceSelector`` against one device: no selector matches no
    device (unlike the empty one, which matches every device); each of driver, pool and device
    that is set must be equal. Upstream spells this out three times at v1.37.1: the ResourceSlice
    tracker's ``applyPatches`` (k8s.io/dynamic-resource-allocation/resourceslice/tracker/
    tracker.go), ``ruleMatchesDevice`` (pkg/controller/devicetainteviction/
    device_taint_eviction.go) and ``ruleMakesDeviceUnavailable`` (pkg/controller/
    resourcepoolstatusrequest/controller.go)."""
    if selector is None:
        return False
    return all(
        selector.get(key) is None or selector[key] == value
        for key, value in (("driver", driver), ("pool", pool), ("device", device))
    )


def result_tolerations(claim: Obj, result: Obj) -> list[Obj]:
    """The tolerations of an allocation result: the scheduler's copy of its request's (v0.35+
    allocator, ``Tolerations: internal.lookupRequest(claim).tolerations()``). Kubernetes 1.34's
    scheduler makes no copy (v0.34.12 ``allocator_experimental.go``), and upstream's 1.34
    controller then evicts Pods whose claims tolerate the taint; a claim's spec cannot change, so
    a result without tolerations takes its request's (``name`` or ``name/subrequest``)."""
    if result.get("tolerations"):
        return list(result["tolerations"])
    name, _, sub = str(result.get("request") or "").partition("/")
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if request.get("name") != name:
            continue
        if not sub:
            return list((request.get("exactly") or {}).get("tolerations") or [])
        for alternative in request.get("firstAvailable") or []:
            if alternative.get("name") == sub:
                return list(alternative.get("tolerations") or [])
    return []
