"""A small world for claims scenarios: a namespace, a driver with devices on one node, and the
verbs the scenarios use. Every name that differs between two runs contains ``token``."""

from __future__ import annotations

import json
from typing import Any, Self

from operators.core.api.kube import MERGE_PATCH, STRATEGIC_PATCH, ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.lab.components import FINISH_ANNOTATION

from . import objects
from .compare import settled_snapshot
from .waiting import describe_namespace, wait_for, wait_for_object

NODE = "lab-node-0"


class ClaimsEnv:
    """``all_nodes``: the devices are reachable from every Node (an ``allNodes`` slice), so Pods
    sharing a claim may spread over the lab's Nodes; ``extended_resource``: the class also
    answers the extended resource ``self.extended_resource`` (DRAExtendedResource)."""

    def __init__(
        self, kube: Kube, token: str, devices: int = 8, all_nodes: bool = False, extended_resource: bool = False
    ):
        self.kube = kube
        self.token = token
        self.namespace = f"cl-{token}"
        self.driver = f"{token}.claims.lab.dra-operators.dev"
        self.device_class = f"class-{token}"
        self.devices = devices
        self.all_nodes = all_nodes
        self.extended_resource = f"{token}.lab.dra-operators.dev/gpu" if extended_resource else None
        self.mode = ""  # "upstream" or "ours", set by the runner
        self.controllers: Any = None  # conftest's Controllers switch, for scenarios that restart them

    async def __aenter__(self) -> Self:
        await self.kube.create(NAMESPACES, {"metadata": {"name": self.namespace}})
        device_class = objects.device_class(self.device_class, self.driver)
        if self.extended_resource:
            device_class["spec"]["extendedResourceName"] = self.extended_resource
        await self.kube.create(DEVICE_CLASSES, device_class)
        body = objects.resource_slice(
            f"slice-{self.token}", self.driver, NODE, [objects.device(f"gpu-{i}") for i in range(self.devices)]
        )
        if self.all_nodes:
            del body["spec"]["nodeName"]
            body["spec"]["allNodes"] = True
            body["spec"]["pool"]["name"] = "everywhere"
        await self.kube.create(RESOURCE_SLICES, body)
        await wait_for(
            lambda: self.kube.get_or_none(SERVICE_ACCOUNTS, "default", self.namespace),
            timeout=30,
            what="default ServiceAccount",
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for res, name in (
            (NAMESPACES, self.namespace),
            (RESOURCE_SLICES, f"slice-{self.token}"),
            (DEVICE_CLASSES, self.device_class),
        ):
            try:
                await self.kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise

    # -- verbs -------------------------------------------------------------------------------

    async def template(self, name: str, labels: dict | None = None, annotations: dict | None = None) -> None:
        body = objects.resource_claim_template(name, self.device_class)
        meta = {k: v for k, v in (("labels", labels), ("annotations", annotations)) if v}
        if meta:
            body["spec"]["metadata"] = meta
        await self.kube.create(RESOURCE_CLAIM_TEMPLATES, body, self.namespace)

    async def claim(self, name: str) -> None:
        await self.kube.create(RESOURCE_CLAIMS, objects.resource_claim(name, self.device_class), self.namespace)

    async def pod(
        self,
        name: str,
        claims: dict[str, dict[str, str]],
        node: str | None = None,
        *,
        scheduler: str | None = None,
        extended: int = 0,
    ) -> None:
        body = objects.pod(name, claims)
        if node:
            body["spec"]["nodeName"] = node
        if scheduler:
            body["spec"]["schedulerName"] = scheduler  # no such scheduler: the Pod stays Pending
        if extended:
            body["spec"]["containers"][0]["resources"]["limits"] = {self.extended_resource: str(extended)}
        await self.kube.create(PODS, body, self.namespace)

    async def patch_pod_status(self, pod: str, status: dict) -> dict:
        """Another writer of ``pods/status`` (strategic merge: conditions merge by type)."""
        return await self.kube.patch(
            PODS, pod, {"status": status}, self.namespace, content_type=STRATEGIC_PATCH, subresource="status"
        )

    async def finish(self, pod: str, phase: str = "Succeeded") -> None:
        await self.kube.patch(
            PODS,
            pod,
            {"metadata": {"annotations": {FINISH_ANNOTATION: phase}}},
            self.namespace,
            content_type=MERGE_PATCH,
        )
        await self.wait_pod(pod, lambda p: p["status"].get("phase") == phase, f"pod {pod} {phase}")

    async def delete_pod(self, pod: str) -> None:
        await self.kube.delete(PODS, pod, self.namespace)
        await wait_for(lambda: self._gone(PODS, pod), what=f"pod {pod} gone", describe=self.describe)

    async def delete_claim(self, claim: str) -> None:
        await self.kube.delete(RESOURCE_CLAIMS, claim, self.namespace)

    async def drop_finalizers(self, claim: str) -> None:
        await self.kube.patch(RESOURCE_CLAIMS, claim, {"metadata": {"finalizers": None}}, self.namespace)

    # -- waiting -----------------------------------------------------------------------------

    async def describe(self) -> str:
        return await describe_namespace(self.kube, self.namespace)

    async def wait_pod(self, pod: str, predicate, what: str, timeout: float = 60) -> dict:
        return await wait_for_object(self.kube, PODS, pod, self.namespace, predicate, what=what, timeout=timeout)

    async def wait_running(self, pod: str) -> dict:
        return await self.wait_pod(pod, lambda p: p["status"].get("phase") == "Running", f"pod {pod} Running")

    async def claim_of(self, pod: str, pod_claim: str) -> str:
        found = await self.wait_pod(
            pod,
            lambda p: any(
                s["name"] == pod_claim and s.get("resourceClaimName")
                for s in p["status"].get("resourceClaimStatuses") or []
            ),
            f"pod {pod} claim {pod_claim}",
        )
        return next(s["resourceClaimName"] for s in found["status"]["resourceClaimStatuses"] if s["name"] == pod_claim)

    async def wait_claim(self, claim: str, predicate, what: str, timeout: float = 60) -> dict:
        return await wait_for_object(
            self.kube, RESOURCE_CLAIMS, claim, self.namespace, predicate, what=what, timeout=timeout
        )

    async def wait_no_claims(self, timeout: float = 60) -> None:
        async def none_left() -> bool:
            return not await self.kube.list(RESOURCE_CLAIMS, self.namespace)

        await wait_for(none_left, timeout=timeout, what="no ResourceClaim left", describe=self.describe)

    async def wait_event(self, reason: str) -> None:
        async def seen() -> bool:
            from operators.core.api.resources import EVENTS

            return any(e.get("reason") == reason for e in await self.kube.list(EVENTS, self.namespace))

        await wait_for(seen, timeout=60, what=f"Event {reason}", describe=self.describe)

    async def _gone(self, res, name: str) -> bool:
        return await self.kube.get_or_none(res, name, self.namespace) is None

    async def snapshot(self) -> dict[str, Any]:
        """A settled snapshot with this run's token replaced, comparable across runs."""
        snap = await settled_snapshot(self.kube, self.namespace)
        for claim in snap["claims"]:
            claim["reservedFor"].sort(key=lambda r: r["name"])
        return json.loads(json.dumps(snap).replace(self.token, "<run>"))
