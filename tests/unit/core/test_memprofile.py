"""tracemalloc on demand: /debug/tracemalloc beside /metrics on the metrics port, off by default."""

import inspect
import json
import tracemalloc
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from operators.core import memprofile
from operators.core.framework import metrics
from operators.lab.cluster import free_ports


def get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture
def served() -> int:
    registry = CollectorRegistry()
    Counter("memprofile_test", "a metric", registry=registry).inc()
    (port,) = free_ports(1)
    metrics.serve(registry, port, "127.0.0.1")
    return port


def test_off_by_default_and_metrics_still_served(served):
    assert not tracemalloc.is_tracing()
    status, body = get(served, "/metrics")
    assert status == 200 and b"memprofile_test_total 1.0" in body
    status, body = get(served, memprofile.PATH)
    assert status == 404 and b"DRA_TRACEMALLOC" in json.loads(body)["error"].encode()


def test_the_live_allocations_by_call_stack_and_their_growth(served):
    assert memprofile.start(5)
    try:
        status, body = get(served, memprofile.PATH + "?limit=50")
        before = json.loads(body)
        assert status == 200 and before["frames"] == 5 and 0 < len(before["sites"]) <= 50
        line = inspect.currentframe().f_lineno + 1
        kept = [bytearray(1000) for _ in range(2000)]  # ~2 MB from this line
        after = json.loads(get(served, memprofile.PATH)[1])
        assert after["sites_total"] == len(after["sites"])  # no limit: every site
        top = memprofile.growth(before, after, top=3)[0]
        assert top["traceback"][0] == f"tests/unit/core/test_memprofile.py:{line}" and top["size_diff"] >= 2_000_000
        assert top["count_diff"] >= 2000 and kept
        assert get(served, memprofile.PATH + "?limit=x")[0] == 400
    finally:
        tracemalloc.stop()
