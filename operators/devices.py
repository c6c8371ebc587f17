"""``devices``: which Pod holds which device on which node, with claim state, and what is free.

Works on any cluster (KUBECONFIG). ``build_rows``, ``free_capacity`` and the renderers are pure;
``snapshot`` only fetches. States come from operators.core.dra.claimstate (``binding`` while the
scheduler waits for binding conditions, although it already wrote ``reservedFor``); free
devices follow the allocator's rules (operators.core.dra.pools, devicefit): a device is free when a
plain request (no tolerations, no admin access, no capacity named) could get it now.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .core.api.kube import Kube
from .core.api.resources import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, RESOURCE_SLICES
from .core.dra.capacity import Amounts, add, capacity_problem, q, show
from .core.dra.claimstate import claim_state
from .core.dra.devicefit import counters_problem
from .core.dra.pools import all_pools, allocated_state, available_counters
from .core.dra.resourceclaim import (
    allocation_results,
    extended_claim_name,
    known_claim_name,
    may_use_claims,
    pod_claims,
    uses_claims,
)
from .core.dra.tolerations import untolerated
from .core.machinery.watch import list_streamed

__all__ = ["HEADER", "Row", "build_rows", "claim_state", "free_capacity", "free_devices", "render", "snapshot"]

HEADER = ("NAMESPACE", "POD", "PHASE", "CLAIM", "STATE", "DEVICES", "NODE")
WIDE_ATTRIBUTES = ("model", "productName", "uuid")


@dataclass(frozen=True)
class Row:
    namespace: str
    pod: str
    phase: str
    claim: str
    state: str
    devices: str
    node: str
    attributes: str = ""

    def cells(self, wide: bool = False) -> tuple[str, ...]:
        cells = (self.namespace, self.pod, self.phase, self.claim, self.state, self.devices, self.node)
        return cells + ((self.attributes or "-",) if wide else ())

    def to_json(self) -> dict[str, str]:
        return {
            "namespace": self.namespace,
            "pod": self.pod,
            "phase": self.phase,
            "claim": self.claim,
            "state": self.state,
            "devices": self.devices,
            "node": self.node,
            "attributes": self.attributes,
        }


def _device_index(slices: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(p.driver, p.name, d["name"]): d for p in all_pools(slices) for _, d in p.device_entries()}


def _attributes(device: dict[str, Any] | None) -> str:
    if not device:
        return ""
    attributes = device.get("attributes") or {}
    values = []
    for name in WIDE_ATTRIBUTES:
        value = attributes.get(name)
        if value:
            values.append(f"{name}={next(iter(value.values()))}")
    return " ".join(values)


def build_rows(
    pods: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    slices: list[dict[str, Any]] | None = None,
    namespace: str | None = None,
) -> list[Row]:
    """One row per claim of every Pod that uses DRA (scheduler-made extended-resource claims
    included), sorted by namespace, Pod and claim; with ``slices`` the devices' attributes."""
    by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    devices = _device_index(slices) if slices is not None else {}
    rows = []
    for pod in pods:
        meta, status = pod["metadata"], pod.get("status") or {}
        if namespace and meta["namespace"] != namespace:
            continue
        names = [(c["name"], known_claim_name(pod, c)) for c in pod_claims(pod)]
        if extended := extended_claim_name(pod):
            names.append(("extended-resources", extended))
        for pod_claim, claim_name in names:
            claim = by_key.get((meta["namespace"], claim_name)) if claim_name else None
            results = allocation_results(claim) if claim else []
            text = ", ".join(
                f"{r['driver']}/{r['pool']}/{r['device']}"
                + (f" (share {r['shareID'][:8]})" if r.get("shareID") else "")
                + (" [admin]" if r.get("adminAccess") else "")
                for r in results
            )
            attributes = "; ".join(
                a for r in results if (a := _attributes(devices.get((r["driver"], r["pool"], r["device"]))))
            )
            rows.append(
                Row(
                    meta["namespace"],
                    meta["name"],
                    status.get("phase", ""),
                    claim_name or f"({pod_claim}: not created yet)",
                    claim_state(claim) if claim_name else "waiting",
                    text or "-",
                    (pod.get("spec") or {}).get("nodeName") or "-",
                    attributes,
                )
            )
    return sorted(rows, key=lambda r: (r.namespace, r.pod, r.claim))


