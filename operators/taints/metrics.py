"""The taints operator's metrics, named as kube-controller-manager's
device-taint-eviction-controller names them (pkg/controller/devicetainteviction/metrics, v1.37.1)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# 5 ms to 4 min, as upstream.
DELETION_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 2.5, 10, 30, 60, 120, 180, 240)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.deletions = Counter(
            "device_taint_eviction_controller_pod_deletions",
            "Total number of Pods deleted by DeviceTaintEvictionController since its start.",
            registry=self.registry,
        )
        self.deletion_duration = Histogram(
            "device_taint_eviction_controller_pod_deletion_duration_seconds",
            "Latency, in seconds, between the time when a device taint effect has been activated "
            "and a Pod's deletion via DeviceTaintEvictionController.",
            buckets=DELETION_BUCKETS,
            registry=self.registry,
        )

    def pod_deleted(self, latency: float) -> None:
        self.deletions.inc()
        self.deletion_duration.observe(latency)
