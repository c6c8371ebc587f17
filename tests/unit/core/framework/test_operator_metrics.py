"""What every operator exports: the runtime's families (watches, leader election, work queues)
and, on the served port, prometheus_client's process families; operators sharing a port serve a
family they both have once."""

import socket
import urllib.request
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from operators.core.api.resources import RESOURCE_CLAIMS
from operators.core.framework.metrics import merge_families, serve
from operators.core.framework.runtime import Runtime
from operators.core.machinery.informer import watch_families
from operators.core.machinery.leader import master_status
from operators.core.machinery.store import Store
from operators.core.machinery.supervisor import Supervisor
from operators.core.machinery.workqueue import WorkQueue
from tests.unit.core.framework.test_runtime import NoApi


def test_master_status_is_one_for_the_leader_and_zero_for_a_standby():
    family = master_status([SimpleNamespace(name="a", is_leader=True), SimpleNamespace(name="b", is_leader=False)])
    assert family.name == "leader_election_master_status"
    assert [(s.labels, s.value) for s in family.samples] == [({"name": "a"}, 1.0), ({"name": "b"}, 0.0)]


def test_watch_families_are_the_silence_and_whether_stuck():
    informer = SimpleNamespace(resource=RESOURCE_CLAIMS, last_event_at=100.0, stale_reason="")
    stuck = SimpleNamespace(resource=SimpleNamespace(plural="pods"), last_event_at=40.0, stale_reason="silent")
    silence, stuck_family = watch_families("claims", [informer, stuck], now=130.0)
    assert [(s.labels["resource"], s.value) for s in silence.samples] == [("resourceclaims", 30.0), ("pods", 90.0)]
    assert {s.labels["operator"] for s in silence.samples + stuck_family.samples} == {"claims"}
    assert [(s.labels["resource"], s.value) for s in stuck_family.samples] == [("resourceclaims", 0.0), ("pods", 1.0)]


async def test_instrument_exports_the_runtimes_families():
    runtime = Runtime("t", NoApi(), supervisor=Supervisor("t", on_dead=lambda reason: None))
    registry = CollectorRegistry()

    async def sync(key: str) -> None:
        pass

    queue = WorkQueue("things", sync)
    runtime.instrument(registry, queue)
    informer = runtime.informer(RESOURCE_CLAIMS, Store(), lambda *args: None)
    assert registry.get_sample_value("workqueue_depth", {"name": "things"}) == 0
    assert registry.get_sample_value("dra_operators_watch_stuck", {"operator": "t", "resource": "resourceclaims"}) == 0
    assert (
        registry.get_sample_value(
            "dra_operators_watch_silence_seconds", {"operator": "t", "resource": "resourceclaims"}
        )
        >= 0
    )
    assert registry.get_sample_value("leader_election_master_status", {"name": "lease"}) is None  # no election
    informer.stale_reason = "stuck"
    runtime.electors.append(SimpleNamespace(name="lease", is_leader=True))
    assert registry.get_sample_value("dra_operators_watch_stuck", {"operator": "t", "resource": "resourceclaims"}) == 1
    assert registry.get_sample_value("leader_election_master_status", {"name": "lease"}) == 1
    await runtime.stop()


def test_merge_families_joins_same_named_families():
    one, two = CollectorRegistry(), CollectorRegistry()
    Counter("things", "Things.", ["name"], registry=one).labels("a").inc()
    Counter("things", "Things.", ["name"], registry=two).labels("b").inc(2)
    [merged] = merge_families([*one.collect(), *two.collect()])
    assert {(s.name, s.labels.get("name"), s.value) for s in merged.samples if s.name == "things_total"} == {
        ("things_total", "a", 1.0),
        ("things_total", "b", 2.0),
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_operators_on_one_port_serve_each_family_once_with_the_process_families():
    port = _free_port()
    one, two = CollectorRegistry(), CollectorRegistry()
    Counter("workqueue_adds", "Adds.", ["name"], registry=one).labels("claims").inc()
    Counter("workqueue_adds", "Adds.", ["name"], registry=two).labels("taints").inc(3)
    serve(one, port, "127.0.0.1")
    serve(two, port, "127.0.0.1")
    serve(two, port, "127.0.0.1")  # again: no second copy
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names))
    [adds] = [f for f in families if f.name == "workqueue_adds"]
    assert {(s.labels["name"], s.value) for s in adds.samples if s.name == "workqueue_adds_total"} == {
        ("claims", 1.0),
        ("taints", 3.0),
    }
    assert {"process_resident_memory_bytes", "process_cpu_seconds", "dra_operators_api_unavailable_seconds"} <= set(
        names
    )
