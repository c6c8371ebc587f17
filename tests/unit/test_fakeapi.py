"""The shared fake API (tests/fakeapi.py) answers as kube-apiserver does where the controllers
depend on it: Status errors, resourceVersion checks, status subresources, finalizers, reactors."""

import asyncio

import pytest

from operators.core.api.kube import APPLY_PATCH, JSON_PATCH, STRATEGIC_PATCH, ApiError
from operators.core.api.resources import EVENTS, LEASES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from tests.fakeapi import Action, FakeApi, not_found, service_unavailable

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n"},
    "status": {"phase": "Running"},
}


async def test_create_assigns_uid_and_resource_version_and_refuses_a_second_one():
    api = FakeApi()
    created = await api.create(PODS, POD)
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"] == "1"
    with pytest.raises(ApiError) as e:
        await api.create(PODS, POD)
    assert e.value.already_exists and e.value.body["message"] == 'pods "p" already exists'
    assert e.value.body["details"] == {"name": "p", "kind": "pods"}


async def test_generate_name_and_namespace_from_the_call():
    api = FakeApi()
    claim = await api.create(RESOURCE_CLAIMS, {"metadata": {"generateName": "p-gpu-"}}, "ns")
    assert claim["metadata"]["name"] == "p-gpu-00001" and claim["metadata"]["namespace"] == "ns"


async def test_not_found_is_a_status_with_the_group():
    api = FakeApi()
    with pytest.raises(ApiError) as e:
        await api.get(RESOURCE_CLAIMS, "c", "ns")
    assert e.value.not_found and e.value.reason == "NotFound"
    assert e.value.message == 'resourceclaims.resource.k8s.io "c" not found'
    assert await api.get_or_none(RESOURCE_CLAIMS, "c", "ns") is None


async def test_replace_with_a_stale_resource_version_conflicts():
    api = FakeApi([POD])
    stored = await api.get(PODS, "p", "ns")
    await api.replace(PODS, {**stored, "spec": {"nodeName": "m"}})
    with pytest.raises(ApiError) as e:
        await api.replace(PODS, {**stored, "spec": {"nodeName": "o"}})
    assert e.value.conflict and e.value.reason == "Conflict" and "has been modified" in e.value.message
    assert api.stored(PODS, "p", "ns")["spec"] == {"nodeName": "m"}


async def test_status_and_object_are_written_apart():
    api = FakeApi([POD])
    stored = await api.get(PODS, "p", "ns")
    after = await api.replace(PODS, {**stored, "spec": {}, "status": {"phase": "Failed"}}, subresource="status")
    assert after["spec"] == {"nodeName": "n"} and after["status"] == {"phase": "Failed"}
    after = await api.replace(PODS, {**after, "status": {"phase": "Pending"}, "spec": {"nodeName": "x"}})
    assert after["spec"] == {"nodeName": "x"} and after["status"] == {"phase": "Failed"}


async def test_patches_merge_strategic_apply_and_json():
    api = FakeApi([POD])
    cond = {"type": "Ready", "status": "True"}
    await api.patch(PODS, "p", {"status": {"conditions": [cond]}}, "ns", subresource="status")
    await api.patch(
        PODS,
        "p",
        {"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}},
        "ns",
        content_type=STRATEGIC_PATCH,
        subresource="status",
    )
    assert [c["type"] for c in api.stored(PODS, "p", "ns")["status"]["conditions"]] == ["Ready", "DisruptionTarget"]
    await api.request(
        "PATCH",
        PODS.path("ns", "p", "status"),
        content_type=APPLY_PATCH,
        params=[("force", "true")],
        body={
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c"}]},
        },
    )
    await api.patch(
        PODS, "p", [{"op": "replace", "path": "/spec/nodeName", "value": "m"}], "ns", content_type=JSON_PATCH
    )
    stored = api.stored(PODS, "p", "ns")
    assert stored["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": "c"}]
    assert stored["spec"]["nodeName"] == "m"
    with pytest.raises(ApiError) as e:
        await api.patch(PODS, "p", {"metadata": {"uid": "other"}}, "ns")
    assert e.value.conflict and "Precondition failed" in e.value.message


