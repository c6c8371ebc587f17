"""``status.devices`` of a prepared claim (pure): the agent's data about each device it prepared,
written by server-side apply with the driver's name as field manager, as dra-example-driver
does (``status.devices`` is a list-map keyed by driver, pool, device and shareID, so the binding
operator's conditions on the same entries stay its own).

The API server lets a node's plugin write this only for claims allocated on its own node: with
``DRAResourceClaimGranularStatusAuthorization`` (beta, on in 1.37) a status update that touches
``status.devices`` needs the synthetic ``resourceclaims/driver`` subresource with the verb
``associated-node:patch``/``associated-node:update`` for that driver, which matches only when the
requester's ServiceAccount token is bound to the node of the allocation
(k8s.io/kubernetes v1.37.1 pkg/registry/resource/utils.go ``AuthorizedForDeviceStatus``: the
associated-node verb is tried only when the requester's node is the allocation's, then
arbitrary-node). The kustomize RBAC grants the associated-node verbs only.
"""

from __future__ import annotations

from typing import Any

from .checkpoint import PreparedDevice

API_VERSION = "resource.k8s.io/v1"
# Attributes worth a user's look (NVIDIA's and the simulated backend's names), as plain values.
DATA_ATTRIBUTES = (
    "uuid",
    "productName",
    "type",
    "brand",
    "architecture",
    "driverVersion",
    "parentUUID",
    "profile",
    "index",
)


def device_data(device: dict[str, Any] | None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for name in DATA_ATTRIBUTES:
        value = ((device or {}).get("attributes") or {}).get(name)
        if isinstance(value, dict) and value:
            data[name] = next(iter(value.values()))
    return data


def status_apply(
    claim: dict[str, Any], driver: str, devices: list[PreparedDevice], published: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """The apply body: one entry per prepared device, with its data and CDI device IDs."""
    entries = []
    for d in devices:
        entry: dict[str, Any] = {
            "driver": driver,
            "pool": d.pool,
            "device": d.device,
            "data": {**device_data(published.get(d.device)), "cdiDeviceIDs": d.cdiDeviceIDs},
        }
        if d.shareID:
            entry["shareID"] = d.shareID
        entries.append(entry)
    meta = claim["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]},
        "status": {"devices": entries},
    }
