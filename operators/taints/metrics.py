"""The taints operator's metrics, named as kube-controller-manager's
device-taint-eviction-controller names them (pkg/controller/devicetainteviction/metrics, v1.37.1);
ours (prefixed dra_operators_taints_) for the outcomes of evictions, which upstream does not count."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from . import decisions as d


class _BlockedCollector(Collector):
    def __init__(self, parked: Callable[[], Mapping[str, Iterable[str]]]):
        self._parked = parked

    def collect(self):
        yield GaugeMetricFamily(
            "dra_operators_taints_pods_blocked_by_pdb",
            "Pods due for eviction that wait because a PodDisruptionBudget allows no disruption now",
            value=d.blocked_pods(self._parked()),
        )


# 5 ms to 4 min, as upstream.
# (method, outcome) of evictions (controller.py): a Pod deletion is never "blocked" nor given up on.
EVICTION_SERIES = tuple((d.EVICTION_API, o) for o in (d.EVICTED, d.BLOCKED, d.GAVE_UP, d.FAILED)) + tuple(
    (d.DELETE, o) for o in (d.EVICTED, d.FAILED)
)
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

        self.evictions = Counter(
            "dra_operators_taints_evictions",
            "Pod evictions by method (eviction_api, delete) and outcome (evicted; blocked: the "
            "Eviction API answered 429, a PodDisruptionBudget refused; gave_up: still refused after "
            "the longest wait, so the Pod is deleted; failed: any other error)",
            ["method", "outcome"],
            registry=self.registry,
        )
        # At 0 from the start, so that the eviction alerts have data before the first failure.
        for method, outcome in EVICTION_SERIES:
            self.evictions.labels(method, outcome)

    def watch_parked(self, parked: Callable[[], Mapping[str, Iterable[str]]]) -> None:
        self.registry.register(_BlockedCollector(parked))

    def eviction(self, method: str, outcome: str) -> None:
        self.evictions.labels(method, outcome).inc()

    def pod_deleted(self, latency: float) -> None:
        self.deletions.inc()
        self.deletion_duration.observe(latency)