# -- what is free ----------------------------------------------------------------------------


@dataclass
class NodeFree:
    """Devices of one node (the newest generation of complete pools) by what keeps them."""

    total: int = 0
    free: int = 0
    in_use: int = 0
    tainted: int = 0
    counters: int = 0  # a device sharing its counters is in use (partitions)
    incomplete: int = 0  # pool being updated
    admin: int = 0  # also used with admin access (still free)
    shared: dict[str, Amounts] = field(default_factory=dict)  # device -> capacity left
    shared_total: dict[str, Amounts] = field(default_factory=dict)

    def text(self) -> str:
        parts = [f"{self.free} free of {self.total}"]
        details = [
            f"{n} {what}"
            for n, what in (
                (self.in_use, "in use"),
                (self.counters, "counters used up"),
                (self.tainted, "tainted"),
                (self.incomplete, "pool updating"),
                (self.admin, "with admin access"),
            )
            if n
        ]
        for device, left in sorted(self.shared.items()):
            total = self.shared_total[device]
            details.append(
                f"{device} shared: "
                + ", ".join(f"{name} {show(left[name])}/{show(total[name])} left" for name in sorted(total))
            )
        return parts[0] + (f" ({', '.join(details)})" if details else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "free": self.free,
            "inUse": self.in_use,
            "tainted": self.tainted,
            "countersUsedUp": self.counters,
            "poolUpdating": self.incomplete,
            "adminAccess": self.admin,
            "shared": {d: {n: show(v) for n, v in left.items()} for d, left in sorted(self.shared.items())},
        }


