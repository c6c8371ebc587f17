"""Device health as taints (pure): events in, taints out, and recovery after a quiet period.

Taints follow NVIDIA's DRA driver: ``<driver>/xid`` with the XID as value, effect NoSchedule,
or None for XIDs known to be application errors rather than hardware faults; a lost GPU gets
``<driver>/gpu-lost``. ECC errors: double-bit ``<driver>/ecc=double-bit`` NoSchedule,
single-bit ``<driver>/ecc=single-bit`` None (informational).

What no other driver does: a tainted device loses its taints when it passes its health check
again, has had no event for ``quiet_period`` (counted from what this agent saw: an adopted taint's
quiet period starts when the agent starts, not at its old ``timeAdded``), and every taint it has may
recover by itself: XIDs per NVIDIA's catalogue (``xid_policy``), single-bit ECC, a lost GPU that
answers again. Double-bit ECC (XID 48's workflow) and XIDs that need a GPU reset stay until a
reboot: taints of that kind added before the node's boot (``booted_at``) are not adopted.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from ..core.dra.metatime import format_time, parse_time, utcnow
from . import xid_policy

# Application-caused XIDs (NVIDIA's driver ignores them for health): graphics engine exception,
# GPU memory page fault, GPU stopped processing, preemptive cleanup, video processor exception,
# context switch timeout.
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)

XID, LOST, ECC = "xid", "gpu-lost", "ecc"
NO_SCHEDULE, NONE = "NoSchedule", "None"


@dataclass(frozen=True)
class HealthEvent:
    device: str
    kind: str  # XID, LOST or ECC
    value: str = ""  # the XID number, or "double-bit"/"single-bit"
    time: datetime.datetime = field(default_factory=utcnow)


@dataclass
class _DeviceHealth:
    taints: dict[str, dict] = field(default_factory=dict)  # by taint key
    last_event: datetime.datetime | None = None


class HealthTracker:
    def __init__(
        self,
        driver: str,
        ignored_xids: tuple[int, ...] = DEFAULT_IGNORED_XIDS,
        quiet_period: float = 300.0,
        booted_at: datetime.datetime | None = None,
    ):
        self.driver = driver
        self.booted_at = booted_at
        self.ignored_xids = set(ignored_xids)
        self.quiet_period = datetime.timedelta(seconds=quiet_period)
        self._devices: dict[str, _DeviceHealth] = {}

    def _effect(self, event: HealthEvent) -> str:
        if event.kind == XID:
            return NONE if int(event.value) in self.ignored_xids else NO_SCHEDULE
        if event.kind == ECC:
            return NO_SCHEDULE if event.value == "double-bit" else NONE
        return NO_SCHEDULE

    def recovers(self, taint: dict) -> bool:
        """Whether this taint may go by itself (a passing check and a quiet period), or needs a reset."""
        kind = taint["key"][len(self.driver) + 1 :]
        if kind == XID:
            try:
                return xid_policy.recovers(int(taint.get("value") or 0))
            except ValueError:
                return False
        if kind == ECC:
            return taint.get("value") != "double-bit"
        return kind == LOST

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
        state.taints[key] = {"key": key, "value": event.value, "effect": effect, "timeAdded": format_time(event.time)}
        return True

    def recover(self, passes_check, now: datetime.datetime | None = None) -> list[str]:
        """Untaint devices that pass ``passes_check(device)`` and were quiet long enough;
        return their names."""
        now = now or utcnow()
        recovered = []
        for device, state in list(self._devices.items()):
            if not state.taints or (state.last_event and now - state.last_event < self.quiet_period):
                continue
            if not all(self.recovers(t) for t in state.taints.values()):
                continue  # needs a GPU reset: never untainted by waiting
            if passes_check(device):
                del self._devices[device]
                recovered.append(device)
        return recovered

    def taints(self, device: str) -> list[dict]:
        state = self._devices.get(device)
        return [dict(t) for t in sorted(state.taints.values(), key=lambda t: t["key"])] if state else []

    def tainted_devices(self) -> list[str]:
        return sorted(d for d, s in self._devices.items() if s.taints)

    def adopt(self, published_devices: list[dict], now: datetime.datetime | None = None) -> None:
        """Take over the health taints already published (an agent restart keeps them, with their
        timeAdded). Their quiet period counts from ``now``, the adoption: this agent has not seen
        the device quiet before. Taints that needed a reset and predate the node's boot are dropped."""
        now = now or utcnow()
        prefix = f"{self.driver}/"
        for device in published_devices:
            for taint in device.get("taints") or []:
                if not taint.get("key", "").startswith(prefix) or not taint.get("timeAdded"):
                    continue
                adopted = {k: taint.get(k, "") for k in ("key", "value", "effect", "timeAdded")}
                if (
                    self.booted_at
                    and (added_at := parse_time(taint["timeAdded"])) is not None  # never None: timeAdded is set
                    and added_at < self.booted_at
                    and not self.recovers(adopted)
                ):
                    continue  # the reboot since then reset the GPU
                state = self._devices.setdefault(device["name"], _DeviceHealth())
                state.taints[taint["key"]] = adopted
                state.last_event = max(filter(None, (state.last_event, now)))

    def apply(self, devices: list[dict]) -> list[dict]:
        """The devices with their health taints added (devices without any are unchanged)."""
        out = []
        for device in devices:
            taints = self.taints(device["name"])
            if taints:
                device = dict(device, taints=[*(device.get("taints") or []), *taints])
            out.append(device)
        return out
