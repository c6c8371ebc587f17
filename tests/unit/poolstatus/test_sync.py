"""The poolstatus controller's sync and cleanup, table-driven over the shared fake API, porting
upstream's controller tests (k8s.io/kubernetes v1.37.1 pkg/controller/resourcepoolstatusrequest/
controller_test.go: TestSyncRequest, TestSyncRequestRequeuesIncompletePool,
TestSkipProcessedRequest, TestCleanupExpiredRequests, TestShouldDeleteRequest). The answer itself
(``calculatePoolStatus``) has its own table: tests/unit/data/poolstatus_cases.yaml.

Each case: the request and slices the API server and caches hold, the key synced (or a
cleanup), and the actions, the error and the status stored expected after it.

Not ported: TestSyncRequestWritesStructuralViewError (partitionTypeAttribute, which the
decisions do not model), TestIsOlderThan (a helper without a counterpart here).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

import pytest
from prometheus_client import CollectorRegistry

from operators.core.api.kube import ApiError
from operators.core.api.resources import RESOURCE_POOL_STATUS_REQUESTS
from operators.core.machinery.workqueue import RetryableError
from operators.poolstatus.controller import MAX_RETRIES, PoolStatusController
from operators.poolstatus.metrics import Metrics
from tests.fakeapi import FakeApi, service_unavailable

NOW = datetime.datetime(2026, 11, 23, 17, tzinfo=datetime.UTC)
DRIVER = "test.example.com"


def ago(hours: float) -> str:
    return (NOW - datetime.timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def request(name="test-request", status=None, created=None):
    r = {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "ResourcePoolStatusRequest",
        "metadata": {"name": name, "uid": f"u-{name}", "creationTimestamp": created or ago(0)},
        "spec": {"driver": DRIVER},
    }
    if status is not None:
        r["status"] = status
    return r


def complete(hours_ago: float) -> dict:
    return {
        "poolCount": 0,
        "conditions": [
            {
                "type": "Complete",
                "status": "True",
                "lastTransitionTime": ago(hours_ago),
                "reason": "CalculationComplete",
                "message": "Calculated status for 0 pools",
            }
        ],
    }


def make_slice(name="slice-1", pool="pool-1", node="node-1", devices=4, count=1, generation=1):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            "devices": [{"name": f"device-{i}"} for i in range(devices)],
        },
    }


@dataclass
class Case:
    name: str
    requests: list
    slices: list = field(default_factory=list)
    key: str | None = "test-request"  # None: run the cleanup instead
    failures: int = 0  # the queue's retries of the key so far
    reactors: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    error: str = ""
    pools: list | None = None  # (pool, totalDevices) of the stored status
    remaining: list | None = None  # request names left after a cleanup


CASES = [
    Case(
        "TestSyncRequest",
        [request()],
        [make_slice()],
        actions=["update resourcepoolstatusrequests/status test-request"],
        pools=[("pool-1", 4)],
    ),
    Case(
        "TestSyncRequest (two pools, one driver)",
        [request()],
        [make_slice(), make_slice("slice-2", pool="pool-2", node="node-2", devices=2)],
        actions=["update resourcepoolstatusrequests/status test-request"],
        pools=[("pool-1", 4), ("pool-2", 2)],
    ),
    Case(
        "TestSyncRequest (no pools)",
        [request()],
        actions=["update resourcepoolstatusrequests/status test-request"],
        pools=[],
    ),
    Case(
        "TestSyncRequestRequeuesIncompletePool",
        [request()],
        [make_slice(count=3)],
        error="incomplete pools detected, requeueing",
    ),
    Case(
        "TestSyncRequestRequeuesIncompletePool (retries exhausted: dropped)",
        [request()],
        [make_slice(count=3)],
        failures=MAX_RETRIES,
    ),
    Case("TestSkipProcessedRequest", [request(status=complete(0))], [make_slice()]),
    Case("no-such-request", [], [make_slice()]),
    Case(
        "status-update-fails",
        [request()],
        [make_slice()],
        reactors=[("update", "resourcepoolstatusrequests", service_unavailable())],
        actions=["update resourcepoolstatusrequests/status test-request"],
        error="failed to update status for request test-request",
    ),
    Case(
        "TestCleanupExpiredRequests",
        [request("expired-request", complete(2), ago(2)), request("active-request", complete(0), ago(0))],
        key=None,
        actions=["delete resourcepoolstatusrequests expired-request"],
        remaining=["active-request"],
    ),
    # TestShouldDeleteRequest's rows, through the cleanup.
    Case("completed-request-not-expired", [request("r", complete(0.5), ago(2))], key=None, remaining=["r"]),
    Case(
        "completed-request-expired",
        [request("r", complete(1.5), ago(2))],
        key=None,
        actions=["delete resourcepoolstatusrequests r"],
        remaining=[],
    ),
    Case("pending-request-not-expired", [request("r", None, ago(23))], key=None, remaining=["r"]),
    Case(
        "pending-request-expired",
        [request("r", None, ago(25))],
        key=None,
        actions=["delete resourcepoolstatusrequests r"],
        remaining=[],
    ),
    Case(
        "cleanup-delete-fails",
        [request("r", None, ago(25))],
        key=None,
        reactors=[("delete", "*", service_unavailable())],
        actions=["delete resourcepoolstatusrequests r"],
        remaining=["r"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_sync(case: Case):
    api = FakeApi({RESOURCE_POOL_STATUS_REQUESTS: case.requests})
    for verb, plural, error in case.reactors:
        api.fail(verb, plural, error)
    controller = PoolStatusController(api, metrics=Metrics(CollectorRegistry()), clock=lambda: NOW)
    controller.queue.add = lambda key: None
    for r in api.objects(RESOURCE_POOL_STATUS_REQUESTS):
        controller.on_request(r, deleted=False)
    for s in case.slices:
        controller.on_slice(s, deleted=False)
    if case.failures:
        controller.queue._failures[case.key] = case.failures

    error = ""
    if case.key is None:
        await controller.cleanup_expired()
    else:
        try:
            await controller.process(case.key)
        except (RetryableError, ApiError) as e:
            error = str(e)
    assert (case.error in error) if case.error else error == "", error
    assert api.action_keys() == case.actions
    if case.pools is not None:
        status = api.stored(RESOURCE_POOL_STATUS_REQUESTS, case.key)["status"]
        assert [(p["poolName"], p["totalDevices"]) for p in status.get("pools") or []] == case.pools
        assert status["poolCount"] == len(case.pools)
        assert controller.requests.get(case.key)["status"] == status  # the cache has what was written
    if case.remaining is not None:
        assert [r["metadata"]["name"] for r in api.objects(RESOURCE_POOL_STATUS_REQUESTS)] == case.remaining
