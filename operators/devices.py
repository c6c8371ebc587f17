"""``dra-operators devices``: which Pod holds which device on which node, with claim state.

Works on any cluster (KUBECONFIG). ``build_rows`` is pure; the command only fetches and prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .core.kube import Kube
from .core.resourceclaim import allocation_results, extended_claim_name, is_allocated, known_claim_name, pod_claims
from .core.resources import PODS, RESOURCE_CLAIMS, RESOURCE_SLICES

HEADER = ("NAMESPACE", "POD", "PHASE", "CLAIM", "STATE", "DEVICES", "NODE")


@dataclass(frozen=True)
class Row:
    namespace: str
    pod: str
    phase: str
    claim: str
    state: str
    devices: str
    node: str

    def cells(self) -> tuple[str, ...]:
        return (self.namespace, self.pod, self.phase, self.claim, self.state, self.devices, self.node)


def claim_state(claim: dict[str, Any] | None) -> str:
    if claim is None:
        return "missing"
    status = claim.get("status") or {}
    if claim["metadata"].get("deletionTimestamp"):
        return "deleting"
    if not is_allocated(claim):
        return "pending"
    conditions = [c for d in status.get("devices") or [] for c in d.get("conditions") or []]
    if status.get("reservedFor"):
        return "reserved"
    if conditions and not all(c.get("status") == "True" for c in conditions):
        return "binding"
    return "allocated"


def build_rows(pods: list[dict[str, Any]], claims: list[dict[str, Any]]) -> list[Row]:
    """One row per claim of every Pod that uses DRA (scheduler-made extended-resource claims
    included), sorted by namespace, Pod and claim."""
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    rows = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        names = [(c["name"], known_claim_name(pod, c)) for c in pod_claims(pod)]
        if extended := extended_claim_name(pod):
            names.append(("extended-resources", extended))
        for pod_claim, claim_name in names:
            claim = by_key.get((meta["namespace"], claim_name)) if claim_name else None
            results = allocation_results(claim) if claim else []
            devices = ", ".join(f"{r['driver']}/{r['pool']}/{r['device']}" + (f" (share {r['shareID'][:8]})" if r.get("shareID") else "")
                                + (" [admin]" if r.get("adminAccess") else "") for r in results)
            rows.append(Row(meta["namespace"], meta["name"], status.get("phase", ""),
                            claim_name or f"({pod_claim}: not created yet)", claim_state(claim) if claim_name else "waiting",
                            devices or "-", (pod.get("spec") or {}).get("nodeName") or "-"))
    return sorted(rows, key=lambda r: (r.namespace, r.pod, r.claim))


def free_devices(slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> dict[str, int]:
    """Devices per node that no claim holds (newest pool generation only)."""
    newest: dict[tuple[str, str], int] = {}
    for s in slices:
        key = (s["spec"]["driver"], s["spec"]["pool"]["name"])
        newest[key] = max(newest.get(key, 0), s["spec"]["pool"].get("generation", 0))
    used = {(r["driver"], r["pool"], r["device"]) for c in claims for r in allocation_results(c)}
    free: dict[str, int] = {}
    for s in slices:
        spec = s["spec"]
        if spec["pool"].get("generation", 0) != newest[(spec["driver"], spec["pool"]["name"])]:
            continue
        node = spec.get("nodeName") or "(not node-local)"
        free[node] = free.get(node, 0) + sum(1 for d in spec.get("devices") or []
                                             if (spec["driver"], spec["pool"]["name"], d["name"]) not in used)
    return dict(sorted(free.items()))


def render(rows: list[Row], free: dict[str, int] | None = None) -> str:
    table = [HEADER, *(r.cells() for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]
    if not rows:
        lines.append("(no Pod uses a ResourceClaim)")
    if free is not None:
        lines.append("")
        lines.append("free devices: " + (", ".join(f"{node} {count}" for node, count in free.items()) or "none published"))
    return "\n".join(lines)


async def snapshot(kube: Kube) -> tuple[str, list[Row]]:
    """The rendered table and its rows."""
    pods, claims, slices = await kube.list(PODS), await kube.list(RESOURCE_CLAIMS), await kube.list(RESOURCE_SLICES)
    rows = build_rows(pods, claims)
    return render(rows, free_devices(slices, claims)), rows
