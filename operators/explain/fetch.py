"""What ``explain`` reads from the cluster (the only I/O of the command)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ..core.api.kube import Kube
from ..core.api.resources import (
    DEVICE_CLASSES,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)
from ..core.dra.resourceclaim import pod_claim_names
from .story import World


async def world(kube: Kube, namespace: str | None, targets: Sequence[tuple[str, str]] = ()) -> World:
    """Everything explain needs: every claim (other namespaces' allocations hold devices too),
    class, slice and Node; the namespace's templates; and its Pods and Events: all of them for
    "every pending Pod", only the named ones and the Events about them and their claims for
    ``targets`` (("pod" | "claim", name) in ``namespace``), which at 10,000 Pods in a namespace
    saves reading every Pod and every Event there."""
    shared = asyncio.gather(
        kube.list(RESOURCE_CLAIMS),
        kube.list(RESOURCE_CLAIM_TEMPLATES, namespace),
        kube.list(DEVICE_CLASSES),
        kube.list(RESOURCE_SLICES),
        kube.list(NODES),
        kube.list(NAMESPACES),
    )
    if not targets:
        (claims, templates, classes, slices, nodes, namespaces), pods, events = await asyncio.gather(
            shared, kube.list(PODS, namespace), kube.list(EVENTS, namespace)
        )
        return World(pods, claims, templates, classes, slices, nodes, namespaces, events)
    pod_names = sorted({name for kind, name in targets if kind == "pod"})
    (claims, templates, classes, slices, nodes, namespaces), found = await asyncio.gather(
        shared, asyncio.gather(*(kube.get_or_none(PODS, name, namespace) for name in pod_names))
    )
    pods = [p for p in found if p is not None]
    claims_named = {name for kind, name in targets if kind == "claim"}
    about = set(pod_names) | claims_named | {name for pod in pods for name, _ in pod_claim_names(pod)}
    lists = await asyncio.gather(
        *(kube.list(EVENTS, namespace, field_selector=f"involvedObject.name={name}") for name in sorted(about))
    )
    events = [e for found_events in lists for e in found_events]
    return World(pods, claims, templates, classes, slices, nodes, namespaces, events)
