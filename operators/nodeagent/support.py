"""What the cluster keeps of a ResourceSlice, asked once by dry-run creates (no write).

Three things differ between the Kubernetes releases we support, and between clusters of one
release with different feature gates; none of them shows in discovery:

- DRAPartitionableDevices off (1.34 and 1.35 by default): the API server silently drops
  ``sharedCounters`` and ``consumesCounters`` (``resourceslice/strategy.go``,
  ``dropDisabledDRAPartitionableDevicesFields``). Partitions published anyway would be allocated
  without their counters, overlapping ones together, so they are not published.
- Where counter sets live: 1.34 demands them in the slice of the devices that consume them
  ("must reference a counterSet defined in the ResourceSlice sharedCounters", v1.34
  ``validation.go`` ``validateDevice``); 1.35 and later demand a slice of their own ("only one of
  sharedCounters or devices").
- DRADeviceTaints off (1.34 and 1.35 by default): device taints are dropped, so an unhealthy
  device is withdrawn from its slice instead of tainted.
- DRAConsumableCapacity off (1.34 and 1.35 by default): ``allowMultipleAllocations`` and each
  capacity's ``requestPolicy`` are dropped (``dropDisabledDRAConsumableCapacityFields``), so a
  shared device is published as a whole device that one claim at a time gets; publishing the
  fields anyway would rewrite the slice forever, since the stored one never matches.

Asking the server what it does is exact on every release and on managed clusters with their
own gates, and needs nothing but the ``create`` the agent has anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.api.kube import ApiError, Kube
from ..core.api.resources import RESOURCE_SLICES

_SET = "probe-counters"
_TAINT_KEY = "dra-operators.dev/probe"


@dataclass(frozen=True)
class SliceSupport:
    partitionable: bool = True  # sharedCounters and consumesCounters are kept
    counters_inline: bool = False  # counter sets go into the slice of the devices using them (1.34)
    taints: bool = True  # device taints are kept
    shareable: bool = True  # allowMultipleAllocations and capacity request policies are kept
    known: bool = True  # False: the probe could not tell; the newest release's rules are assumed

    def describe(self) -> str:
        if not self.known:
            return "unknown (the dry-run probe failed): assuming partitionable devices and device taints"
        if not self.partitionable:
            counters = "partitions not published (the API server drops counters: DRAPartitionableDevices off)"
        elif self.counters_inline:
            counters = "partitions with their counter sets in the same slice (Kubernetes 1.34)"
        else:
            counters = "partitions with counter sets in slices of their own"
        taints = (
            "unhealthy devices tainted"
            if self.taints
            else "unhealthy devices withdrawn (the API server drops device taints: DRADeviceTaints off)"
        )
        shared = (
            "shared devices shared"
            if self.shareable
            else "shared devices published whole, one claim at a time (the API server drops "
            "allowMultipleAllocations: DRAConsumableCapacity off)"
        )
        return f"{counters}; {taints}; {shared}"


def build_probe(driver: str, node_name: str, inline: bool) -> dict[str, Any]:
    """A slice with one shareable device that consumes a counter and carries a taint; with
    ``inline`` the counter set is in the same slice (1.34's layout), else it is referenced from
    elsewhere."""
    device: dict[str, Any] = {
        "name": "probe",
        "allowMultipleAllocations": True,
        "consumesCounters": [{"counterSet": _SET, "counters": {"memory": {"value": "1"}}}],
        "taints": [{"key": _TAINT_KEY, "effect": "NoSchedule"}],
    }
    spec: dict[str, Any] = {
        "driver": driver,
        "nodeName": node_name,
        "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
        "devices": [device],
    }
    if inline:
        spec["sharedCounters"] = [{"name": _SET, "counters": {"memory": {"value": "1"}}}]
    return {
        "apiVersion": RESOURCE_SLICES.group_version,
        "kind": "ResourceSlice",
        "metadata": {"generateName": f"{node_name}-{driver}-probe-"},
        "spec": spec,
    }


def read_probe(answer: dict[str, Any], inline: bool) -> SliceSupport:
    """What an accepted probe says: which of its fields the server kept."""
    devices = answer.get("spec", {}).get("devices") or [{}]
    partitionable = bool(devices[0].get("consumesCounters"))
    return SliceSupport(
        partitionable=partitionable,
        counters_inline=inline and partitionable,
        taints=bool(devices[0].get("taints")),
        shareable=bool(devices[0].get("allowMultipleAllocations")),
    )


async def probe_slice_support(kube: Kube, driver: str, node_name: str) -> tuple[SliceSupport, str | None]:
    """The cluster's rules, and why they are unknown when they are. The layout of 1.35 and later
    is tried first; 1.34 with partitionable devices on refuses it as invalid (422)."""
    refusals = []
    for inline in (False, True):
        try:
            answer = await kube.create(RESOURCE_SLICES, build_probe(driver, node_name, inline), dry_run=True)
        except ApiError as e:
            if not e.invalid:
                return SliceSupport(known=False), f"dry-run create of a ResourceSlice: {e}"
            refusals.append(str(e))
            continue
        return read_probe(answer, inline), None
    return SliceSupport(known=False), "the API server refused both slice layouts: " + " / ".join(refusals)
