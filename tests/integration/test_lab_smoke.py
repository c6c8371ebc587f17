"""The lab is a real control plane: the real scheduler allocates devices, the API server
validates DRA objects, and upstream's controllers can be switched on for comparison."""

from __future__ import annotations

import pytest

from operators.core.api.kube import ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)

from . import objects
from .waiting import wait_for_object

DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def _running(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") == "Running"


async def test_scheduler_allocates_device_from_slice_and_pod_runs(kube: Kube, namespace, unique, cluster_objects):
    driver = f"smoke-{unique}.lab.dra-operators.dev"
    node = "lab-node-1"
    await cluster_objects.create(
        DEVICE_CLASSES,
        objects.device_class(
            f"smoke-{unique}", driver, extra_selector='device.attributes["' + driver + '"].model == "lab-gpu"'
        ),
    )
    await cluster_objects.create(
        RESOURCE_SLICES,
        objects.resource_slice(f"{node}-{unique}", driver, node, [objects.device("gpu-0"), objects.device("gpu-1")]),
    )
    await kube.create(RESOURCE_CLAIMS, objects.resource_claim("claim", f"smoke-{unique}"), namespace)
    await kube.create(PODS, objects.pod("consumer", {"gpu": {"resourceClaimName": "claim"}}), namespace)

    pod = await wait_for_object(kube, PODS, "consumer", namespace, _running, what="Pod consumer Running")
    assert pod["spec"]["nodeName"] == node

    claim = await kube.get(RESOURCE_CLAIMS, "claim", namespace)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1
    assert results[0]["driver"] == driver and results[0]["pool"] == node
    assert results[0]["device"] in {"gpu-0", "gpu-1"} and results[0]["request"] == "gpu"
    assert claim["status"]["reservedFor"] == [{"resource": "pods", "name": "consumer", "uid": pod["metadata"]["uid"]}]
    assert DELETE_PROTECTION in claim["metadata"]["finalizers"]


async def test_api_server_rejects_slice_over_device_limit(kube: Kube, unique):
    driver = f"limit-{unique}.lab.dra-operators.dev"
    body = objects.resource_slice(
        f"too-many-{unique}", driver, "lab-node-0", [objects.device(f"gpu-{i}") for i in range(129)]
    )
    with pytest.raises(ApiError) as info:
        await kube.create(RESOURCE_SLICES, body)
    assert info.value.status == 422
    assert "spec.devices" in info.value.message and "128" in info.value.message


async def test_api_server_rejects_device_class_with_bad_cel(kube: Kube, unique):
    body = objects.device_class(f"bad-{unique}", "x.example.com", extra_selector="device.driver ==")
    with pytest.raises(ApiError) as info:
        await kube.create(DEVICE_CLASSES, body)
    assert info.value.status == 422
    assert "spec.selectors[1].cel.expression" in info.value.message
    assert "compilation failed" in info.value.message


async def test_upstream_resourceclaim_controller_generates_claim(
    kube: Kube, namespace, unique, cluster_objects, controllers
):
    controllers.use("upstream")
    driver = f"tmpl-{unique}.lab.dra-operators.dev"
    await cluster_objects.create(DEVICE_CLASSES, objects.device_class(f"tmpl-{unique}", driver))
    await cluster_objects.create(
        RESOURCE_SLICES, objects.resource_slice(f"lab-node-0-{unique}", driver, "lab-node-0", [objects.device("gpu-0")])
    )
    await kube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("tmpl", f"tmpl-{unique}"), namespace)
    pod = await kube.create(PODS, objects.pod("worker", {"gpu": {"resourceClaimTemplateName": "tmpl"}}), namespace)

    pod = await wait_for_object(
        kube,
        PODS,
        "worker",
        namespace,
        lambda p: p.get("status", {}).get("resourceClaimStatuses"),
        what="pod.status.resourceClaimStatuses from upstream's controller",
    )
    [status] = pod["status"]["resourceClaimStatuses"]
    assert status["name"] == "gpu" and status["resourceClaimName"].startswith("worker-gpu-")
    claim = await kube.get(RESOURCE_CLAIMS, status["resourceClaimName"], namespace)
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    [owner] = claim["metadata"]["ownerReferences"]
    assert owner["kind"] == "Pod" and owner["uid"] == pod["metadata"]["uid"] and owner["controller"] is True
    await wait_for_object(kube, PODS, "worker", namespace, _running, what="Pod worker Running")


# The newest DeviceTaintRule version of each release (storage_resource.go): GA in 1.37.
TAINT_RULE_VERSION = {34: "v1alpha3", 35: "v1alpha3", 36: "v1beta2"}


async def test_device_taint_rule_round_trip_in_served_version(lab, kube: Kube, unique, cluster_objects):
    rules = await kube.preferred_version(DEVICE_TAINT_RULES)
    assert rules is not None, "DeviceTaintRule is not served"
    assert rules.version == TAINT_RULE_VERSION.get(lab.minor, "v1")
    body = {
        "apiVersion": rules.group_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"rule-{unique}"},
        "spec": {
            "deviceSelector": {"driver": f"rule-{unique}.lab.dra-operators.dev", "pool": "lab-node-0"},
            "taint": {"key": "lab.dra-operators.dev/broken", "value": "yes", "effect": "NoSchedule"},
        },
    }
    created = await cluster_objects.create(rules, body)
    read = await kube.get(rules, f"rule-{unique}")
    assert read["apiVersion"] == rules.group_version
    assert read["spec"]["taint"]["key"] == "lab.dra-operators.dev/broken"
    assert read["spec"]["taint"]["effect"] == "NoSchedule"
    assert "timeAdded" in read["spec"]["taint"]  # defaulted by the API server
    assert read["metadata"]["uid"] == created["metadata"]["uid"]
