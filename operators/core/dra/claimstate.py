"""A claim's state as people ask about it: allocated, waiting for its devices' binding
conditions, failed binding, reserved, pending (pure functions over plain dicts).

Binding follows ``isClaimReadyForBinding`` in k8s.io/kubernetes/pkg/scheduler/framework/plugins/
dynamicresources/dynamicresources.go (v1.37.1): ready when every binding condition of every
allocated device is True in ``status.devices``, failed when any binding failure condition is.
kube-scheduler writes ``reservedFor`` before it waits in PreBind, so binding is checked first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .resourceclaim import allocation_results, is_allocated

Obj = dict[str, Any]

READY, FAILED, PENDING = "ready", "failed", "pending"


def device_binding_verdict(conditions: Iterable[Obj], binding: Iterable[str], failure: Iterable[str]) -> str:
    """``isClaimReadyForBinding`` for one allocated device, given its ``status.devices[]``
    conditions: failed when any binding failure condition is True (failure wins), ready when
    every binding condition is True, pending otherwise. The one copy of the rule: the binding
    operator and ``explain`` both ask it."""
    status: dict[str | None, Any] = {}
    for condition in conditions:
        status.setdefault(condition.get("type"), condition.get("status"))  # the first of a type counts
    if any(status.get(kind) == "True" for kind in failure):
        return FAILED
    if all(status.get(kind) == "True" for kind in binding):
        return READY
    return PENDING


def allocated_at(claim: Obj) -> str | None:
    """``status.allocation.allocationTimestamp`` (set by kube-scheduler since 1.34), else the
    time of the last status write by kube-scheduler."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    if allocation.get("allocationTimestamp"):
        return str(allocation["allocationTimestamp"])
    times: list[str] = [
        m.get("time")
        for m in claim["metadata"].get("managedFields") or []
        if m.get("subresource") == "status" and m.get("time") and "scheduler" in (m.get("manager") or "")
    ]
    return max(times) if times else None


def binding_state(claim: Obj) -> Obj | None:
    """Binding conditions of the allocated devices (``status.devices[].conditions``), or None
    when no device has any. As ``isClaimReadyForBinding`` (dynamicresources.go): ready when
    every binding condition is True, failed when any failure condition is True."""
    devices: dict[tuple[Any, Any, Any], Obj] = {}
    for d in (claim.get("status") or {}).get("devices") or []:
        devices.setdefault((d.get("driver"), d.get("pool"), d.get("device")), d)  # getAllocatedDeviceStatus: the first
    pending: list[Obj] = []
    failed: list[Obj] = []
    met: list[Obj] = []
    verdicts: list[str] = []
    for r in allocation_results(claim):
        if not r.get("bindingConditions"):
            continue
        listed = (devices.get((r["driver"], r["pool"], r["device"])) or {}).get("conditions") or []
        failure_kinds = r.get("bindingFailureConditions") or []
        verdicts.append(device_binding_verdict(listed, r["bindingConditions"], failure_kinds))
        conditions: dict[Any, Obj] = {}
        for c in listed:
            conditions.setdefault(c.get("type"), c)
        name = f"{r['driver']}/{r['pool']}/{r['device']}"
        for kind in failure_kinds:
            if (conditions.get(kind) or {}).get("status") == "True":
                c = conditions[kind]
                failed.append(
                    {
                        "device": name,
                        "condition": kind,
                        "reason": c.get("reason"),
                        "message": c.get("message"),
                        "since": c.get("lastTransitionTime"),
                    }
                )
        for kind in r["bindingConditions"]:
            c = conditions.get(kind) or {}
            (met if c.get("status") == "True" else pending).append(
                {
                    "device": name,
                    "condition": kind,
                    "status": c.get("status") or "not reported",
                    "reason": c.get("reason"),
                    "message": c.get("message"),
                }
            )
    if not verdicts:
        return None
    return {
        "pending": pending,
        "failed": failed,
        "met": met,
        "since": allocated_at(claim),
        "verdict": FAILED if FAILED in verdicts else PENDING if PENDING in verdicts else READY,
    }


def claim_state(claim: Obj | None) -> str:
    """missing, deleting, pending, binding-failed, binding, reserved (in use by a consumer) or
    allocated."""
    if claim is None:
        return "missing"
    if claim["metadata"].get("deletionTimestamp"):
        return "deleting"
    if not is_allocated(claim):
        return "pending"
    binding = binding_state(claim)
    if binding and binding["verdict"] == FAILED:
        return "binding-failed"
    if binding and binding["verdict"] == PENDING:
        return "binding"
    if (claim.get("status") or {}).get("reservedFor"):
        return "reserved"
    return "allocated"
