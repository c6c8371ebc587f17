"""Which feature gates the cluster's API server runs with, read from its own ``/metrics``.

kube-apiserver exports every gate as ``kubernetes_feature_enabled{name="...",stage="..."} 0|1``
(k8s.io/component-base/metrics/prometheus/feature). Gates that only change what a controller
does (DRAWorkloadResourceClaims) leave no other trace in discovery or OpenAPI: the API server
silently drops the fields of a gate that is off, so its metric is the one place to ask. A
cluster runs its components with the same gates; the API server's answer stands for all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..dra import podgroup as pg
from .kube import ApiError, Kube

WORKLOAD_CLAIMS_GATE = "DRAWorkloadResourceClaims"
DEVICE_TAINTS_GATE = "DRADeviceTaints"
DEVICE_TAINT_RULES_GATE = "DRADeviceTaintRules"
_UNREAD: dict[str, bool] = {}  # detect_workload's default: read /metrics itself

_LINE = re.compile(r"^kubernetes_feature_enabled\{([^}]*)\}\s+(\S+)", re.M)
_NAME = re.compile(r'(?:^|,)name="([^"]*)"')


def parse_feature_gates(metrics_text: str) -> dict[str, bool]:
    """``{gate: enabled}`` from a Prometheus text exposition."""
    gates = {}
    for labels, value in _LINE.findall(metrics_text):
        name = _NAME.search(labels)
        if name:
            try:
                gates[name.group(1)] = float(value) == 1.0
            except ValueError:
                continue
    return gates


async def apiserver_feature_gates(kube: Kube) -> dict[str, bool] | None:
    """The API server's gates, or None when ``/metrics`` may not be read (RBAC:
    ``nonResourceURLs: [/metrics], verbs: [get]``) or does not list them."""
    try:
        text = await kube.request("GET", "/metrics", raw=True)
    except ApiError as e:
        if e.status in (401, 403, 404):
            return None
        raise
    return parse_feature_gates(text) or None


def device_taint_rules_on(gates: dict[str, bool]) -> bool:
    """Whether kube-scheduler and kube-controller-manager honour DeviceTaintRules. 1.34 has no
    DRADeviceTaintRules gate: its rules go with DRADeviceTaints (v1.34 ``device_taint_eviction.go``
    watches them whenever the controller runs)."""
    return bool(gates.get(DEVICE_TAINT_RULES_GATE, gates.get(DEVICE_TAINTS_GATE, False)))


@dataclass(frozen=True)
class Workload:
    """What the cluster does with PodGroups (KEP-5729)."""

    generic_workload: bool  # GenericWorkload: PodGroups served at the version upstream uses
    workload_claims: bool  # DRAWorkloadResourceClaims: a PodGroup's claims are shared, reserved for it
    gates_known: bool  # False: /metrics not readable, the gate counted as off (1.37's default)


async def detect_workload(kube: Kube, gates: dict[str, bool] | None = _UNREAD) -> Workload:
    """As kube-controller-manager decides with its own gates: PodGroups must be served, and the
    API server must run with DRAWorkloadResourceClaims (it drops ``spec.resourceClaims`` of new
    PodGroups when off). ``gates``: already read (None: unreadable)."""
    generic_workload = pg.API_VERSION.split("/")[1] in await kube.served_versions(pg.GROUP, pg.RESOURCE)
    if gates is _UNREAD:
        gates = await apiserver_feature_gates(kube)
    return Workload(
        generic_workload=generic_workload,
        workload_claims=generic_workload and bool((gates or {}).get(WORKLOAD_CLAIMS_GATE)),
        gates_known=gates is not None,
    )
