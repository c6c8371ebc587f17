"""What ``explain`` reads from the cluster (the only I/O of the command)."""

from __future__ import annotations

import asyncio

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
from .story import World


async def world(kube: Kube, namespace: str | None) -> World:
    """Everything explain needs: the namespace's (or all) Pods, templates and Events; every
    claim (other namespaces' allocations hold devices too), class, slice and Node."""
    pods, claims, templates, classes, slices, nodes, namespaces, events = await asyncio.gather(
        kube.list(PODS, namespace),
        kube.list(RESOURCE_CLAIMS),
        kube.list(RESOURCE_CLAIM_TEMPLATES, namespace),
        kube.list(DEVICE_CLASSES),
        kube.list(RESOURCE_SLICES),
        kube.list(NODES),
        kube.list(NAMESPACES),
        kube.list(EVENTS, namespace),
    )
    return World(pods, claims, templates, classes, slices, nodes, namespaces, events)