def free_capacity(slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> dict[str, NodeFree]:
    """Per node, devices free for a plain request, and why the others are not. Order of the
    checks is the allocator's: in use, capacity, counters, taints."""
    state = allocated_state(claims)
    admin = {
        (r["driver"], r["pool"], r["device"]) for c in claims for r in allocation_results(c) if r.get("adminAccess")
    }
    out: dict[str, NodeFree] = {}
    for pool in all_pools(slices):
        available = available_counters(pool, state) if pool.counter_sets else {}
        for s, d in pool.device_entries():
            node = s["spec"].get("nodeName") or d.get("nodeName") or "(not node-local)"
            free = out.setdefault(node, NodeFree())
            free.total += 1
            device = (pool.driver, pool.name, d["name"])
            name = "/".join(device[1:]) if pool.name != node else d["name"]
            if pool.incomplete or pool.invalid:
                free.incomplete += 1
                continue
            if device in state.devices:
                free.in_use += 1
                continue
            if d.get("allowMultipleAllocations"):
                total = {n: q(c.get("value", "0")) for n, c in (d.get("capacity") or {}).items()}
                left = dict(total)
                add(left, state.capacity.get(device, {}), -1)
                free.shared[name], free.shared_total[name] = left, total
                # What a plain request would take of it is the allocator's rule (the requestPolicy's
                # default, else the whole capacity), not "anything left".
                if capacity_problem(None, d, state.capacity.get(device, {})):
                    free.in_use += 1
                    continue
            shared_in_use = d.get("allowMultipleAllocations") and state.is_allocated(device)
            if d.get("consumesCounters") and not shared_in_use and counters_problem(pool, d, available):
                free.counters += 1
                continue
            if untolerated(d.get("taints") or [], []):
                free.tainted += 1
                continue
            free.free += 1
            if device in admin:
                free.admin += 1
    return dict(sorted(out.items()))


def free_devices(slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> dict[str, int]:
    """Devices per node a plain request could get now."""
    return {node: f.free for node, f in free_capacity(slices, claims).items()}


# -- rendering --------------------------------------------------------------------------------


def table_lines(rows: list[Row], wide: bool = False) -> list[str]:
    header = HEADER + (("ATTRIBUTES",) if wide else ())
    table = [header, *(r.cells(wide) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in table]
    if not rows:
        lines.append("(no Pod uses a ResourceClaim)")
    return lines


def render(rows: list[Row], free: dict[str, Any] | None = None, wide: bool = False) -> str:
    lines = table_lines(rows, wide)
    if free is not None:
        lines.append("")
        if free and all(isinstance(v, int) for v in free.values()):
            lines.append("free devices: " + ", ".join(f"{node} {count}" for node, count in free.items()))
        elif free:
            lines.append("free devices:")
            lines += [f"  {node}: {f.text()}" for node, f in free.items()]
        else:
            lines.append("free devices: none published")
    return "\n".join(lines)


def to_json(rows: list[Row], free: dict[str, NodeFree]) -> dict[str, Any]:
    return {"claims": [r.to_json() for r in rows], "free": {node: f.to_json() for node, f in free.items()}}


def rich_table(rows: list[Row], free: dict[str, NodeFree], wide: bool = False, title: str = ""):
    """The same table for ``--watch`` (a rich renderable, refreshed in place by rich.live)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title or None, box=None, header_style="bold", pad_edge=False)
    for column in HEADER + (("ATTRIBUTES",) if wide else ()):
        table.add_column(column, overflow="fold")
    styles = {
        "binding": "yellow",
        "binding-failed": "red",
        "pending": "yellow",
        "missing": "red",
        "waiting": "yellow",
        "deleting": "magenta",
        "reserved": "green",
        "allocated": "cyan",
    }
    for r in rows:
        cells: list[str | Text] = list(r.cells(wide))
        cells[4] = Text(r.state, style=styles.get(r.state, ""))
        table.add_row(*cells)
    footer = Text(
        "\n".join(["free devices:"] + [f"  {node}: {f.text()}" for node, f in free.items()])
        if free
        else "free devices: none published"
    )
    return Group(table, Text(""), footer)


# Namespaces whose Pods are streamed at once: each stream is one API-server watch; a handful keep
# the server busy without a burst of hundreds.
CONCURRENT_NAMESPACES = 8


async def fetch(
    kube: Kube, namespace: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The Pods that use DRA (of ``namespace``, else all), and every claim and slice: what is
    free depends on the claims of every namespace. The Pods come as streamed events whose lines
    are looked at before they are parsed, so that Pods without claims cost almost nothing.

    Without ``namespace`` only the namespaces that hold a ResourceClaim or a
    ResourceClaimTemplate are read: a Pod elsewhere has no claim and can get none, so it holds
    no device (its "not created yet" row is shown by ``-n``). On a large cluster most Pods are in
    namespaces without DRA objects, and reading them was most of the command's time
    (bench/RESULTS.md, issue 32). The slices, the largest list, are read meanwhile: the Pods
    need only the claims and templates first."""
    if namespace:
        (pods, _), claims, slices = await asyncio.gather(
            _dra_pods(kube, namespace), kube.list(RESOURCE_CLAIMS), kube.list(RESOURCE_SLICES)
        )
        return pods, claims, slices
    gate = asyncio.Semaphore(CONCURRENT_NAMESPACES)

    async def one(ns: str) -> list[dict[str, Any]]:
        async with gate:
            return (await _dra_pods(kube, ns))[0]

    reading_slices = asyncio.ensure_future(kube.list(RESOURCE_SLICES))
    try:
        claims, templates = await asyncio.gather(kube.list(RESOURCE_CLAIMS), kube.list(RESOURCE_CLAIM_TEMPLATES))
        per_namespace = await asyncio.gather(*(one(ns) for ns in dra_namespaces(claims, templates)))
        slices = await reading_slices
    finally:  # a failed read above ends this one too (its error is the one raised)
        reading_slices.cancel()
        await asyncio.gather(reading_slices, return_exceptions=True)
    return [pod for pods in per_namespace for pod in pods], claims, slices


def dra_namespaces(claims: list[dict[str, Any]], templates: list[dict[str, Any]]) -> list[str]:
    """The namespaces where a Pod can have a claim: those with a claim or a claim template."""
    return sorted({o["metadata"]["namespace"] for o in (*claims, *templates)})


async def _dra_pods(kube: Kube, namespace: str) -> tuple[list[dict[str, Any]], str]:
    return await list_streamed(kube, PODS, namespace, keep=uses_claims, keep_line=may_use_claims)


async def snapshot(kube: Kube, namespace: str | None = None, wide: bool = False) -> tuple[str, list[Row]]:
    """The rendered table and its rows."""
    pods, claims, slices = await fetch(kube, namespace)
    rows = build_rows(pods, claims, slices, namespace)
    return render(rows, free_capacity(slices, claims), wide), rows
