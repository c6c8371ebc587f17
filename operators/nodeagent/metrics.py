"""The node agent's metrics (no upstream counterpart; prefixed dra_nodeagent_)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


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
        self.recoveries = Counter(
            "dra_nodeagent_health_recoveries",
            "Devices that lost their health taints",
            ["driver"],
            registry=self.registry,
        )
