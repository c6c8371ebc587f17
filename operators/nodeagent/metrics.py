"""The node agent's metrics (no upstream counterpart; prefixed dra_nodeagent_)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# dra_nodeagent_devices{state}
PUBLISHED, TAINTED, UNHEALTHY = "published", "tainted", "unhealthy"


def device_states(devices: list[dict[str, Any]], unhealthy: Iterable[str]) -> dict[str, int]:
    """Published devices; those published with any taint (health taints and the backend's own);
    those this agent holds unhealthy (tainted by its health tracking)."""
    names = {d["name"] for d in devices}
    return {
        PUBLISHED: len(devices),
        TAINTED: sum(1 for d in devices if d.get("taints")),
        UNHEALTHY: len(names & set(unhealthy)),
    }


OUTCOMES = ("success", "error")  # of kubelet's prepare and unprepare calls (plugin/state.py)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.devices = Gauge(
            "dra_nodeagent_devices_published", "Devices published in ResourceSlices", ["driver"], registry=self.registry
        )
        self.invalid = Gauge(
            "dra_nodeagent_invalid_devices",
            "Inventory problems keeping devices unpublished",
            ["driver"],
            registry=self.registry,
        )
        self.slices = Gauge(
            "dra_nodeagent_resource_slices", "ResourceSlices of the node's pool", ["driver"], registry=self.registry
        )
        self.duration = Histogram(
            "dra_nodeagent_publish_duration_seconds", "Time to publish the pool", ["driver"], registry=self.registry
        )
        self.errors = Counter(
            "dra_nodeagent_publish_errors", "Failed publishing attempts", ["driver"], registry=self.registry
        )
        self.health_events = Counter(
            "dra_nodeagent_health_events",
            "Device health events by kind and value (XID)",
            ["driver", "kind", "value"],
            registry=self.registry,
        )
        self.prepare = Counter(
            "dra_nodeagent_node_prepare_claims",
            "Claims kubelet asked to prepare, by outcome",
            ["driver", "outcome"],
            registry=self.registry,
        )
        self.prepare_duration = Histogram(
            "dra_nodeagent_node_prepare_claim_duration_seconds",
            "Time to prepare one claim",
            ["driver"],
            registry=self.registry,
        )
        self.unprepare = Counter(
            "dra_nodeagent_node_unprepare_claims",
            "Claims kubelet asked to unprepare, by outcome",
            ["driver", "outcome"],
            registry=self.registry,
        )
        self.prepared_claims = Gauge(
            "dra_nodeagent_prepared_claims", "Claims prepared on this node", ["driver"], registry=self.registry
        )
        self.device_states = Gauge(
            "dra_nodeagent_devices",
            "Devices of the node's pool by state: published, tainted (published with a taint), "
            "unhealthy (tainted by this agent's health tracking)",
            ["driver", "pool", "state"],
            registry=self.registry,
        )
        self.last_success = Gauge(
            "dra_nodeagent_last_publish_success_timestamp_seconds",
            "Unix time of the last successful publishing of the pool (0: none yet)",
            ["driver"],
            registry=self.registry,
        )
        self.consecutive_failures = Gauge(
            "dra_nodeagent_publish_consecutive_failures",
            "Failed publishing attempts since the last success (0: the last attempt succeeded)",
            ["driver"],
            registry=self.registry,
        )
        self.recoveries = Counter(
            "dra_nodeagent_health_recoveries",
            "Devices that lost their health taints",
            ["driver"],
            registry=self.registry,
        )

    def start_series(self, driver: str) -> None:
        """Every series whose labels are known in advance, at 0 from the start: an alert on a
        counter (rate of prepare errors) or gauge then has data before the first event, and an
        agent whose very first publishing fails has both series DRANodeAgentNotPublishing needs."""
        for family in (self.last_success, self.consecutive_failures, self.errors, self.recoveries):
            family.labels(driver)
        for outcome in OUTCOMES:
            self.prepare.labels(driver, outcome)
            self.unprepare.labels(driver, outcome)

    def set_device_states(
        self, driver: str, pool: str, devices: list[dict[str, Any]], unhealthy: Iterable[str]
    ) -> None:
        for state, count in device_states(devices, unhealthy).items():
            self.device_states.labels(driver, pool, state).set(count)
