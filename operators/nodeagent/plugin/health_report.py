"""What the agent tells kubelet about its devices' health (pure): one entry per published device,
for kubelet's DRAResourceHealth stream (k8s.io/kubelet/pkg/apis/dra-health, v1 and v1alpha1).

A device is Unhealthy while the agent's health tracker holds a taint that keeps Pods off it
(NoSchedule, NoExecute: an XID that needs attention, double-bit ECC, a lost GPU); taints with
effect None (application XIDs, single-bit ECC) are informational, so the device stays Healthy
and the message says what happened. kubelet shows the result per container in
``status.containerStatuses[].allocatedResourcesStatus`` (``Healthy``/``Unhealthy``; ``Unknown``
when a report is older than the device's timeout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

HEALTHY, UNHEALTHY = "HEALTHY", "UNHEALTHY"
MAX_MESSAGE = 1024  # kubelet cuts longer messages (dra-health api.proto, DeviceHealth.message)


@dataclass(frozen=True)
class DeviceReport:
    pool: str
    device: str
    health: str  # HEALTHY or UNHEALTHY
    message: str = ""


def _describe(taint: dict) -> str:
    kind = taint["key"].split("/", 1)[-1]
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{kind}{value} (effect {taint.get('effect')}, since {taint.get('timeAdded')})"


def device_reports(devices: list[str], pool: str, taints_of: Callable[[str], list[dict]]) -> list[DeviceReport]:
    """``devices``: published device names; ``taints_of(device)``: the health tracker's taints."""
    reports = []
    for device in sorted(devices):
        taints = taints_of(device)
        faults = [t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute")]
        if faults:
            message = "; ".join(_describe(t) for t in faults)
            reports.append(DeviceReport(pool, device, UNHEALTHY, message[:MAX_MESSAGE]))
        elif taints:
            message = "informational: " + "; ".join(_describe(t) for t in taints)
            reports.append(DeviceReport(pool, device, HEALTHY, message[:MAX_MESSAGE]))
        else:
            reports.append(DeviceReport(pool, device, HEALTHY))
    return reports
