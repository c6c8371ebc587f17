"""The claims operator's metrics, named as kube-controller-manager's resourceclaim-controller
names them (v1.37: the create counter also has owner labels); ours (no upstream counterpart,
prefixed dra_operators_) for the waiting Pods and the allocated devices."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ..core.dra.metatime import utcnow
from ..core.dra.resourceclaim import is_allocated
from . import decisions as d


class _ClaimsCollector(Collector):
    """``dynamic_resource_allocation_resource_claims``, computed from the cache at scrape time."""

    def __init__(self, claims: Callable[[], Iterable[d.Obj]]):
        self._claims = claims

    def collect(self):
        family = GaugeMetricFamily(
            "dynamic_resource_allocation_resource_claims",
            "Number of ResourceClaims, categorized by allocation status, admin access, and source.",
            labels=["allocated", "admin_access", "source"],
        )
        tally = Tally(
            (str(is_allocated(c)).lower(), d.admin_access_label(c), d.claim_source_label(c)) for c in self._claims()
        )
        for labels, count in sorted(tally.items()):
            family.add_metric(list(labels), count)
        yield family


# 0.1 s doubling to about 27 minutes (the scheduler's 0.1 s * 2^k, as the binding operator's).
LATENCY_BUCKETS = tuple(0.1 * 2**k for k in range(15))


class _WaitingCollector(Collector):
    """Pods waiting for their claims (``decisions.waiting_for_claims``), at scrape time."""

    def __init__(self, pods: Callable[[], Iterable[d.Obj]], get_claim: Callable[[str], d.Obj | None]):
        self._pods, self._get_claim = pods, get_claim

    def collect(self):
        count, oldest = d.waiting_for_claims(self._pods(), self._get_claim, utcnow())
        yield GaugeMetricFamily(
            "dra_operators_pods_waiting_for_claims",
            "Pods that will run but whose ResourceClaim from a template does not exist yet",
            value=count,
        )
        yield GaugeMetricFamily(
            "dra_operators_pods_waiting_for_claims_oldest_seconds",
            "Age of the oldest Pod waiting for a ResourceClaim from a template (0: none waits)",
            value=oldest,
        )


class _AllocatedCollector(Collector):
    """Devices allocated per pool (``decisions.allocated_devices``), at scrape time."""

    def __init__(self, claims: Callable[[], Iterable[d.Obj]]):
        self._claims = claims

    def collect(self):
        family = GaugeMetricFamily(
            "dra_operators_allocated_devices",
            "Devices allocated to ResourceClaims, by driver and pool",
            labels=["driver", "pool"],
        )
        for (driver, pool), count in sorted(d.allocated_devices(self._claims()).items()):
            family.add_metric([driver, pool], count)
        yield family


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.creates = Counter(
            "dynamic_resource_allocation_resourceclaim_creates",
            "Number of ResourceClaims creation requests, categorized by creation status, admin access, "
            "and owning API group and kind",
            ["status", "admin_access", "owner_api_group", "owner_api_kind"],
            registry=self.registry,
        )
        self.creation_latency = Histogram(
            "dra_operators_claim_creation_latency_seconds",
            "Time from the creation of a Pod (or PodGroup) to the creation of its ResourceClaim from a template",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def watch_claims(self, claims: Callable[[], Iterable[d.Obj]]) -> None:
        self.registry.register(_ClaimsCollector(claims))
        self.registry.register(_AllocatedCollector(claims))

    def watch_pods(self, pods: Callable[[], Iterable[d.Obj]], get_claim: Callable[[str], d.Obj | None]) -> None:
        self.registry.register(_WaitingCollector(pods, get_claim))

    def claim_created(self, claim: d.Obj, status: str) -> None:
        group, kind = d.owner_labels(claim)
        self.creates.labels(status, d.admin_access_label(claim), group, kind).inc()
