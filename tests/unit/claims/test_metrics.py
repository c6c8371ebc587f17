"""The claims operator's metrics computed from its caches: Pods waiting for their claims, devices
allocated per pool, and the families the Metrics class registers."""

import datetime

from prometheus_client import CollectorRegistry

from operators.claims import decisions as d
from operators.claims.metrics import Metrics
from tests.unit.objects import pod

NOW = datetime.datetime(2026, 1, 1, 0, 10, tzinfo=datetime.UTC)
TEMPLATE = {"name": "gpu", "resourceClaimTemplateName": "t"}


def _created(obj, at="2026-01-01T00:00:00Z"):
    obj["metadata"]["creationTimestamp"] = at
    return obj


def _claims(*keys):
    known = set(keys)
    return lambda key: {"metadata": {"name": key}} if key in known else None


def test_a_pod_without_its_template_claim_waits_and_its_age_counts():
    waiting = _created(pod("a", claims=[TEMPLATE]))  # no status entry yet
    younger = _created(pod("b", claims=[TEMPLATE]), "2026-01-01T00:08:00Z")
    assert d.waiting_for_claims([waiting, younger], _claims(), NOW) == (2, 600.0)


def test_pods_with_their_claims_or_that_will_not_run_do_not_wait():
    served = _created(pod("a", claims=[TEMPLATE], statuses=[{"name": "gpu", "resourceClaimName": "a-gpu"}]))
    named = _created(pod("b", claims=[{"name": "x", "resourceClaimName": "missing"}]))  # the user's to create
    done = _created(pod("c", claims=[TEMPLATE], phase="Succeeded"))
    deleting = _created(pod("d", claims=[TEMPLATE], deleting=True))
    no_claim_needed = _created(pod("e", claims=[TEMPLATE], statuses=[{"name": "gpu"}]))
    assert d.waiting_for_claims([served, named, done, deleting, no_claim_needed], _claims("ns/a-gpu"), NOW) == (
        0,
        0.0,
    )


def test_a_recorded_claim_that_is_gone_waits_again():
    gone = _created(pod("a", claims=[TEMPLATE], statuses=[{"name": "gpu", "resourceClaimName": "a-gpu"}]))
    assert d.waiting_for_claims([gone], _claims(), NOW) == (1, 600.0)


def _allocated(*results):
    return {
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def test_allocated_devices_by_driver_and_pool():
    claims = [
        _allocated({"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}),
        _allocated(
            {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-1"},
            {"driver": "nic.example.com", "pool": "n1", "device": "nic-0"},
        ),
        {"metadata": {"name": "unallocated", "namespace": "ns"}, "status": {}},
    ]
    assert d.allocated_devices(claims) == {("gpu.example.com", "n1"): 2, ("nic.example.com", "n1"): 1}


def test_age_seconds():
    assert d.age_seconds(_created(pod("a")), NOW) == 600.0
    assert d.age_seconds(pod("a"), NOW) == 0.0


def test_the_metrics_are_computed_at_scrape_time():
    metrics = Metrics(CollectorRegistry())
    claims: list = []
    pods = [_created(pod("a", claims=[TEMPLATE]))]
    metrics.watch_claims(lambda: claims)
    metrics.watch_pods(lambda: pods, lambda key: None)
    registry = metrics.registry
    assert registry.get_sample_value("dra_operators_pods_waiting_for_claims") == 1
    assert registry.get_sample_value("dra_operators_pods_waiting_for_claims_oldest_seconds") > 0
    claims.append(_allocated({"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}))
    assert (
        registry.get_sample_value("dra_operators_allocated_devices", {"driver": "gpu.example.com", "pool": "n1"}) == 1
    )
    pods.clear()
    assert registry.get_sample_value("dra_operators_pods_waiting_for_claims") == 0
