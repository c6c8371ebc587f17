"""What NodePrepareResources decides for one claim (pure): which allocated devices this plugin
prepares, or why it cannot. Every problem is an error for that claim only, never for the call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.dra.resourceclaim import allocation_results, is_allocated
from . import opaque_config
from .checkpoint import PreparedClaim


@dataclass(frozen=True)
class Allocation:
    request: str  # the top-level request name
    pool: str
    device: str
    share_id: str | None
    admin_access: bool
    config: dict[str, Any] | None = None  # the merged opaque configuration of its request
    allocated_as: str = ""  # the request as allocated: "gpus/large" for a subrequest


class PrepareError(Exception):
    pass


def allocated_node(claim: dict[str, Any]) -> str | None:
    """The node a node-local allocation is for (the scheduler writes a metadata.name field selector)."""
    selector = ((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return field["values"][0]
    return None


def plan_claim(
    claim: dict[str, Any] | None,
    requested: dict[str, str],
    *,
    driver: str,
    node: str,
    known_devices: set[str],
    prepared: dict[str, PreparedClaim],
) -> list[Allocation]:
    ref = f"{requested['namespace']}/{requested['name']}"
    if claim is None:
        raise PrepareError(f"ResourceClaim {ref} does not exist")
    uid = claim["metadata"]["uid"]
    if uid != requested["uid"]:
        raise PrepareError(f"ResourceClaim {ref} got replaced: it has UID {uid}, kubelet asked for {requested['uid']}")
    if not is_allocated(claim):
        raise PrepareError(f"ResourceClaim {ref} is not allocated")
    target = allocated_node(claim)
    if target is not None and target != node:
        raise PrepareError(f"ResourceClaim {ref} is allocated on node {target}, not on this node {node}")
    results = [r for r in allocation_results(claim) if r.get("driver") == driver]
    if not results:
        raise PrepareError(f"ResourceClaim {ref} has no device of driver {driver} allocated")
    try:
        configs = opaque_config.claim_configs(claim, driver)
    except opaque_config.ConfigError as e:
        raise PrepareError(str(e)) from None
    in_use = {
        (d.pool, d.device): c
        for c in prepared.values()
        if c.uid != uid
        for d in c.devices
        if not d.adminAccess and not d.shareID
    }
    allocations = []
    for result in results:
        if result.get("pool") != node or result.get("device") not in known_devices:
            raise PrepareError(
                f"ResourceClaim {ref}: device {result.get('pool')}/{result.get('device')} "
                f"is not a device of driver {driver} on node {node}"
            )
        admin = bool(result.get("adminAccess"))
        share = result.get("shareID")
        other = in_use.get((result["pool"], result["device"]))
        # The last line of defence against double use: exclusive devices belong to one claim.
        if other is not None and not admin and not share:
            raise PrepareError(
                f"ResourceClaim {ref}: device {result['device']} is already prepared for "
                f"ResourceClaim {other.namespace}/{other.name} ({other.uid}), which kubelet has not "
                f"unprepared yet (its Pod may still be stopping on this node, e.g. after a forced "
                f"deletion); kubelet retries this prepare"
            )
        allocations.append(
            Allocation(
                request=result["request"].split("/", 1)[0],
                pool=result["pool"],
                device=result["device"],
                share_id=share,
                admin_access=admin,
                config=opaque_config.for_request(configs, result["request"]),
                allocated_as=result["request"],
            )
        )
    return allocations