async def test_delete_with_preconditions_and_finalizers():
    api = FakeApi([{**POD, "metadata": {**POD["metadata"], "finalizers": ["f"]}}])
    with pytest.raises(ApiError) as e:
        await api.delete(PODS, "p", "ns", uid="nope")
    assert e.value.conflict
    marked = await api.delete(PODS, "p", "ns")
    assert marked["metadata"]["deletionTimestamp"]
    await api.replace(PODS, {**marked, "metadata": {**marked["metadata"], "finalizers": []}})
    assert api.stored(PODS, "p", "ns") is None
    with pytest.raises(ApiError) as e:
        await api.delete(PODS, "p", "ns")
    assert e.value.not_found


async def test_eviction_deletes_the_pod_instance_it_names():
    api = FakeApi([POD])
    uid = api.stored(PODS, "p", "ns")["metadata"]["uid"]
    body = {"deleteOptions": {"preconditions": {"uid": "old"}}}
    with pytest.raises(ApiError):
        await api.request("POST", PODS.path("ns", "p", "eviction"), body=body)
    body["deleteOptions"]["preconditions"]["uid"] = uid
    await api.request("POST", PODS.path("ns", "p", "eviction"), body=body)
    assert api.stored(PODS, "p", "ns") is None
    assert [a.key for a in api.actions] == ["create pods/eviction ns/p"] * 2


async def test_list_by_namespace_label_and_keep():
    api = FakeApi([POD, {**POD, "metadata": {"name": "q", "namespace": "other", "labels": {"a": "b"}}}])
    assert [p["metadata"]["name"] for p in await api.list(PODS)] == ["p", "q"]
    assert [p["metadata"]["name"] for p in await api.list(PODS, "ns")] == ["p"]
    assert [p["metadata"]["name"] for p in await api.list(PODS, label_selector="a=b")] == ["q"]
    items, version = await api.list_with_version(PODS, keep=lambda p: p["metadata"]["name"] == "p")
    assert len(items) == 1 and version == "2"


async def test_reactors_come_first_and_every_call_is_recorded():
    api = FakeApi()
    api.fail("create", "resourceslices", service_unavailable(), times=1)
    with pytest.raises(ApiError) as e:
        await api.create(RESOURCE_SLICES, {"metadata": {"name": "s"}})
    assert e.value.status == 503
    await api.create(RESOURCE_SLICES, {"metadata": {"name": "s"}})

    def renamed(action: Action):
        action.obj["metadata"]["name"] = "renamed"  # passed on to the tracker

    api.prepend_reactor("create", "*", renamed)
    await api.create(RESOURCE_SLICES, {"metadata": {"name": "t"}})
    api.prepend_reactor("get", "resourceslices", lambda action: (True, {"answered": action.name}))
    assert await api.get(RESOURCE_SLICES, "x") == {"answered": "x"}
    assert [a.key for a in api.actions] == [
        "create resourceslices s",
        "create resourceslices s",
        "create resourceslices t",
        "get resourceslices x",
    ]
    assert [s["metadata"]["name"] for s in api.objects(RESOURCE_SLICES)] == ["renamed", "s"]


async def test_an_async_reactor_holds_the_call_and_track_carries_it_out():
    api = FakeApi()
    gate = asyncio.Event()

    async def slow(action: Action):
        await gate.wait()
        result = api.track(action)
        raise not_found(LEASES, action.name) if result is None else service_unavailable()

    api.prepend_reactor("create", "leases", slow)
    call = asyncio.ensure_future(api.create(LEASES, {"metadata": {"name": "l", "namespace": "ns"}}))
    await asyncio.sleep(0)
    assert not call.done() and api.stored(LEASES, "l", "ns") is None
    gate.set()
    with pytest.raises(ApiError):
        await call
    assert api.stored(LEASES, "l", "ns") is not None  # carried out, the answer lost


async def test_objects_by_kind_and_event_creation():
    api = FakeApi({EVENTS: [{"metadata": {"name": "e", "namespace": "ns"}, "reason": "R"}]})
    await api.create(EVENTS, {"metadata": {"name": "f", "namespace": "ns"}, "reason": "S"})
    assert [e["reason"] for e in api.objects(EVENTS, "ns")] == ["R", "S"]
    assert api.action_keys() == [] and api.action_keys(skip=()) == ["create events ns/f"]
