"""The poolstatus controller's I/O rules against a fake API: what is queued, when the status is
written, retries dropped after maxRetries, metrics, and the retention cleanup's deletes."""

from __future__ import annotations

import datetime

import pytest
from prometheus_client import CollectorRegistry

from operators.core.api.resources import RESOURCE_POOL_STATUS_REQUESTS
from operators.core.machinery.workqueue import RetryableError
from operators.poolstatus.controller import MAX_RETRIES, PoolStatusController
from operators.poolstatus.metrics import Metrics
from tests.fakeapi import FakeApi

NOW = datetime.datetime(2026, 11, 23, 17, tzinfo=datetime.UTC)


def fake_api(*requests, stale=False):
    """The API server holding ``requests`` (with ``stale``, at a newer resourceVersion than the
    controller's copy: the status update conflicts)."""
    api = FakeApi()
    for r in requests:
        api.add(
            {**r, "metadata": {**r["metadata"], "resourceVersion": "5" if stale else r["metadata"]["resourceVersion"]}},
            RESOURCE_POOL_STATUS_REQUESTS,
        )
    return api


def calls(api):
    """The writes, as (verb, name, subresource or the delete's UID precondition)."""
    out = []
    for a in api.actions:
        if a.verb == "update":
            out.append(("replace", a.name, a.subresource))
        elif a.verb == "delete":
            out.append(("delete", a.name, (a.obj.get("preconditions") or {}).get("uid")))
    return out


def request(name="r", status=None, created="2026-11-23T16:00:00Z", driver="drv"):
    r = {
        "metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": "1", "creationTimestamp": created},
        "spec": {"driver": driver, "limit": 100},
    }
    if status is not None:
        r["status"] = status
    return r


def slice_(count=1):
    return {
        "metadata": {"name": "s", "uid": "us", "resourceVersion": "1"},
        "spec": {
            "driver": "drv",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": count},
            "devices": [{"name": "gpu-0"}],
        },
    }


def controller(kube):
    c = PoolStatusController(kube, metrics=Metrics(CollectorRegistry()), clock=lambda: NOW)
    c.queued = []
    c.queue.add = c.queued.append
    return c


def test_only_requests_without_status_are_queued():
    c = controller(FakeApi())
    c.on_request(request("new"), deleted=False)
    c.on_request(request("done", status={"poolCount": 0}), deleted=False)
    assert c.queued == ["new"]


async def test_answer_written_to_status_once_and_counted():
    kube = fake_api(request())
    c = controller(kube)
    c.on_slice(slice_(), deleted=False)
    c.on_request(request(), deleted=False)
    await c.sync("r")
    assert calls(kube) == [("replace", "r", "status")]
    assert c.requests.get("r")["status"]["pools"][0]["totalDevices"] == 1
    await c.sync("r")  # answered: skipped, as upstream
    assert len(calls(kube)) == 1
    assert kube.stored(RESOURCE_POOL_STATUS_REQUESTS, "r")["status"]["pools"][0]["totalDevices"] == 1
    registry = c.metrics.registry
    assert (
        registry.get_sample_value(
            "resourcepoolstatusrequest_controller_requests_processed_total", {"driver_name": "drv"}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "resourcepoolstatusrequest_controller_request_processing_duration_seconds_count", {"driver_name": "drv"}
        )
        == 1
    )


async def test_incomplete_pool_retried_then_dropped_after_max_retries():
    kube = fake_api(request())
    c = controller(kube)
    c.on_slice(slice_(count=2), deleted=False)
    c.on_request(request(), deleted=False)
    for attempt in range(MAX_RETRIES):
        with pytest.raises(RetryableError, match="incomplete pools"):
            await c.process("r")
        c.queue._failures["r"] = attempt + 1  # what the queue's add_rate_limited counts
    await c.process("r")  # the sixth failure is dropped: no raise, nothing written, nothing counted
    assert calls(kube) == []
    assert (
        c.metrics.registry.get_sample_value(
            "resourcepoolstatusrequest_controller_requests_processed_total", {"driver_name": "drv"}
        )
        is None
    )


async def test_failed_status_update_counts_an_error_and_retries():
    c = controller(fake_api(request(), stale=True))  # someone else wrote it meanwhile: a real 409
    c.on_request(request(), deleted=False)
    with pytest.raises(RetryableError, match="failed to update status"):
        await c.sync("r")
    registry = c.metrics.registry
    assert (
        registry.get_sample_value(
            "resourcepoolstatusrequest_controller_request_processing_errors_total", {"driver_name": "drv"}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "resourcepoolstatusrequest_controller_requests_processed_total", {"driver_name": "drv"}
        )
        == 1
    )


async def test_cleanup_deletes_expired_requests_with_uid_precondition():
    kube = fake_api(request("old-done"), request("young-done"), request("pending"), request("young-pending"))
    c = controller(kube)
    complete = {
        "poolCount": 0,
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-23T15:59:00Z"}],
    }
    fresh = {
        "poolCount": 0,
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-23T16:30:00Z"}],
    }
    c.on_request(request("old-done", status=complete), deleted=False)
    c.on_request(request("young-done", status=fresh), deleted=False)
    c.on_request(request("pending", created="2026-11-22T16:00:00Z"), deleted=False)
    c.on_request(request("young-pending", created="2026-11-23T16:59:00Z"), deleted=False)
    assert await c.cleanup_expired() == 2
    assert sorted(calls(kube)) == [("delete", "old-done", "u-old-done"), ("delete", "pending", "u-pending")]
    assert [r["metadata"]["name"] for r in kube.objects(RESOURCE_POOL_STATUS_REQUESTS)] == [
        "young-done",
        "young-pending",
    ]


async def test_cleanup_ignores_requests_already_gone():
    c = controller(FakeApi())  # the API server no longer has it: a real 404
    c.on_request(request("pending", created="2026-11-22T16:00:00Z"), deleted=False)
    assert await c.cleanup_expired() == 0
