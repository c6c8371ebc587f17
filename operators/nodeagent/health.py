"""Device health as taints (pure): events in, taints out, and recovery after a quiet period.

Taints follow NVIDIA's DRA driver: ``<driver>/xid`` with the XID as value, effect NoSchedule,
or None for XIDs known to be application errors rather than hardware faults; a lost GPU gets
``<driver>/gpu-lost``. ECC errors: double-bit ``<driver>/ecc=double-bit`` NoSchedule,
single-bit ``<driver>/ecc=single-bit`` None (informational).

What no other driver does: a tainted device that passes its health check again and has had no
event for ``quiet_period`` loses its taints.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from ..core.metatime import format_time, parse_time, utcnow

# Application-caused XIDs (NVIDIA's driver ignores them for health): graphics engine exception,
# GPU memory page fault, GPU stopped processing, preemptive cleanup, video processor exception,
# context switch timeout.
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)

XID, LOST, ECC = "xid", "gpu-lost", "ecc"
NO_SCHEDULE, NONE = "NoSchedule", "None"


@dataclass(frozen=True)
class HealthEvent:
    device: str
    kind: str           # XID, LOST or ECC
    value: str = ""     # the XID number, or "double-bit"/"single-bit"
    time: datetime.datetime = field(default_factory=utcnow)


@dataclass
class _DeviceHealth:
    taints: dict[str, dict] = field(default_factory=dict)  # by taint key
    last_event: datetime.datetime | None = None


class HealthTracker:
    def __init__(self, driver: str, ignored_xids: tuple[int, ...] = DEFAULT_IGNORED_XIDS,
                 quiet_period: float = 300.0):
        self.driver = driver
        self.ignored_xids = set(ignored_xids)
        self.quiet_period = datetime.timedelta(seconds=quiet_period)
        self._devices: dict[str, _DeviceHealth] = {}

    def _effect(self, event: HealthEvent) -> str:
        if event.kind == XID:
            return NONE if int(event.value) in self.ignored_xids else NO_SCHEDULE
        if event.kind == ECC:
            return NO_SCHEDULE if event.value == "double-bit" else NONE
        return NO_SCHEDULE

    def record(self, event: HealthEvent) -> bool:
        """Apply an event; True when the device's taints changed."""
        key = f"{self.driver}/{event.kind}"
        effect = self._effect(event)
        state = self._devices.setdefault(event.device, _DeviceHealth())
        state.last_event = max(filter(None, (state.last_event, event.time)))
        current = state.taints.get(key)
        if current is not None:
            if current["value"] == event.value and current["effect"] == effect:
                return False  # the same fault again: timeAdded stays
            if current["effect"] == NO_SCHEDULE and effect == NONE:
                return False  # an informational event never weakens a fault
        state.taints[key] = {"key": key, "value": event.value, "effect": effect,
                             "timeAdded": format_time(event.time)}
        return True

    def recover(self, passes_check, now: datetime.datetime | None = None) -> list[str]:
        """Untaint devices that pass ``passes_check(device)`` and were quiet long enough;
        return their names."""
        now = now or utcnow()
        recovered = []
        for device, state in list(self._devices.items()):
            if not state.taints or (state.last_event and now - state.last_event < self.quiet_period):
                continue
            if passes_check(device):
                del self._devices[device]
                recovered.append(device)
        return recovered

    def taints(self, device: str) -> list[dict]:
        state = self._devices.get(device)
        return [dict(t) for t in sorted(state.taints.values(), key=lambda t: t["key"])] if state else []

    def tainted_devices(self) -> list[str]:
        return sorted(d for d, s in self._devices.items() if s.taints)

    def adopt(self, published_devices: list[dict]) -> None:
        """Take over the health taints already published (an agent restart keeps them, with
        their timeAdded, and their quiet period counts from that time)."""
        prefix = f"{self.driver}/"
        for device in published_devices:
            for taint in device.get("taints") or []:
                if not taint.get("key", "").startswith(prefix) or not taint.get("timeAdded"):
                    continue
                added = parse_time(taint["timeAdded"])
                state = self._devices.setdefault(device["name"], _DeviceHealth())
                state.taints[taint["key"]] = {k: taint.get(k, "") for k in ("key", "value", "effect", "timeAdded")}
                state.last_event = max(filter(None, (state.last_event, added)))

    def apply(self, devices: list[dict]) -> list[dict]:
        """The devices with their health taints added (devices without any are unchanged)."""
        out = []
        for device in devices:
            taints = self.taints(device["name"])
            if taints:
                device = dict(device, taints=[*(device.get("taints") or []), *taints])
            out.append(device)
        return out
