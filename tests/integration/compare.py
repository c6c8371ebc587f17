"""Snapshots of what the claims controllers wrote, with only random parts normalised, so that
upstream's controller and ours can be compared object by object."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from operators.core.api.kube import Kube
from operators.core.api.resources import EVENTS, PODS, RESOURCE_CLAIMS

CONTROLLER_MANAGERS = {"ResourceClaimController"}
EVENT_COMPONENTS = {"resource_claim"}


class Normaliser:
    """Replaces UIDs by the object they belong to and generated name suffixes by #####."""

    def __init__(self, pods: list[dict], claims: list[dict]):
        self.uids = {p["metadata"]["uid"]: f"<pod {p['metadata']['name']}>" for p in pods}
        self.names: dict[str, str] = {}
        for claim in claims:
            meta = claim["metadata"]
            generate = meta.get("generateName")
            if generate and re.fullmatch(re.escape(generate) + r"[a-z0-9]{5}", meta["name"]):
                self.names[meta["name"]] = generate + "#####"
            self.uids[meta["uid"]] = f"<claim {self.name(meta['name'])}>"

    def name(self, name: str) -> str:
        return self.names.get(name, name)

    @staticmethod
    def generated(name: str) -> str:
        """A name the API server generated (claims of Pod statuses, maybe gone by now)."""
        return re.sub(r"[bcdfghjklmnpqrstvwxz2456789]{5}$", "#####", name)

    def uid(self, uid: str) -> str:
        return self.uids.get(uid, "<unknown uid>")


def _claim(claim: dict, n: Normaliser) -> dict[str, Any]:
    meta, status = claim["metadata"], claim.get("status") or {}
    allocation = dict(status.get("allocation") or {})
    allocation.pop("allocationTimestamp", None)
    return {
        "name": n.name(meta["name"]),
        "generateName": meta.get("generateName"),
        "labels": meta.get("labels"),
        "annotations": meta.get("annotations"),
        "ownerReferences": [dict(o, uid=n.uid(o["uid"])) for o in meta.get("ownerReferences") or []],
        "finalizers": meta.get("finalizers"),
        "deleting": bool(meta.get("deletionTimestamp")),
        "spec": claim.get("spec"),
        "reservedFor": [dict(r, uid=n.uid(r["uid"])) for r in status.get("reservedFor") or []],
        "allocation": allocation or None,
    }


def _generated_or_none(n: Normaliser, name: str | None) -> str | None:
    return n.generated(name) if name else None


def _pod(pod: dict, n: Normaliser) -> dict[str, Any]:
    status = pod.get("status") or {}
    return {
        "name": pod["metadata"]["name"],
        "phase": status.get("phase"),
        "nodeName": pod["spec"].get("nodeName"),
        "resourceClaimStatuses": [
            dict(s, resourceClaimName=n.generated(s["resourceClaimName"])) if s.get("resourceClaimName") else s
            for s in status.get("resourceClaimStatuses") or []
        ],
        "extendedResourceClaimName": _generated_or_none(
            n, (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        ),
        "managers": sorted(
            {
                (m.get("manager"), m.get("operation"), m.get("subresource", ""))
                for m in pod["metadata"].get("managedFields") or []
                if m.get("manager") in CONTROLLER_MANAGERS
            }
        ),
    }


async def snapshot(kube: Kube, namespace: str) -> dict[str, Any]:
    pods = await kube.list(PODS, namespace)
    claims = await kube.list(RESOURCE_CLAIMS, namespace)
    n = Normaliser(pods, claims)
    events = sorted(
        {
            (
                e.get("type"),
                e.get("reason"),
                e["involvedObject"].get("kind"),
                n.name(e["involvedObject"].get("name", "")),
            )
            for e in await kube.list(EVENTS, namespace)
            if (e.get("source") or {}).get("component") in EVENT_COMPONENTS
            or e.get("reportingComponent") in EVENT_COMPONENTS
        }
    )
    return {
        "claims": sorted((_claim(c, n) for c in claims), key=lambda c: c["name"]),
        "pods": sorted((_pod(p, n) for p in pods), key=lambda p: p["name"]),
        "events": events,
    }


async def settled_snapshot(kube: Kube, namespace: str, quiet: float = 1.5, timeout: float = 30) -> dict[str, Any]:
    """A snapshot that stayed the same for ``quiet`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    previous = await snapshot(kube, namespace)
    while True:
        await asyncio.sleep(quiet)
        current = await snapshot(kube, namespace)
        if current == previous or loop.time() > deadline:
            return current
        previous = current


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Readable differences between two snapshots."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            out += differences(a.get(key), b.get(key), f"{path}.{key}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += differences(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: upstream={a!r} ours={b!r}"]
