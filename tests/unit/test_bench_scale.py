"""``make bench-scale``'s objects: each fraction adds up to its share of the envelope, and every
Node's pool is one the API server of 1.35 and later accepts (counter sets in a slice of their own)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scale():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.25, 1.0])
def test_a_fraction_is_that_share_of_the_envelope(scale, fraction):
    size = scale.Size.of(fraction)
    assert size.nodes == round(5000 * fraction) and size.devices == 8 * size.nodes
    assert size.plain_pods + size.claim_pods == pytest.approx(150_000 * fraction, abs=4)
    assert size.claim_pods == pytest.approx(10_000 * fraction, abs=4)
    assert size.template_pods + size.shared_claims <= size.devices, "every claim gets a device"


def test_plain_pods_can_be_set_apart_from_the_fraction(scale):
    size = scale.Size.of(1, plain_pods=0)
    assert (size.nodes, size.devices, size.plain_pods, size.claim_pods) == (5000, 40000, 0, 10000)


def test_a_partitionable_pool_has_its_counters_apart_and_eight_devices(scale):
    counters, devices = scale.build_slices("n", partitionable=True)
    assert "devices" not in counters["spec"] and counters["spec"]["sharedCounters"]
    assert "sharedCounters" not in devices["spec"] and len(devices["spec"]["devices"]) == 8
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in (counters, devices)} == {2}
    sets = {s["name"] for s in counters["spec"]["sharedCounters"]}
    used = {c["counterSet"] for d in devices["spec"]["devices"] for c in d["consumesCounters"]}
    assert used == sets
    [plain] = scale.build_slices("m", partitionable=False)
    assert len(plain["spec"]["devices"]) == 8 and plain["spec"]["pool"]["resourceSliceCount"] == 1


def test_ours_start_only_once_kube_controller_manager_is_quiet(scale, monkeypatch):
    """Its own start-up (listing every object) must not overlap ours: waited out by its CPU."""
    import asyncio

    # busy, busy, one quiet window, busy again, then three quiet ones, then more
    used = iter([0.0, 3.0, 6.0, 6.05, 8.0, 8.05, 8.1, 8.15, 8.2])
    monkeypatch.setattr(scale, "cpu_seconds", lambda pid: next(used))
    run = scale.Scale.__new__(scale.Scale)
    monkeypatch.setattr(run, "kcm_pid", lambda: 1, raising=False)
    asyncio.run(run.controller_manager_quiet(window=0.01, busy=0.1, calm=3))
    assert next(used) == 8.2  # it read until the third quiet window in a row (8.1 -> 8.15)


METRICS_BEFORE = """\
# HELP apiserver_request_duration_seconds Response latency distribution in seconds.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{resource="pods",subresource="",verb="GET",le="+Inf"} 10
apiserver_request_duration_seconds_sum{resource="pods",subresource="",verb="GET"} 0.5
apiserver_request_duration_seconds_count{resource="pods",subresource="",verb="GET"} 10
apiserver_request_duration_seconds_sum{resource="pods",subresource="",verb="WATCH"} 900
apiserver_request_duration_seconds_count{resource="pods",subresource="",verb="WATCH"} 3
# HELP etcd_request_duration_seconds Etcd request latency in seconds.
# TYPE etcd_request_duration_seconds histogram
etcd_request_duration_seconds_sum{operation="get",type="/registry/pods"} 0.2
etcd_request_duration_seconds_count{operation="get",type="/registry/pods"} 10
"""


def test_a_turns_requests_are_the_difference_of_two_scrapes(scale):
    after = (
        METRICS_BEFORE.replace("} 0.5", "} 2.5")
        .replace('verb="GET"} 10', 'verb="GET"} 110')
        .replace("} 900", "} 5000")
        .replace(
            "# HELP etcd",
            'apiserver_request_duration_seconds_sum{component="apiserver",resource="pods",'
            'subresource="status",verb="PATCH"} 9\n'
            'apiserver_request_duration_seconds_count{component="apiserver",resource="pods",'
            'subresource="status",verb="PATCH"} 100\n'
            "# HELP etcd",
        )
    )
    costs = scale.request_costs(scale.request_totals(METRICS_BEFORE), scale.request_totals(after))
    # PATCH first (most seconds); the watch (open for minutes) and the unchanged etcd get left out
    assert costs == {
        "PATCH pods status": {"count": 100, "mean_ms": 90.0, "seconds": 9.0},
        "GET pods": {"count": 100, "mean_ms": 20.0, "seconds": 2.0},
    }


def test_cpu_deltas_keep_the_processes_alive_at_both_samples(scale):
    spent = scale.cpu_deltas({"etcd": 10.0, "kwok": 1.0, "gone": 3.0}, {"etcd": 12.5, "kwok": 9.0, "new": 1.0})
    assert list(spent.items()) == [("kwok", 8.0), ("etcd", 2.5)]


def test_the_taints_detail_is_a_table_per_turn(scale):
    detail = {
        "ours": {"cpu_seconds": {"kube-apiserver": 100.0}, "requests": {"GET pods": {"count": 5, "mean_ms": 2.0}}},
        "upstream": {"cpu_seconds": {"kube-apiserver": 80.0, "bench": 1.0}, "requests": {}},
    }
    text = "\n".join(scale.taints_detail_lines(detail))
    assert "| kube-apiserver | 100 | 80 |" in text
    assert "| bench | – | 1" in text
    assert "| GET pods | 5, 2 | – |" in text
