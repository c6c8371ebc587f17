"""The poolstatus operator's pure decisions against golden cases ported from upstream's tests
(tests/unit/data/poolstatus_cases.yaml), and its retry, retention and quantity rules."""

from __future__ import annotations

import datetime

import pytest
import yaml

from operators.poolstatus import decisions as d
from tests.paths import ROOT

CASES = yaml.safe_load((ROOT / "tests" / "unit" / "data" / "poolstatus_cases.yaml").read_text())
NOW = "2026-11-23T17:00:00Z"


def _slice(s: dict) -> dict:
    devices = s.get("devices", 0)
    if isinstance(devices, int):
        devices = [{"name": f"device-{i}"} for i in range(devices)]
    spec = {
        "driver": s["driver"],
        "pool": {"name": s["pool"], "generation": s.get("generation", 1), "resourceSliceCount": s.get("count", 1)},
        "devices": devices,
    }
    if s.get("node"):
        spec["nodeName"] = s["node"]
    if s.get("counters"):
        spec["sharedCounters"] = s["counters"]
    if s.get("attr"):
        spec["partitionTypeAttribute"] = s["attr"]
    return {"metadata": {"name": s["name"]}, "spec": spec}


def _claim(c) -> dict:
    results = [{"driver": c[0], "pool": c[1], "device": c[2], "request": "r"}] if isinstance(c, list) else c["results"]
    return {
        "metadata": {"name": "c", "namespace": "default"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case):
    request = {"metadata": {"name": "test-request"}, "spec": case["request"]}
    status = d.calculate_pool_status(
        request,
        [_slice(s) for s in case["slices"]],
        [_claim(c) for c in case.get("claims") or []],
        case.get("rules") or [],
        NOW,
    )
    expect = dict(case["expect"])
    message = expect.pop("message")
    assert status.pop("conditions") == [
        {
            "type": "Complete",
            "status": "True",
            "lastTransitionTime": NOW,
            "reason": "CalculationComplete",
            "message": message,
        }
    ]
    assert status == expect
    assert d.has_incomplete_pool({**status}) == bool(case.get("incomplete"))


def test_incomplete_pool_past_the_limit_is_not_retried():
    """syncRequest looks only at the returned pools: an incomplete one cut by the limit is written."""
    slices = [
        _slice({"name": "a", "driver": "x", "pool": "a", "devices": 1}),
        _slice({"name": "b", "driver": "x", "pool": "b", "devices": 1, "count": 2}),
    ]
    status = d.calculate_pool_status({"spec": {"driver": "x", "limit": 1}}, slices, [], [], NOW)
    assert status["poolCount"] == 2 and [p["poolName"] for p in status["pools"]] == ["a"]
    assert not d.has_incomplete_pool(status)


def test_validation_error_cut_to_256_bytes():
    pool = "p" * 200 + "/" + "q" * 60
    status = d.calculate_pool_status(
        {"spec": {"driver": "x"}},
        [_slice({"name": "s", "driver": "x", "pool": pool, "devices": 1, "count": 2})],
        [],
        [],
        NOW,
    )
    assert len(status["pools"][0]["validationError"].encode()) == 256


def test_resolve_partition_type():
    attrs = {
        "profile": {"string": "Bare"},
        "gpu.example.com/profile": {"string": "Explicit"},
        "other.com/x": {"string": "ignore"},
        "gpu.example.com/numeric-key": {"int": 3},
    }
    assert d.resolve_partition_type("gpu.example.com", attrs, "gpu.example.com/profile") == ("Explicit", True)
    assert d.resolve_partition_type("gpu.example.com", {"profile": {"string": "Full"}}, "gpu.example.com/profile") == (
        "Full",
        True,
    )
    assert d.resolve_partition_type("gpu.example.com", attrs, "gpu.example.com/numeric-key") == ("", False)
    assert d.resolve_partition_type("gpu.example.com", attrs, "other.com/x") == ("ignore", True)
    assert d.resolve_partition_type("gpu.example.com", {"x": {"string": "y"}}, "other.com/x") == ("", False)


def test_request_default_ignored_when_a_slice_declares():
    devices = [
        d.DeviceRecord(
            "d0",
            partition_attr="g/profile",
            attributes={"g/profile": {"string": "Full"}, "g/shape": {"string": "Small"}},
        ),
        d.DeviceRecord("d1", attributes={"g/shape": {"string": "Small"}}),
    ]
    d.resolve_device_partitions("g/shape", devices, "g")
    assert [(x.partition_attr, x.partition_type) for x in devices] == [("g/profile", "Full"), ("", "")]


def test_fresh_device_clamp_binds_before_counter():
    cost = [{"counterSet": "gpu-1", "counters": {"memory": {"value": "80Gi"}}}]
    devices = [d.DeviceRecord(f"full-{i}", "g/profile", "Full", True, cost) for i in range(3)]
    summary, error = d.compute_partition_summary(
        "g", "p", devices, [{"name": "gpu-1", "counters": {"memory": {"value": "800Gi"}}}], set()
    )
    assert (summary, error) == ([{"attribute": "g/profile", "type": "Full", "total": 3, "allocatable": 3}], "")


@pytest.mark.parametrize(
    "text,canonical",
    [
        ("80Gi", "80Gi"),
        ("0.5Gi", "512Mi"),
        ("1000Ki", "1000Ki"),
        ("1536", "1536"),
        ("1.5", "1500m"),
        ("1e3", "1e3"),
        ("10k", "10k"),
        ("1000", "1k"),
        ("100M", "100M"),
        ("0", "0"),
    ],
)
def test_quantity_canonical(text, canonical):
    assert str(d.Quantity.parse(text)) == canonical


def test_quantity_sums_keep_the_first_format_and_never_go_negative():
    total = d.Quantity().add(d.Quantity.parse("40Gi")).add(d.Quantity.parse("40Gi"))
    assert str(total) == "80Gi"
    assert str(d.non_negative_diff(total, d.Quantity.parse("90Gi"))) == "0"
    assert str(d.Quantity().add(d.Quantity.parse("512"))) == "512"
    assert str(d.Quantity.parse("1Gi").sub(d.Quantity.parse("1000Mi"))) == "24Mi"


def _at(seconds_ago: float) -> str:
    return (
        datetime.datetime(2026, 11, 23, 17, tzinfo=datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    ).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(
    "request_,deleted",
    [
        ({"metadata": {"creationTimestamp": _at(90000)}}, True),  # pending > 24 h
        ({"metadata": {"creationTimestamp": _at(80000)}}, False),
        (
            {
                "metadata": {"creationTimestamp": _at(90000)},
                "status": {"conditions": [{"type": "Complete", "lastTransitionTime": _at(10)}]},
            },
            False,
        ),  # condition time counts
        (
            {
                "metadata": {"creationTimestamp": _at(10)},
                "status": {"conditions": [{"type": "Failed", "lastTransitionTime": _at(3700)}]},
            },
            True,
        ),
        ({"metadata": {"creationTimestamp": _at(3700)}, "status": {"conditions": []}}, True),  # no condition
        ({"metadata": {}, "status": {}}, False),  # zero time: never
    ],
    ids=["pending-old", "pending-young", "complete-young", "failed-old", "status-without-condition", "no-time"],
)
def test_should_delete(request_, deleted):
    now = datetime.datetime(2026, 11, 23, 17, tzinfo=datetime.UTC)
    assert d.should_delete(request_, now, 3600, 86400) is deleted
