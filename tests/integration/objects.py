"""Builders for the DRA objects the tests create."""

from __future__ import annotations

from typing import Any

from operators.core.dra.podgroup import API_VERSION


def device_class(name: str, driver: str, extra_selector: str | None = None) -> dict[str, Any]:
    selectors = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
    if extra_selector:
        selectors.append({"cel": {"expression": extra_selector}})
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": selectors},
    }


def device(name: str, model: str = "lab-gpu", memory: str = "16Gi", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "attributes": {"model": {"string": model}, "index": {"int": int(name.rsplit("-", 1)[-1])}},
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


def resource_slice(
    name: str, driver: str, node: str, devices: list[dict[str, Any]], pool: str | None = None, generation: int = 1
) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim_spec(device_class_name: str, request: str = "gpu", count: int = 1) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": request,
                    "exactly": {"deviceClassName": device_class_name, "allocationMode": "ExactCount", "count": count},
                }
            ]
        }
    }


def resource_claim(name: str, device_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": claim_spec(device_class_name),
    }


def resource_claim_template(name: str, device_class_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(device_class_name)},
    }


def pod(name: str, claims: dict[str, dict[str, str]]) -> dict[str, Any]:
    """``claims`` maps a pod claim name to {"resourceClaimName": ...} or
    {"resourceClaimTemplateName": ...}; the one container uses all of them."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": n, **source} for n, source in claims.items()],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": n} for n in claims]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def pod_group(name: str, claims: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A PodGroup (scheduling.k8s.io, KEP-5729) with ``claims`` as in ``pod``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "resourceClaims": [{"name": n, **source} for n, source in claims.items()],
        },
    }


def member(name: str, group: str, claims: dict[str, dict[str, str]]) -> dict[str, Any]:
    """A Pod of the PodGroup ``group``."""
    body = pod(name, claims)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body
