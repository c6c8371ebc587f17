"""A small world for device-taint scenarios: a namespace, a driver with devices on the lab's
Nodes, a watch that sees every Pod's last state (evicted Pods vanish within milliseconds on
kwok), and snapshots comparable between upstream's controller and ours. Every name that
differs between two runs contains ``token``."""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from pathlib import Path
from typing import Any

from operators.core.api.kube import MERGE_PATCH, ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    EVENTS,
    NAMESPACES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.core.dra.metatime import format_time
from operators.taints import decisions as d

from . import objects
from .waiting import describe_namespace, wait_for, wait_for_object

NODES = ("lab-node-0", "lab-node-1")
COMPONENT = d.CONTROLLER_NAME


class PodWatch:
    """Watches the namespace's Pods: when each was first seen deleting, and its last state."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.last: dict[str, dict] = {}
        self.deleting_at: dict[str, float] = {}  # pod name -> time.time() when first seen deleting
        self.gone: set[str] = set()
        self.history: list[tuple[float, str, dict]] = []  # (time, event type, pod) in order
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        listing = await self.kube.request("GET", PODS.path(self.namespace))
        self._task = asyncio.create_task(self._run(listing["metadata"]["resourceVersion"]))

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, rv: str) -> None:
        while True:
            params = [("watch", "1"), ("resourceVersion", rv), ("timeoutSeconds", "240")]
            async with self.kube.stream(PODS.path(self.namespace), params, read_timeout=300) as lines:
                async for line in lines:
                    event = json.loads(line)
                    pod = event["object"]
                    if event["type"] == "ERROR":
                        rv = ""
                        break
                    rv = pod["metadata"]["resourceVersion"]
                    self._record(event["type"], pod)

    def _record(self, kind: str, pod: dict) -> None:
        name = pod["metadata"]["name"]
        now = time.time()
        self.last[name] = pod
        self.history.append((now, kind, pod))
        if (pod["metadata"].get("deletionTimestamp") or kind == "DELETED") and name not in self.deleting_at:
            self.deleting_at[name] = now
        if kind == "DELETED":
            self.gone.add(name)


class TaintsEnv:
    def __init__(
        self,
        kube: Kube,
        token: str,
        mode: str,
        devices: int = 4,
        nodes: tuple[str, ...] = NODES[:1],
        extended_resource: bool = False,
        minor: int = 37,
    ):
        self.kube, self.token, self.mode, self.minor = kube, token, mode, minor
        self.namespace = f"tn-{token}"
        self.driver = f"{token}.taints.lab.dra-operators.dev"
        self.device_class = f"taints-{token}"
        self.taint_key = f"{self.driver}/unhealthy"
        self.extended_resource = f"{token}.lab.dra-operators.dev/gpu" if extended_resource else None
        self.devices, self.nodes = devices, nodes
        self.rules: list[str] = []
        self.rules_res = DEVICE_TAINT_RULES  # at the version the release serves: set on entry
        self.slices: list[str] = []
        self.watch = PodWatch(kube, self.namespace)

    async def __aenter__(self) -> TaintsEnv:
        self.rules_res = await self.kube.preferred_version(DEVICE_TAINT_RULES) or DEVICE_TAINT_RULES
        await self.kube.create(NAMESPACES, {"metadata": {"name": self.namespace}})
        device_class = objects.device_class(self.device_class, self.driver)
        if self.extended_resource:
            device_class["spec"]["extendedResourceName"] = self.extended_resource
        await self.kube.create(DEVICE_CLASSES, device_class)
        for node in self.nodes:
            await self.add_slice(
                f"{node}-{self.token}", node, [objects.device(f"gpu-{i}") for i in range(self.devices)]
            )
        await wait_for(
            lambda: self.kube.get_or_none(SERVICE_ACCOUNTS, "default", self.namespace),
            timeout=30,
            what="default ServiceAccount",
        )
        await self.watch.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.watch.stop()
        for res, name in (
            [(self.rules_res, r) for r in self.rules]
            + [(NAMESPACES, self.namespace)]
            + [(RESOURCE_SLICES, s) for s in self.slices]
            + [(DEVICE_CLASSES, self.device_class)]
        ):
            try:
                await self.kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise

    # -- verbs -------------------------------------------------------------------------------

    def toleration(self, seconds: int | None = None, operator: str = "Equal") -> dict:
        t = {"key": self.taint_key, "operator": operator, "effect": "NoExecute"}
        if operator == "Equal":
            t["value"] = "true"
        if seconds is not None:
            t["tolerationSeconds"] = seconds
        return t

    def _spec(self, tolerations: list[dict] | None, selector: str | None, count: int = 1) -> dict:
        spec = objects.claim_spec(self.device_class, count=count)
        exactly = spec["devices"]["requests"][0]["exactly"]
        if tolerations:
            exactly["tolerations"] = tolerations
        if selector:
            exactly["selectors"] = [{"cel": {"expression": selector}}]
        return spec

    async def template(self, name: str, tolerations: list[dict] | None = None) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": {"spec": self._spec(tolerations, None)},
        }
        await self.kube.create(RESOURCE_CLAIM_TEMPLATES, body, self.namespace)

    async def claim(self, name: str, tolerations: list[dict] | None = None, index: int | None = None) -> None:
        selector = f'device.attributes["{self.driver}"].index == {index}' if index is not None else None
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": self._spec(tolerations, selector),
        }
        await self.kube.create(RESOURCE_CLAIMS, body, self.namespace)

    async def pod(
        self,
        name: str,
        claims: dict[str, dict[str, str]] | None = None,
        node: str | None = None,
        extended: int = 0,
        labels: dict | None = None,
    ) -> dict:
        body = objects.pod(name, claims or {})
        if node:
            body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        if extended:
            body["spec"]["containers"][0]["resources"]["limits"] = {self.extended_resource: str(extended)}
        if labels:
            body["metadata"]["labels"] = labels
        return await self.kube.create(PODS, body, self.namespace)

    async def pod_group(self, name: str, claims: dict[str, dict[str, str]]) -> None:
        await self.kube.create(POD_GROUPS, objects.pod_group(name, claims), self.namespace)

    async def member(self, name: str, group: str, claims: dict[str, dict[str, str]]) -> dict:
        return await self.kube.create(PODS, objects.member(name, group, claims), self.namespace)

    async def rule(
        self, short: str, selector: dict | None, effect: str = "NoExecute", annotations: dict | None = None
    ) -> dict:
        body = self.rule_body(short, selector, effect, annotations)
        self.rules.append(body["metadata"]["name"])
        return await self.kube.create(self.rules_res, body)

    def rule_body(
        self, short: str, selector: dict | None, effect: str = "NoExecute", annotations: dict | None = None
    ) -> dict:
        spec: dict[str, Any] = {"taint": {"key": self.taint_key, "value": "true", "effect": effect}}
        if selector is not None:
            spec["deviceSelector"] = selector
        meta: dict[str, Any] = {"name": f"{self.token}-{short}"}
        if annotations:
            meta["annotations"] = annotations
        return {"apiVersion": self.rules_res.group_version, "kind": "DeviceTaintRule", "metadata": meta, "spec": spec}

    async def add_slice(
        self,
        name: str,
        node: str,
        devices: list[dict],
        pool: str | None = None,
        generation: int = 1,
        slices_in_pool: int = 1,
    ) -> None:
        body = objects.resource_slice(name, self.driver, node, devices, pool, generation)
        body["spec"]["pool"]["resourceSliceCount"] = slices_in_pool
        await self.kube.create(RESOURCE_SLICES, body)
        self.slices.append(name)

    async def add_pool(self, node: str, devices: int, per_slice: int = 100) -> None:
        """The node's pool with ``devices`` devices in slices of at most ``per_slice``."""
        starts = list(range(0, devices, per_slice))
        for n, start in enumerate(starts):
            await self.add_slice(
                f"{node}-{n}-{self.token}",
                node,
                [objects.device(f"gpu-{i}") for i in range(start, min(devices, start + per_slice))],
                pool=node,
                slices_in_pool=len(starts),
            )

    async def set_device_taint(self, slice_name: str, device: str, effect: str | None) -> None:
        """Put a driver-published taint on a device of a slice, or remove it (effect None)."""
        slice_ = await self.kube.get(RESOURCE_SLICES, slice_name)
        for dev in slice_["spec"]["devices"]:
            if dev["name"] == device:
                if effect:
                    dev["taints"] = [{"key": self.taint_key, "value": "true", "effect": effect}]
                else:
                    dev.pop("taints", None)
        await self.kube.replace(RESOURCE_SLICES, slice_)

    async def delete_pod(self, name: str) -> None:
        await self.kube.delete(PODS, name, self.namespace)

    async def finish(self, pod: str) -> None:
        from operators.lab.components import FINISH_ANNOTATION

        await self.kube.patch(
            PODS,
            pod,
            {"metadata": {"annotations": {FINISH_ANNOTATION: "Succeeded"}}},
            self.namespace,
            content_type=MERGE_PATCH,
        )

    # -- waiting -----------------------------------------------------------------------------

    async def describe(self) -> str:
        rules = []
        for name in self.rules:
            rule = await self.kube.get_or_none(self.rules_res, name)
            rules.append(f"rule {name}: {json.dumps((rule or {}).get('status'))}")
        return await describe_namespace(self.kube, self.namespace) + "\n" + "\n".join(rules)

    async def wait_running(self, *pods: str, timeout: float = 60) -> None:
        for pod in pods:
            await wait_for_object(
                self.kube,
                PODS,
                pod,
                self.namespace,
                lambda p: p["status"].get("phase") == "Running",
                what=f"pod {pod} Running",
                timeout=timeout,
            )

    async def wait_evicted(self, *pods: str, timeout: float = 60) -> None:
        await wait_for(
            lambda: asyncio.sleep(0, all(p in self.watch.deleting_at for p in pods)),
            timeout=timeout,
            what=f"pods {pods} deleted",
            describe=self.describe,
        )

    @property
    def rules_have_status(self) -> bool:
        """DeviceTaintRules have a status from 1.35 on (1.34's v1alpha3 has none)."""
        return self.minor >= 35

    async def wait_rule(self, short: str, reason: str, message: str | None = None, timeout: float = 40) -> dict:
        """The rule once its condition says ``reason``; without rule status (1.34), the rule as
        it is: a scenario that runs there waits on something else (an eviction)."""
        name = f"{self.token}-{short}"
        if not self.rules_have_status:
            return await self.kube.get(self.rules_res, name)

        def ok(rule: dict) -> bool:
            condition = d.existing_condition(rule)
            return (
                bool(condition)
                and condition["reason"] == reason
                and (message is None or condition["message"] == message)
            )

        return await wait_for_object(
            self.kube, self.rules_res, name, None, ok, what=f"rule {name} {reason} {message or ''}", timeout=timeout
        )

    async def wait_event(self, pod: str, message: str, timeout: float = 30) -> None:
        async def seen() -> bool:
            return any(
                e["involvedObject"].get("name") == pod and e.get("message") == message for e in await self.our_events()
            )

        await wait_for(seen, timeout=timeout, what=f"event {message!r} on {pod}", describe=self.describe)

    async def our_events(self) -> list[dict]:
        return [
            e
            for e in await self.kube.list(EVENTS, self.namespace)
            if (e.get("source") or {}).get("component") == COMPONENT or e.get("reportingComponent") == COMPONENT
        ]

    async def rule_object(self, short: str) -> dict:
        return await self.kube.get(self.rules_res, f"{self.token}-{short}")

    def evicted_after(self, pod: str, since: float) -> float:
        return self.watch.deleting_at[pod] - since

    # -- comparing ---------------------------------------------------------------------------

    async def snapshot(self) -> dict[str, Any]:
        """What the eviction controller left: per Pod evicted (with its DisruptionTarget
        condition) or its phase, the controller's Events, and each rule's condition."""
        pods = {}
        live = {p["metadata"]["name"]: p for p in await self.kube.list(PODS, self.namespace)}
        for name in sorted(set(self.watch.last) | set(live)):
            pod = live.get(name) or self.watch.last[name]
            deleting = name in self.watch.deleting_at
            conditions = [
                {k: c.get(k) for k in ("type", "status", "reason", "message")}
                for c in (self.watch.last.get(name, pod).get("status") or {}).get("conditions") or []
                if c.get("type") == "DisruptionTarget"
            ]
            pods[name] = {
                "evicted": deleting,
                "phase": None if deleting else pod["status"].get("phase"),
                "disruption": conditions,
            }
        events = sorted(
            {
                (e.get("type"), e.get("reason"), e.get("message"), e["involvedObject"].get("name"))
                for e in await self.our_events()
            }
        )
        rules = {}
        for name in self.rules:
            rule = await self.kube.get_or_none(self.rules_res, name)
            condition = d.existing_condition(rule) if rule else None
            rules[name] = (
                {k: condition.get(k) for k in ("status", "reason", "message", "observedGeneration")}
                if condition
                else None
            )
        snap = {"pods": pods, "events": [list(e) for e in events], "rules": rules}
        return json.loads(json.dumps(snap).replace(self.token, "<run>"))


def logged_due_times(logs: list[Path], namespace: str, pod: str) -> list[str]:
    """The due time each ``pod eviction scheduled`` line of these taints operator logs gives for
    the Pod: the deadline each instance kept, logged before it acts on it. A deadline counted
    again from a restart would move it; how late the eviction came after it is the machine's (a
    restarted or busy API server). Not the ``evicted pod`` line: a leader that loses its Lease
    while its DELETE is in flight stops before the answer comes, so the Pod can go unlogged."""
    return [
        json.loads(line)["due"]
        for log in logs
        for line in log.read_text().splitlines()
        if '"pod eviction scheduled"' in line and f'"{namespace}/{pod}"' in line
    ]


def due_text(added: float, seconds: float) -> str:
    """``timeAdded`` (epoch seconds) plus a toleration, as the operator logs it."""
    return format_time(datetime.datetime.fromtimestamp(added + seconds, datetime.UTC))
