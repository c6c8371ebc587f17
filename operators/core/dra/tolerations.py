"""Taints and tolerations, as the scheduler and the DRA helpers compare them.

- Device taints (ResourceSlice devices, DeviceTaintRules) against a request's tolerations:
  ``resourceclaim.ToleratesTaint`` (k8s.io/dynamic-resource-allocation/resourceclaim/toleration.go).
- Node taints against a Pod's tolerations: ``v1helper.TolerationsTolerateTaint`` and
  ``Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go), as the scheduler's
  TaintToleration filter uses them (only NoSchedule and NoExecute taints filter).
"""

from __future__ import annotations

from typing import Any, Iterable

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
