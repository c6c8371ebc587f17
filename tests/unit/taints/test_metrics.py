"""The taints operator's eviction metrics."""

from collections import OrderedDict

from prometheus_client import CollectorRegistry

from operators.taints import decisions as d
from operators.taints.metrics import Metrics


def test_blocked_pods_count_each_pod_once():
    parked = {"ns/pdb-a": OrderedDict({"ns/p1": None, "ns/p2": None}), "ns/pdb-b": OrderedDict({"ns/p2": None})}
    assert d.blocked_pods(parked) == 2
    assert d.blocked_pods({}) == 0


def test_evictions_by_method_and_outcome_and_the_blocked_gauge():
    metrics = Metrics(CollectorRegistry())
    parked: dict = {}
    metrics.watch_parked(lambda: parked)
    metrics.eviction(d.EVICTION_API, d.BLOCKED)
    metrics.eviction(d.EVICTION_API, d.BLOCKED)
    metrics.eviction(d.DELETE, d.EVICTED)
    value = metrics.registry.get_sample_value
    assert value("dra_operators_taints_evictions_total", {"method": "eviction_api", "outcome": "blocked"}) == 2
    assert value("dra_operators_taints_evictions_total", {"method": "delete", "outcome": "evicted"}) == 1
    assert value("dra_operators_taints_pods_blocked_by_pdb") == 0
    parked["ns/pdb"] = OrderedDict({"ns/p": None})
    assert value("dra_operators_taints_pods_blocked_by_pdb") == 1
