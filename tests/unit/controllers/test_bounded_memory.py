"""Memory that only grew (issue 26): after 10,000 objects came and went, every structure the
controllers keep per object is back at its size before them. Driven through the controllers'
own handlers and syncs, with an API server that answers as the cycle needs."""

import copy

import pytest

from operators.claims.controller import ClaimsController
from operators.core.api.kube import ApiError
from operators.core.api.resources import PODS
from operators.core.machinery import store as stores
from operators.core.machinery.events import NORMAL, EventRecorder
from operators.core.machinery.workqueue import RetryableError
from operators.taints.controller import TaintsController
from tests.fakeapi import FakeApi
from tests.unit.fakeclock import Clock

CYCLES = 10_000
UNAVAILABLE = {"reason": "ServiceUnavailable", "message": "etcd leader changed"}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "t", "namespace": "ns", "uid": "u-t", "resourceVersion": "1"},
    "spec": {"spec": {"devices": {"requests": []}}},
}


def claims_pod(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u-p{i}", "resourceVersion": "10"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
        "status": {},
    }


def claims_api() -> FakeApi:
    """Every create fails with 503 (the API server may have carried it out, as it had); the
    Pod's status patch, after the claim was found, goes through."""
    api = FakeApi()
    api.fail("create", "*", ApiError(503, UNAVAILABLE, "POST", "resourceclaims"))
    return api


def generated_claim(pod: dict) -> dict:
    name = pod["metadata"]["name"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": f"{name}-gpu-x",
            "namespace": "ns",
            "uid": f"u-c-{name}",
            "resourceVersion": "12",
            "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod["metadata"]["uid"], "controller": True}
            ],
        },
        "spec": {"devices": {"requests": []}},
    }


async def test_lost_claim_creates_are_forgotten_once_settled_or_their_pod_is_gone():
    kube = claims_api()
    controller = ClaimsController(kube)
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    baseline = len(controller._uncertain_creates), len(controller.pods), len(controller.claims)
    for i in range(CYCLES):
        pod = claims_pod(i)
        kube.add(pod, PODS)
        controller.on_pod(copy.deepcopy(pod), False)
        with pytest.raises(RetryableError, match="outcome unknown"):
            await controller.sync_pod("ns", pod["metadata"]["name"])
        if i % 2:  # the create had been carried out: its claim's watch event, then the retry finds it
            claim = generated_claim(pod)
            controller.on_claim(copy.deepcopy(claim), False)
            await controller.sync_pod("ns", pod["metadata"]["name"])
            controller.on_claim(claim, True)
        controller.on_pod(pod, True)  # gone (in half the cycles before any retry)
        kube.remove(PODS, pod["metadata"]["name"], "ns")
    assert (len(controller._uncertain_creates), len(controller.pods), len(controller.claims)) == baseline


def tainted_slice() -> dict:
    return {
        "metadata": {"name": "s", "resourceVersion": "1"},
        "spec": {
            "driver": "drv",
            "pool": {"name": "n0", "generation": 1},
            "devices": [
                {"name": "gpu-0", "taints": [{"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]}
            ],
        },
    }


def taints_claim(i: int) -> dict:
    return {
        "metadata": {"name": f"c{i}", "namespace": "ns", "uid": f"u-c{i}", "resourceVersion": "1"},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "r", "driver": "drv", "pool": "n0", "device": "gpu-0"}]}
            },
            "reservedFor": [{"resource": "pods", "name": f"p{i}", "uid": f"u-p{i}"}],
        },
    }


def taints_pod(i: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u-p{i}", "resourceVersion": "1"},
        "spec": {"nodeName": "n0", "resourceClaims": [{"name": "gpu", "resourceClaimName": f"c{i}"}]},
        "status": {"phase": "Running"},
    }


def taints_api() -> FakeApi:
    """The Pod is there; its DisruptionTarget condition cannot be written (503); Events go out."""
    api = FakeApi()
    api.fail("patch", "pods", ApiError(503, UNAVAILABLE, "PATCH", "pods"))
    return api


async def test_a_failed_eviction_of_a_pod_someone_else_deleted_leaves_nothing_behind():
    kube = taints_api()
    controller = TaintsController(kube=kube, rules=None, rule_status=False)
    controller.prime(rules=[], classes=[], slices=[tainted_slice()], claims=[], pods=[])
    per_pod = ("marked", "pending", "admitted", "in_flight", "parked", "_timers", "_claim_evictions")

    def sizes() -> dict[str, int]:
        return {name: len(getattr(controller, name)) for name in per_pod} | {
            "pods": len(controller.pods),
            "claims": len(controller.claims),
        }

    baseline = sizes()
    for i in range(CYCLES):
        pod, claim = taints_pod(i), taints_claim(i)
        kube.add(pod, PODS)
        controller.on_claim(copy.deepcopy(claim), False)
        controller.on_pod(copy.deepcopy(pod), False)
        with pytest.raises(RetryableError, match="delete pod"):
            await controller.sync_pod(f"ns/p{i}")  # marked for deletion, then the API server failed
        controller.on_pod(pod, True)  # deleted by someone else before the retry
        kube.remove(PODS, pod["metadata"]["name"], "ns")
        controller.on_claim(claim, True)
    await controller.events.flush()
    assert sizes() == baseline


def test_tombstones_last_their_ttl_not_until_ten_thousand_more_deletes():
    clock = Clock()
    store = stores.Store(clock=clock)
    store.upsert({"metadata": {"name": "stays", "namespace": "ns", "uid": "u-stays", "resourceVersion": "1"}})
    baseline = store.tombstones
    for i in range(CYCLES):
        obj = {"metadata": {"name": f"o{i}", "namespace": "ns", "uid": f"u{i}", "resourceVersion": "1"}}
        store.upsert(obj)
        store.delete(obj)
        clock.now += 0.01
    assert store.was_deleted(f"u{CYCLES - 1}")  # still guarding against a late copy
    clock.now += stores.TOMBSTONE_TTL
    assert store.tombstones == baseline and not store.was_deleted(f"u{CYCLES - 1}")


async def test_the_event_repeat_cache_forgets_what_can_no_longer_repeat():
    clock = Clock()
    api = FakeApi()
    recorder = EventRecorder(api, "test", clock=clock)
    standing = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "standing", "namespace": "ns", "uid": "u-s"}}
    await recorder.event(standing, NORMAL, "Reason", "message")
    baseline = recorder.remembered
    for i in range(CYCLES):  # far below the count limit per ten minutes, as a calm cluster's hours
        await recorder.event(
            {"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"}}, NORMAL, "Reason", "message"
        )
        clock.now += 0.5
    await recorder.event(standing, NORMAL, "Reason", "message")  # a repeat keeps its own entry
    clock.now += 600
    await recorder.event(standing, NORMAL, "Reason", "message")
    assert recorder.remembered == baseline
