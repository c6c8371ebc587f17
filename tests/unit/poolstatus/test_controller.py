"""The poolstatus controller's I/O rules against a fake API: what is queued, when the status is
written, retries dropped after maxRetries, metrics, and the retention cleanup's deletes."""

from __future__ import annotations

import datetime

import pytest
from prometheus_client import CollectorRegistry

from operators.core.api.kube import ApiError
from operators.core.machinery.workqueue import RetryableError
from operators.poolstatus.controller import MAX_RETRIES, PoolStatusController
from operators.poolstatus.metrics import Metrics

NOW = datetime.datetime(2026, 11, 23, 17, tzinfo=datetime.timezone.utc)


class FakeKube:
    def __init__(self, fail_status: ApiError | None = None, fail_delete: ApiError | None = None):
        self.calls: list[tuple] = []
        self.fail_status, self.fail_delete = fail_status, fail_delete

    async def replace(self, res, body, *, subresource=None):
        self.calls.append(("replace", body["metadata"]["name"], subresource))
        if self.fail_status:
            raise self.fail_status
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "2"}}

    async def delete(self, res, name, namespace=None, *, uid=None, **_):
        self.calls.append(("delete", name, uid))
        if self.fail_delete:
            raise self.fail_delete
        return {}


def request(name="r", status=None, created="2026-11-23T16:00:00Z", driver="drv"):
    r = {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "1", "creationTimestamp": created},
         "spec": {"driver": driver, "limit": 100}}
    if status is not None:
        r["status"] = status
    return r


def slice_(count=1):
    return {"metadata": {"name": "s", "uid": "us", "resourceVersion": "1"},
            "spec": {"driver": "drv", "nodeName": "n", "pool": {"name": "p", "generation": 1,
                                                                  "resourceSliceCount": count},
                     "devices": [{"name": "gpu-0"}]}}


def controller(kube):
    c = PoolStatusController(kube, metrics=Metrics(CollectorRegistry()), clock=lambda: NOW)
    c.queued = []
    c.queue.add = c.queued.append
    return c


def test_only_requests_without_status_are_queued():
    c = controller(FakeKube())
    c.on_request(request("new"), deleted=False)
    c.on_request(request("done", status={"poolCount": 0}), deleted=False)
    assert c.queued == ["new"]


async def test_answer_written_to_status_once_and_counted():
    kube = FakeKube()
    c = controller(kube)
    c.on_slice(slice_(), deleted=False)
    c.on_request(request(), deleted=False)
    await c.sync("r")
    assert kube.calls == [("replace", "r", "status")]
    assert c.requests.get("r")["status"]["pools"][0]["totalDevices"] == 1
    await c.sync("r")  # answered: skipped, as upstream
    assert len(kube.calls) == 1
    registry = c.metrics.registry
    assert registry.get_sample_value("resourcepoolstatusrequest_controller_requests_processed_total",
                                     {"driver_name": "drv"}) == 1
    assert registry.get_sample_value("resourcepoolstatusrequest_controller_request_processing_duration_seconds_count",
                                     {"driver_name": "drv"}) == 1


async def test_incomplete_pool_retried_then_dropped_after_max_retries():
    kube = FakeKube()
    c = controller(kube)
    c.on_slice(slice_(count=2), deleted=False)
    c.on_request(request(), deleted=False)
    for attempt in range(MAX_RETRIES):
        with pytest.raises(RetryableError, match="incomplete pools"):
            await c.process("r")
        c.queue._failures["r"] = attempt + 1  # what the queue's add_rate_limited counts
    await c.process("r")  # the sixth failure is dropped: no raise, nothing written, nothing counted
    assert kube.calls == []
    assert c.metrics.registry.get_sample_value("resourcepoolstatusrequest_controller_requests_processed_total",
                                               {"driver_name": "drv"}) is None


async def test_failed_status_update_counts_an_error_and_retries():
    c = controller(FakeKube(fail_status=ApiError(409, {"reason": "Conflict"})))
    c.on_request(request(), deleted=False)
    with pytest.raises(RetryableError, match="failed to update status"):
        await c.sync("r")
    registry = c.metrics.registry
    assert registry.get_sample_value("resourcepoolstatusrequest_controller_request_processing_errors_total",
                                     {"driver_name": "drv"}) == 1
    assert registry.get_sample_value("resourcepoolstatusrequest_controller_requests_processed_total",
                                     {"driver_name": "drv"}) == 1


async def test_cleanup_deletes_expired_requests_with_uid_precondition():
    kube = FakeKube()
    c = controller(kube)
    complete = {"poolCount": 0, "conditions": [{"type": "Complete", "status": "True",
                                                "lastTransitionTime": "2026-11-23T15:59:00Z"}]}
    fresh = {"poolCount": 0, "conditions": [{"type": "Complete", "status": "True",
                                             "lastTransitionTime": "2026-11-23T16:30:00Z"}]}
    c.on_request(request("old-done", status=complete), deleted=False)
    c.on_request(request("young-done", status=fresh), deleted=False)
    c.on_request(request("pending", created="2026-11-22T16:00:00Z"), deleted=False)
    c.on_request(request("young-pending", created="2026-11-23T16:59:00Z"), deleted=False)
    assert await c.cleanup_expired() == 2
    assert sorted(kube.calls) == [("delete", "old-done", "u-old-done"), ("delete", "pending", "u-pending")]


async def test_cleanup_ignores_requests_already_gone():
    c = controller(FakeKube(fail_delete=ApiError(404, {"reason": "NotFound"})))
    c.on_request(request("pending", created="2026-11-22T16:00:00Z"), deleted=False)
    assert await c.cleanup_expired() == 0
