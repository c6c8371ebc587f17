"""The poolstatus operator's metrics, named as kube-controller-manager v1.37.1 names them
(pkg/controller/resourcepoolstatusrequest/metrics/metrics.go: subsystem
``resourcepoolstatusrequest_controller``, label ``driver_name``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

SUBSYSTEM = "resourcepoolstatusrequest_controller"
# metrics.ExponentialBuckets(0.001, 2, 15)
DURATION_BUCKETS = tuple(0.001 * 2**i for i in range(15))


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.processed = Counter(
            f"{SUBSYSTEM}_requests_processed",
            "Total number of ResourcePoolStatusRequests processed",
            ["driver_name"],
            registry=self.registry,
        )
        self.errors = Counter(
            f"{SUBSYSTEM}_request_processing_errors",
            "Total number of errors encountered while processing ResourcePoolStatusRequests",
            ["driver_name"],
            registry=self.registry,
        )
        self.duration = Histogram(
            f"{SUBSYSTEM}_request_processing_duration_seconds",
            "Time taken to process a ResourcePoolStatusRequest",
            ["driver_name"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )

    def written(self, driver: str, seconds: float, failed: bool) -> None:
        """A status update was tried (upstream counts and times only those, not requeues)."""
        if failed:
            self.errors.labels(driver).inc()
        self.processed.labels(driver).inc()
        if driver:
            self.duration.labels(driver).observe(seconds)
