"""How the node's devices are cut into ResourceSlices (pure)."""

from __future__ import annotations

from typing import Any

MAX_DEVICES = 128
# The API server allows only 64 devices per slice once a device has taints or consumes counters.
MAX_DEVICES_ADVANCED = 64
MAX_COUNTER_SETS = 8


def uses_advanced_features(device: dict[str, Any]) -> bool:
    return bool(device.get("taints") or device.get("consumesCounters"))


def split_into_slices(
    devices: list[dict[str, Any]], counter_sets: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Slice specs (``devices`` or ``sharedCounters``, never both, as v1 requires) in
    publishing order: counter sets first, then devices in the backend's order.

    One limit applies to the whole pool (64 when any device has taints or consumes counters,
    else 128), so that slice contents are predictable from the inventory alone.
    """
    specs: list[dict[str, Any]] = []
    counter_sets = counter_sets or []
    for i in range(0, len(counter_sets), MAX_COUNTER_SETS):
        specs.append({"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS]})
    limit = MAX_DEVICES_ADVANCED if any(uses_advanced_features(d) for d in devices) else MAX_DEVICES
    for i in range(0, len(devices), limit):
        specs.append({"devices": devices[i : i + limit]})
    return specs
