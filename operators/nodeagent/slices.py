"""How the node's devices are cut into ResourceSlices (pure)."""

from __future__ import annotations

from typing import Any

from .support import SliceSupport

MAX_DEVICES = 128
# The API server allows only 64 devices per slice once a device has taints or consumes counters.
MAX_DEVICES_ADVANCED = 64
MAX_COUNTER_SETS = 8
# 1.34, counter sets beside their devices: the counters of all sets in one slice
# (v1.34 ``ResourceSliceMaxSharedCounters``).
MAX_COUNTERS_INLINE = 32


def uses_advanced_features(device: dict[str, Any]) -> bool:
    return bool(device.get("taints") or device.get("consumesCounters"))


def split_into_slices(
    devices: list[dict[str, Any]], counter_sets: list[dict[str, Any]] | None = None, *, inline: bool = False
) -> list[dict[str, Any]]:
    """Slice specs in publishing order. By default (1.35 and later) ``devices`` or
    ``sharedCounters``, never both: counter sets first, then devices in the backend's order.
    ``inline`` (1.34): each group of devices sharing counter sets in one slice with those sets,
    then the devices that consume no counters.

    One device limit applies to the whole pool (64 when any device has taints or consumes
    counters, else 128), so that slice contents are predictable from the inventory alone.
    """
    counter_sets = counter_sets or []
    limit = MAX_DEVICES_ADVANCED if any(uses_advanced_features(d) for d in devices) else MAX_DEVICES
    specs: list[dict[str, Any]] = []
    if inline:
        groups, devices = counter_groups(devices, counter_sets)
        for group_sets, group_devices in groups:
            last = specs[-1] if specs else None
            if (
                last is not None
                and len(last["devices"]) + len(group_devices) <= limit
                and counter_count(last["sharedCounters"]) + counter_count(group_sets) <= MAX_COUNTERS_INLINE
            ):
                last["sharedCounters"] += group_sets
                last["devices"] += group_devices
            else:
                specs.append({"sharedCounters": list(group_sets), "devices": list(group_devices)})
    else:
        for i in range(0, len(counter_sets), MAX_COUNTER_SETS):
            specs.append({"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS]})
    for i in range(0, len(devices), limit):
        specs.append({"devices": devices[i : i + limit]})
    return specs


def counter_count(counter_sets: list[dict[str, Any]]) -> int:
    return sum(len(s.get("counters") or {}) for s in counter_sets)


def counter_groups(
    devices: list[dict[str, Any]], counter_sets: list[dict[str, Any]]
) -> tuple[list[tuple[list[dict[str, Any]], list[dict[str, Any]]]], list[dict[str, Any]]]:
    """([(counter sets, the devices consuming them)], the devices consuming none): sets that one
    device consumes together are in one group, in the order devices first use them."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    for device in devices:
        names = [c["counterSet"] for c in device.get("consumesCounters") or []]
        for other in names[1:]:
            parent[root(other)] = root(names[0])
    groups: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    plain = []
    for device in devices:
        consumed = device.get("consumesCounters") or []
        if not consumed:
            plain.append(device)
            continue
        groups.setdefault(root(consumed[0]["counterSet"]), ([], []))[1].append(device)
    for counter_set in counter_sets:
        group = groups.get(root(counter_set["name"]))
        if group is not None:  # a set nothing consumes is not published
            group[0].append(counter_set)
    return list(groups.values()), plain


def fit_to_cluster(
    devices: list[dict[str, Any]], counter_sets: list[dict[str, Any]], support: SliceSupport
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    """(devices, counter sets, problems): what of a valid inventory this cluster can hold.
    Shared devices lose what makes them shareable where it is dropped; partitions go where it
    drops counters (they would be allocated without them, overlapping ones together); in 1.34's
    layout, a group of sets too large for one slice goes."""
    devices, problems = _fit_shared(devices, support)
    kept, sets, more = _fit_partitions(devices, counter_sets, support)
    return kept, sets, problems + more


def _fit_shared(devices: list[dict[str, Any]], support: SliceSupport) -> tuple[list[dict[str, Any]], list[str]]:
    """Where the API server drops ``allowMultipleAllocations``, each shared device is published
    as the whole device the cluster will store (its capacities without request policies, which
    validation refuses on a device that is not shared)."""
    shared = [d for d in devices if d.get("allowMultipleAllocations")]
    if support.shareable or not shared:
        return devices, []
    whole = []
    for device in devices:
        if device.get("allowMultipleAllocations"):
            device = {k: v for k, v in device.items() if k != "allowMultipleAllocations"}
            if device.get("capacity"):
                device["capacity"] = {
                    name: {k: v for k, v in value.items() if k != "requestPolicy"}
                    for name, value in device["capacity"].items()
                }
        whole.append(device)
    return whole, [
        f"{len(shared)} shared device(s) published whole, for one claim at a time: the API server drops "
        "allowMultipleAllocations (feature gate DRAConsumableCapacity is off)"
    ]


def _fit_partitions(
    devices: list[dict[str, Any]], counter_sets: list[dict[str, Any]], support: SliceSupport
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]:
    if not support.partitionable:
        kept = [d for d in devices if not d.get("consumesCounters")]
        problems = []
        if len(kept) < len(devices):
            problems.append(
                f"{len(devices) - len(kept)} device(s) consuming shared counters not published: the API "
                "server drops counters (feature gate DRAPartitionableDevices is off); whole devices still are"
            )
        return kept, [], problems
    if not support.counters_inline:
        return devices, counter_sets, []
    limit = MAX_DEVICES_ADVANCED
    groups, _ = counter_groups(devices, counter_sets)
    dropped: set[str] = set()
    problems = []
    for group_sets, group_devices in groups:
        if counter_count(group_sets) > MAX_COUNTERS_INLINE or len(group_devices) > limit:
            dropped.update(d["name"] for d in group_devices)
            problems.append(
                f"devices {', '.join(d['name'] for d in group_devices[:3])}"
                f"{'…' if len(group_devices) > 3 else ''} not published: on Kubernetes 1.34 their counter "
                f"sets ({counter_count(group_sets)} counters) and they ({len(group_devices)}) must fit in one "
                f"slice (at most {MAX_COUNTERS_INLINE} counters, {limit} devices)"
            )
    if not dropped:
        return devices, counter_sets, []
    used = {c["counterSet"] for d in devices if d["name"] not in dropped for c in d.get("consumesCounters") or []}
    kept_sets = [s for s in counter_sets if s["name"] in used]
    return [d for d in devices if d["name"] not in dropped], kept_sets, problems
