"""The metrics an on-call engineer reads (docs/monitoring.md), from a claims operator on the lab:
the leader election status, the work queue moving, Pods waiting for a missing template, devices
allocated per pool, the claim creation latency, the watches and the process."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from operators.core.api.resources import NAMESPACES
from operators.core.framework.metrics import samples

from .claims_env import ClaimsEnv
from .operator_process import OperatorProcess
from .test_claims_operator import tmpl
from .waiting import wait_for

LEASE = "dra-operators-claims"


def _value(text: str, family: str, **labels: str) -> float | None:
    """The sum of the samples of ``family`` with ``labels`` (a label may be called ``name``, which
    ``samples`` takes for the family's), None when there is none."""
    found = [value for found_labels, value in samples(text, family) if labels.items() <= found_labels.items()]
    return sum(found) if found else None


async def _metric_is(operator: OperatorProcess, family: str, test, **labels: str) -> bool:
    try:
        text = operator.metrics()
    except OSError:
        return False  # served once the caches are filled, after the liveness probe answers
    value = _value(text, family, **labels)
    return value is not None and test(value)


async def test_a_claims_leader_reports_its_lease_queue_waiting_pods_and_allocations(
    lab, kube, controllers, tmp_path, unique
):
    controllers.use("none")  # ours runs here, with leader election on
    namespace = f"mx-{unique}"
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    operator = OperatorProcess(
        ["claims"],
        lab.kubeconfig,
        tmp_path,
        env={
            "DRA_LEADER_ELECTION": "true",
            "DRA_LEADER_ELECTION_NAMESPACE": namespace,
            "DRA_LEADER_ELECTION_LEASE_DURATION": "4",
        },
    )
    operator.start()
    try:
        await wait_for(
            lambda: _metric_is(operator, "leader_election_master_status", lambda v: v == 1, name=LEASE),
            timeout=30,
            what="leader_election_master_status 1",
        )
        text = operator.metrics()
        assert _value(text, "process_resident_memory_bytes") > 0
        assert _value(text, "process_cpu_seconds_total") > 0
        assert _value(text, "dra_operators_watch_stuck", operator="claims", resource="pods") == 0
        assert _value(text, "dra_operators_watch_silence_seconds", operator="claims", resource="pods") is not None
        # The gauge counts the whole shared lab: a Pod of an earlier module whose namespace is
        # still being deleted counted once (CI20). Wait for those to go, then measure ours.
        await wait_for(
            lambda: _metric_is(operator, "dra_operators_pods_waiting_for_claims", lambda v: v == 0),
            timeout=120,
            what="no Pod of earlier tests waiting for its claims",
        )
        text = operator.metrics()
        adds_before = _value(text, "workqueue_adds_total", name="resource_claim")
        assert adds_before is not None and _value(text, "workqueue_depth", name="resource_claim") is not None

        async with ClaimsEnv(kube, f"mx{unique}") as env:
            await env.pod("waiting", {"gpu": tmpl("not-yet")})  # its template does not exist
            await wait_for(
                lambda: _metric_is(operator, "dra_operators_pods_waiting_for_claims", lambda v: v == 1),
                timeout=30,
                what="one Pod waiting for its claim",
            )
            # The gauge follows the Pod informer; the queue's duration is observed once its sync
            # of the Pod has ended, which may be a moment later.
            await wait_for(
                lambda: _metric_is(
                    operator, "workqueue_work_duration_seconds_count", lambda v: v >= 1, name="resource_claim"
                ),
                timeout=30,
                what="the work queue's first sync timed",
            )
            text = operator.metrics()
            assert _value(text, "dra_operators_pods_waiting_for_claims_oldest_seconds") >= 0
            assert _value(text, "workqueue_adds_total", name="resource_claim") > adds_before

            await env.template("not-yet")
            claim = await env.claim_of("waiting", "gpu")
            await env.wait_running("waiting")
            await env.wait_claim(claim, lambda c: c.get("status", {}).get("allocation"), "allocated")
            await wait_for(
                lambda: _metric_is(operator, "dra_operators_allocated_devices", lambda v: v == 1, driver=env.driver),
                timeout=30,
                what="one device allocated in the env's pool",
            )
            text = operator.metrics()
            assert _value(text, "dra_operators_pods_waiting_for_claims") == 0
            assert _value(text, "dra_operators_claim_creation_latency_seconds_count") >= 1
    finally:
        operator.stop()
        await kube.delete(NAMESPACES, namespace)


async def test_a_standby_reports_zero_for_the_lease(lab, kube, controllers, tmp_path, unique):
    controllers.use("none")
    namespace = f"ms-{unique}"
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    env = {
        "DRA_LEADER_ELECTION": "true",
        "DRA_LEADER_ELECTION_NAMESPACE": namespace,
        "DRA_LEADER_ELECTION_LEASE_DURATION": "4",
    }
    leader = OperatorProcess(["claims"], lab.kubeconfig, tmp_path, env=env)
    leader.log = tmp_path / "claims-leader.log"
    standby = OperatorProcess(["claims"], lab.kubeconfig, tmp_path, env=env)
    standby.log = tmp_path / "claims-standby.log"
    leader.start()
    try:
        await wait_for(
            lambda: _metric_is(leader, "leader_election_master_status", lambda v: v == 1, name=LEASE),
            timeout=30,
            what="the first replica leads",
        )
        standby.start()
        await wait_for(
            lambda: _metric_is(standby, "leader_election_master_status", lambda v: v == 0, name=LEASE),
            timeout=30,
            what="the second replica stands by",
        )
        assert _value(leader.metrics(), "leader_election_master_status", name=LEASE) == 1
    finally:
        standby.stop()
        leader.stop()
        await kube.delete(NAMESPACES, namespace)


async def test_two_operators_in_one_process_serve_each_family_once(lab, kube, controllers, tmp_path):
    """``dra-operators run claims taints``: one port; the families both have (work queues, watches)
    are served once each, with the samples of both operators."""
    controllers.use("none")
    both = OperatorProcess(["claims", "taints"], lab.kubeconfig, tmp_path)
    both.start()
    try:

        async def served() -> bool:
            return await _metric_is(both, "workqueue_depth", lambda v: v >= 0, name="device-taint-eviction-controller")

        await wait_for(served, timeout=30, what="both operators' metrics on the port")
        text = both.metrics()
        families = [f.name for f in text_string_to_metric_families(text)]
        assert len(families) == len(set(families)), sorted(f for f in families if families.count(f) > 1)
        assert _value(text, "workqueue_depth", name="resource_claim") is not None
        for operator in ("claims", "taints"):
            assert _value(text, "dra_operators_watch_stuck", operator=operator, resource="pods") == 0
        # Series are unique too: each (family, labels) once.
        series = [
            (s.name, tuple(sorted(s.labels.items()))) for f in text_string_to_metric_families(text) for s in f.samples
        ]
        assert len(series) == len(set(series))
    finally:
        both.stop()
