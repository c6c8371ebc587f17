"""The binding operator's metrics. Upstream has no counterpart (the scheduler counts the wait,
``scheduler_dra_bindingconditions_*``); the duration buckets are the scheduler's (0.1 s * 2^k)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BUCKETS = tuple(0.1 * 2**k for k in range(14))


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.preparations = Counter(
            "dra_operators_binding_preparations",
            "Finished device preparations, by driver and outcome (ready, failed, timeout).",
            ["driver", "outcome"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "dra_operators_binding_preparation_duration_seconds",
            "Time from the start of a device preparation (kept across restarts) to its outcome.",
            ["driver", "outcome"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "dra_operators_binding_preparations_in_flight", "Device preparations running now.", registry=self.registry
        )
        self.undos = Counter(
            "dra_operators_binding_undos",
            "Preparations undone after their allocation went away, by driver and result (success, error).",
            ["driver", "result"],
            registry=self.registry,
        )
        self.cool_offs = Counter(
            "dra_operators_binding_cool_off_taints",
            "Cool-off DeviceTaintRules written (added) and deleted after the cool-off (removed).",
            ["driver", "action"],
            registry=self.registry,
        )

    def prepared(self, driver: str, outcome: str, seconds: float) -> None:
        self.preparations.labels(driver, outcome).inc()
        self.duration.labels(driver, outcome).observe(max(0.0, seconds))
