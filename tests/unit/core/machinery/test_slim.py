"""What the caches keep of a Pod."""

from operators.core.dra import resourceclaim as rc
from operators.core.machinery import slim
from operators.core.machinery.store import Store


def full_pod():
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "managedFields": [{"manager": "kubectl"}],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "nodeName": "n",
            "containers": [{"name": "c", "image": "i", "env": [{"name": "X"}]}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}],
            "volumes": [{}],
        },
        "status": {
            "phase": "Running",
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu"}],
            "conditions": [{"type": "DisruptionTarget"}],
            "containerStatuses": [{}],
            "podIP": "1.2.3.4",
        },
    }


def test_a_cached_pod_keeps_what_the_decisions_read_and_nothing_else():
    pod = full_pod()
    cached = slim.pod(pod)
    assert cached["metadata"] == {k: v for k, v in pod["metadata"].items() if k != "managedFields"}
    assert cached["spec"] == {"nodeName": "n", "resourceClaims": pod["spec"]["resourceClaims"]}
    assert set(cached["status"]) == {"phase", "resourceClaimStatuses", "conditions"}
    assert rc.pod_claim_keys(cached) == rc.pod_claim_keys(pod) == ["ns/p-gpu"]
    assert rc.is_pod_done(cached) == rc.is_pod_done(pod)
    assert "managedFields" in pod["metadata"] and "containers" in pod["spec"]  # the input is left alone


def test_a_store_with_the_transform_keeps_the_slim_pod():
    store = Store(transform=slim.pod)
    pod = full_pod()
    del pod["metadata"]["deletionTimestamp"]  # else it counts as gone already
    assert store.upsert(pod)
    assert "containers" not in store.get("ns/p")["spec"] and store.get("ns/p")["spec"]["nodeName"] == "n"
