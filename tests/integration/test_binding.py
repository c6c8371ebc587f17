"""The binding operator on the lab, with the real kube-scheduler waiting in PreBind.

Every test runs its own operator process (``dra-operators run binding``) serving a driver of its
own, with the preparer configuration the scenario needs. Claims come from ResourceClaimTemplates
handled by our claims operator, which also deallocates them when their Pod goes away.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.binding import decisions as bd
from operators.binding import rbac
from operators.core.api.kube import APPLY_PATCH, ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    EVENTS,
    LEASES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
    Resource,
)
from operators.core.dra.metatime import format_time, utcnow
from operators.core.framework.metrics import samples
from tests.unit.binding.test_preparers import AttachServer

from . import objects
from .labs import declare_node_feature
from .operator_process import OperatorProcess
from .waiting import describe_namespace, wait_for

DEVICE_TAINT_RULES = Resource("resource.k8s.io/v1", "devicetaintrules", False)  # the lab serves v1
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False)
ROLES = Resource("rbac.authorization.k8s.io/v1", "roles", True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "rolebindings", True)
EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "binding-conditions"
SHORT_BINDING_TIMEOUT = 10


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 when absent)."""
    found = samples(text, name, **labels)
    return found[0][1] if found else 0.0


class BindingEnv:
    """A namespace, a driver whose devices carry binding conditions, a template, and an operator
    process serving that driver. Names that differ between runs contain ``token``."""

    def __init__(
        self,
        kube: Kube,
        lab,
        log_dir: Path,
        token: str,
        devices: dict[str, int],
        preparer: str = "simulated",
        config: dict[str, Any] | None = None,
        cool_off: float = 300,
        timeout: float = 600,
        kubeconfig: Path | None = None,
        env: dict[str, str] | None = None,
    ):
        self.kube = kube
        self.lab = lab
        self.token = token
        self.namespace = f"bd-{token}"
        self.driver = f"{token}.binding.lab.dra-operators.dev"
        self.ready_type = f"{self.driver}/attached"
        self.failed_type = f"{self.driver}/attach-failed"
        self.device_class = f"binding-{token}"
        self.devices = devices  # node -> number of devices (pool = node name)
        env = {
            "DRA_BINDING_DRIVERS": self.driver,
            "DRA_BINDING_PREPARER": preparer,
            "DRA_BINDING_PREPARER_CONFIG": json.dumps(config or {}),
            "DRA_BINDING_COOL_OFF": str(cool_off),
            "DRA_BINDING_TIMEOUT": str(timeout),
            **(env or {}),
        }
        self.operator = OperatorProcess(["binding"], kubeconfig or lab.kubeconfig, log_dir, env=env)
        self.operator.log = log_dir / f"binding-{token}.log"

    def slice_name(self, node: str) -> str:
        return f"{node}-{self.token}"

    async def __aenter__(self) -> BindingEnv:
        await self.kube.create(NAMESPACES, {"metadata": {"name": self.namespace}})
        await self.kube.create(DEVICE_CLASSES, objects.device_class(self.device_class, self.driver))
        for node, count in self.devices.items():
            devices = [
                objects.device(
                    f"gpu-{i}",
                    bindsToNode=True,
                    bindingConditions=[self.ready_type],
                    bindingFailureConditions=[self.failed_type],
                )
                for i in range(count)
            ]
            await self.kube.create(
                RESOURCE_SLICES, objects.resource_slice(self.slice_name(node), self.driver, node, devices)
            )
        await self.kube.create(
            RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("gpu", self.device_class), self.namespace
        )
        await wait_for(
            lambda: self.kube.get_or_none(SERVICE_ACCOUNTS, "default", self.namespace),
            timeout=30,
            what="default ServiceAccount",
        )
        await asyncio.to_thread(self.operator.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.operator.stop()
        for res, name in (
            (NAMESPACES, self.namespace),
            (DEVICE_CLASSES, self.device_class),
            *((RESOURCE_SLICES, self.slice_name(n)) for n in self.devices),
        ):
            try:
                await self.kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise
        for rule in await self.rules():
            await self.kube.delete(DEVICE_TAINT_RULES, rule["metadata"]["name"])

    # -- verbs -------------------------------------------------------------------------------

    async def pod(self, name: str) -> None:
        await self.kube.create(PODS, objects.pod(name, {"gpu": {"resourceClaimTemplateName": "gpu"}}), self.namespace)

    async def delete_pod(self, name: str) -> None:
        await self.kube.delete(PODS, name, self.namespace)

    # -- reading -----------------------------------------------------------------------------

    async def describe(self) -> str:
        return await describe_namespace(self.kube, self.namespace) + "\n--- operator log\n" + self.operator.tail(40)

    async def wait(self, check, what: str, timeout: float = 90) -> Any:
        return await wait_for(check, timeout=timeout, what=what, describe=self.describe)

    async def running(self, pod: str, timeout: float = 90) -> dict:
        async def check():
            p = await self.kube.get_or_none(PODS, pod, self.namespace)
            return p if p and p["status"].get("phase") == "Running" else None

        return await self.wait(check, f"pod {pod} Running", timeout)

    async def claim_of(self, pod: str) -> dict:
        async def check():
            p = await self.kube.get(PODS, pod, self.namespace)
            names = [s.get("resourceClaimName") for s in p["status"].get("resourceClaimStatuses") or []]
            return names[0] if names and names[0] else None

        name = await self.wait(check, f"claim of pod {pod}")
        return await self.kube.get(RESOURCE_CLAIMS, name, self.namespace)

    async def allocated(self, claim: str) -> dict:
        async def check():
            c = await self.kube.get(RESOURCE_CLAIMS, claim, self.namespace)
            return c if bd.allocation(c) else None

        return await self.wait(check, f"claim {claim} allocated")

    async def events(self, reason: str, name: str | None = None) -> list[dict]:
        return [
            e
            for e in await self.kube.list(EVENTS, self.namespace)
            if e.get("reason") == reason and (name is None or e["involvedObject"].get("name") == name)
        ]

    async def wait_event(self, reason: str, name: str | None = None, text: str = "", timeout: float = 90) -> dict:
        async def check():
            return next((e for e in await self.events(reason, name) if text in e.get("message", "")), None)

        return await self.wait(check, f"Event {reason} {name or ''} {text!r}", timeout)

    async def rules(self) -> list[dict]:
        selector = f"{bd.MANAGED_BY_LABEL}={bd.MANAGED_BY},{bd.DRIVER_LABEL}={self.driver}"
        return await self.kube.list(DEVICE_TAINT_RULES, label_selector=selector)

    def metrics(self) -> str:
        return self.operator.metrics()

    async def wait_metric(self, name: str, value: float, timeout: float = 90, **labels: str) -> None:
        async def check():
            return metric(self.metrics(), name, **labels) == value

        await self.wait(check, f"{name}{labels} == {value}", timeout)

    @staticmethod
    def device_of(claim: dict) -> str:
        [result] = claim["status"]["allocation"]["devices"]["results"]
        return result["device"]

    def conditions(self, claim: dict, device: str) -> dict[str, dict]:
        entry = bd.device_status(claim, bd.DeviceRef(self.driver, self.pool_of(claim), device)) or {}
        return {c["type"]: c for c in entry.get("conditions") or []}

    @staticmethod
    def pool_of(claim: dict) -> str:
        return claim["status"]["allocation"]["devices"]["results"][0]["pool"]

    async def no_kopf_traces(self) -> None:
        for res in (PODS, RESOURCE_CLAIMS):
            for obj in await self.kube.list(res, self.namespace):
                meta = obj["metadata"]
                keys = [*(meta.get("annotations") or {}), *(meta.get("labels") or {}), *(meta.get("finalizers") or [])]
                assert not [k for k in keys if "kopf.zalando.org" in k], (res.plural, meta["name"], keys)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("binding-logs")


@pytest.fixture
def short_binding_timeout(lab):
    """kube-scheduler with a 10 s bindingTimeout for one test, the default afterwards."""
    lab.restart_scheduler(
        {
            "profiles": [
                {
                    "schedulerName": "default-scheduler",
                    "pluginConfig": [
                        {"name": "DynamicResources", "args": {"bindingTimeout": f"{SHORT_BINDING_TIMEOUT}s"}}
                    ],
                }
            ]
        }
    )
    try:
        yield SHORT_BINDING_TIMEOUT
    finally:
        lab.restart_scheduler(None)


async def apply_other_writer(kube: Kube, claim: dict, driver: str, pool: str, device: str) -> None:
    """Another controller (say, a network agent) writes its own condition and data on the entry."""
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": claim["metadata"]["name"], "namespace": claim["metadata"]["namespace"]},
        "status": {
            "devices": [
                {
                    "driver": driver,
                    "pool": pool,
                    "device": device,
                    "data": {"vlan": 7},
                    "conditions": [
                        {
                            "type": "other.example.com/linked",
                            "status": "True",
                            "reason": "Linked",
                            "message": "",
                            "lastTransitionTime": format_time(utcnow()),
                        }
                    ],
                }
            ]
        },
    }
    await kube.request(
        "PATCH",
        RESOURCE_CLAIMS.path(claim["metadata"]["namespace"], claim["metadata"]["name"], "status"),
        body=body,
        content_type=APPLY_PATCH,
        params=[("fieldManager", "other-writer")],
    )


# -- ready -------------------------------------------------------------------------------------


async def test_pod_waits_in_prebind_until_the_device_is_prepared(kube, lab, controllers, unique, log_dir):
    controllers.use("ours")
    async with BindingEnv(kube, lab, log_dir, f"ok{unique}", {"lab-node-0": 2}, config={"delay": 4}) as env:
        await env.pod("app")
        claim = await env.allocated((await env.claim_of("app"))["metadata"]["name"])
        name, device = claim["metadata"]["name"], env.device_of(claim)
        # The scheduler waits in PreBind; the Pod is not bound while the preparation runs.
        pending = await env.wait_event("BindingConditionsPending", "app", "lab-node-0")
        assert pending["type"] == "Normal"
        assert not (await kube.get(PODS, "app", env.namespace))["spec"].get("nodeName")
        await apply_other_writer(kube, claim, env.driver, env.pool_of(claim), device)

        pod = await env.running("app")
        assert pod["spec"]["nodeName"] == "lab-node-0"
        claim = await kube.get(RESOURCE_CLAIMS, name, env.namespace)
        conditions = env.conditions(claim, device)
        assert conditions[env.ready_type]["status"] == "True"
        assert conditions[env.ready_type]["reason"] == "DevicePrepared"
        assert "lab-node-0" in conditions[env.ready_type]["message"]
        assert env.failed_type not in conditions
        # The other writer's condition and data survived our write, and ours survives theirs.
        assert conditions["other.example.com/linked"]["status"] == "True"
        entry = bd.device_status(claim, bd.DeviceRef(env.driver, env.pool_of(claim), device))
        assert entry["data"] == {"vlan": 7}
        await apply_other_writer(kube, claim, env.driver, env.pool_of(claim), device)
        claim = await kube.get(RESOURCE_CLAIMS, name, env.namespace)
        assert env.conditions(claim, device)[env.ready_type]["status"] == "True"
        managers = {m["manager"] for m in claim["metadata"]["managedFields"]}
        assert bd.DeviceRef(env.driver, env.pool_of(claim), device).field_manager in managers
        # The record of the preparation is on the claim while the device is prepared.
        [record] = bd.records(claim, bd.DriverFilter.parse(env.driver))
        assert (record.ref.device, record.node) == (device, "lab-node-0")
        await env.wait_event("PreparingDevice", name, device)
        await env.wait_event("DevicePrepared", name, device)
        metrics = env.metrics()
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="ready", driver=env.driver) == 1
        assert metric(metrics, "dra_operators_binding_preparation_duration_seconds_count", outcome="ready") == 1
        assert metric(metrics, "dra_operators_binding_preparations_in_flight") == 0
        await env.no_kopf_traces()

        # Pod gone: the claims operator deallocates (and deletes) the claim, the preparation is undone.
        await env.delete_pod("app")
        await env.wait_event("DeviceUnprepared", name, device)
        await env.wait_metric("dra_operators_binding_undos_total", 1, result="success", driver=env.driver)
        assert not await env.rules(), "a device that was prepared gets no cool-off taint"
        assert not env.operator.errors(), env.operator.errors()[:5]


async def test_pod_deleted_during_the_preparation_cancels_and_undoes_it_without_a_taint(
    kube, lab, controllers, unique, log_dir
):
    controllers.use("ours")
    async with BindingEnv(kube, lab, log_dir, f"pg{unique}", {"lab-node-0": 1}, config={"delay": 60}) as env:
        await env.pod("app")
        claim_name = (await env.claim_of("app"))["metadata"]["name"]
        served = bd.DriverFilter.parse(env.driver)

        async def started():
            claim = await kube.get_or_none(RESOURCE_CLAIMS, claim_name, env.namespace)
            return claim and bd.records(claim, served)

        await env.wait(started, "preparation started")
        await env.wait_metric("dra_operators_binding_preparations_in_flight", 1)
        await env.delete_pod("app")
        # The claims operator drops the reservation of the deleted Pod and deallocates.
        await env.wait_event("DeviceUnprepared", claim_name, "gpu-0")
        metrics = env.metrics()
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="cancelled") == 1
        assert metric(metrics, "dra_operators_binding_preparations_in_flight") == 0
        assert metric(metrics, "dra_operators_binding_undos_total", result="success") == 1
        assert not await env.rules(), "a Pod that went away says nothing against the device"
        assert not env.operator.errors(), env.operator.errors()[:5]


# -- failure -----------------------------------------------------------------------------------


async def test_failed_device_is_tainted_and_the_pod_gets_another_one(kube, lab, controllers, unique, log_dir):
    controllers.use("ours")
    cool_off = 15
    async with BindingEnv(
        kube,
        lab,
        log_dir,
        f"fl{unique}",
        {"lab-node-0": 2},
        cool_off=cool_off,
        config={"delay": 1, "fail": ["gpu-0"], "reason": "FabricPortDown"},
    ) as env:
        await env.pod("app")
        # The allocator tries devices in slice order: gpu-0 first, which fails.
        rule = await env.wait(env.rules, "cool-off DeviceTaintRule")
        [rule] = rule
        assert rule["spec"]["deviceSelector"] == {"driver": env.driver, "pool": "lab-node-0", "device": "gpu-0"}
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
        assert rule["spec"]["taint"]["key"] == "binding.dra-operators.dev/preparation-failed"
        assert rule["spec"]["taint"]["value"] == "FabricPortDown"
        assert rule["spec"]["taint"].get("timeAdded")
        claim_name = (await env.claim_of("app"))["metadata"]["name"]
        failed = await env.wait_event("DevicePreparationFailed", claim_name, "gpu-0")
        assert failed["type"] == "Warning" and "FabricPortDown" in failed["message"]
        assert rule["metadata"]["name"] in failed["message"]
        # The scheduler gives up on gpu-0, clears the allocation, and tries again elsewhere.
        await env.wait_event("FailedScheduling", "app", "binding failed")
        await env.running("app")
        claim = await kube.get(RESOURCE_CLAIMS, claim_name, env.namespace)
        assert env.device_of(claim) == "gpu-1"
        assert env.conditions(claim, "gpu-1")[env.ready_type]["status"] == "True"
        await env.wait_event("DeviceUnprepared", claim_name, "gpu-0")
        # Only the prepared device keeps a record.
        assert [r.ref.device for r in bd.records(claim, bd.DriverFilter.parse(env.driver))] == ["gpu-1"]
        metrics = env.metrics()
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="failed") == 1
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="ready") == 1
        assert metric(metrics, "dra_operators_binding_cool_off_taints_total", action="added") == 1
        # The cool-off ends: the rule goes away.
        await env.wait(lambda: _none(env.rules()), "cool-off rule deleted", timeout=cool_off + 30)
        await env.wait_metric("dra_operators_binding_cool_off_taints_total", 1, action="removed")
        assert not env.operator.errors(), env.operator.errors()[:5]


async def _none(awaitable) -> bool:
    return not await awaitable


# -- timeout -----------------------------------------------------------------------------------


async def test_preparation_slower_than_the_binding_timeout_is_undone_and_the_pod_rescheduled(
    kube, lab, controllers, unique, log_dir, short_binding_timeout
):
    controllers.use("ours")
    async with BindingEnv(
        kube,
        lab,
        log_dir,
        f"to{unique}",
        {"lab-node-0": 2},
        timeout=short_binding_timeout,
        config={"delay": 1, "delays": {"gpu-0": 120}},
        cool_off=120,
    ) as env:
        await env.pod("app")
        claim = await env.allocated((await env.claim_of("app"))["metadata"]["name"])
        claim_name = claim["metadata"]["name"]
        assert env.device_of(claim) == "gpu-0"
        await env.wait_event("BindingConditionsPending", "app")
        # Whichever notices first (the scheduler's PreBind poll or our deadline), the scheduler
        # gives up on gpu-0, clears the allocation, and the Pod lands on gpu-1.
        await env.running("app", timeout=120)
        claim = await kube.get(RESOURCE_CLAIMS, claim_name, env.namespace)
        assert env.device_of(claim) == "gpu-1"
        scheduling = [e["message"] for e in await env.events("FailedScheduling", "app")]
        assert any("binding timeout" in m or "reason=BindingTimeout" in m for m in scheduling), scheduling
        await env.wait_event("DeviceUnprepared", claim_name, "gpu-0")
        metrics = env.metrics()
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="timeout") == 1
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="ready") == 1
        assert metric(metrics, "dra_operators_binding_undos_total", result="success") == 1
        [rule] = await env.rules()
        assert rule["spec"]["deviceSelector"]["device"] == "gpu-0"
        assert rule["spec"]["taint"]["value"] == "BindingTimeout"
        assert not env.operator.errors(), env.operator.errors()[:5]


# -- restart -----------------------------------------------------------------------------------


async def test_restart_neither_repeats_a_finished_preparation_nor_loses_a_running_one(
    kube, lab, controllers, unique, log_dir
):
    controllers.use("ours")
    delay = 8
    async with BindingEnv(kube, lab, log_dir, f"rs{unique}", {"lab-node-0": 2}, config={"delay": delay}) as env:
        await env.pod("done")
        await env.running("done")
        done_claim = await env.claim_of("done")
        done_since = env.conditions(done_claim, env.device_of(done_claim))[env.ready_type]["lastTransitionTime"]

        await env.pod("busy")
        busy_name = (await env.claim_of("busy"))["metadata"]["name"]

        async def recorded():
            c = await kube.get(RESOURCE_CLAIMS, busy_name, env.namespace)
            return bd.records(c, bd.DriverFilter.parse(env.driver))

        [record] = await env.wait(recorded, "preparation of the second claim started")
        env.operator.kill()  # SIGKILL in the middle of the preparation
        assert (await kube.get(PODS, "busy", env.namespace))["status"].get("phase") == "Pending"
        await asyncio.sleep(1)
        await asyncio.to_thread(env.operator.start)

        await env.running("busy", timeout=90)
        busy = await kube.get(RESOURCE_CLAIMS, busy_name, env.namespace)
        assert env.conditions(busy, env.device_of(busy))[env.ready_type]["status"] == "True"
        # The same preparation went on (its record, with its start time, is unchanged) ...
        assert bd.records(busy, bd.DriverFilter.parse(env.driver)) == [record]
        await env.wait_event("PreparingDevice", busy_name, "resuming device")
        # ... and the finished one was not prepared again.
        await env.wait_metric("dra_operators_binding_preparations_total", 1, outcome="ready")
        metrics = env.metrics()
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="ready") == 1
        assert metric(metrics, "dra_operators_binding_preparation_duration_seconds_sum") >= delay
        done_after = await kube.get(RESOURCE_CLAIMS, done_claim["metadata"]["name"], env.namespace)
        assert env.conditions(done_after, env.device_of(done_after))[env.ready_type]["lastTransitionTime"] == done_since
        assert not [
            e for e in await env.events("PreparingDevice", done_claim["metadata"]["name"]) if "resuming" in e["message"]
        ]
        assert env.operator.starts == 2
        assert not env.operator.errors(), env.operator.errors()[:5]


# -- scale -------------------------------------------------------------------------------------


async def test_fifty_pods_at_once(kube, lab, controllers, unique, log_dir):
    controllers.use("ours")
    count = 50
    async with BindingEnv(
        kube, lab, log_dir, f"sc{unique}", {"lab-node-0": 25, "lab-node-1": 25}, config={"delay": 1}
    ) as env:
        started = time.monotonic()
        await asyncio.gather(*(env.pod(f"p{i:02d}") for i in range(count)))

        async def all_running():
            pods = await kube.list(PODS, env.namespace)
            return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)

        await env.wait(all_running, f"{count} Pods Running", timeout=240)
        running = time.monotonic() - started
        claims = await kube.list(RESOURCE_CLAIMS, env.namespace)
        assert len(claims) == count
        used = {(env.pool_of(c), env.device_of(c)) for c in claims}
        assert len(used) == count
        for c in claims:
            assert env.conditions(c, env.device_of(c))[env.ready_type]["status"] == "True", c["metadata"]["name"]
        metrics = env.metrics()
        assert metric(metrics, "dra_operators_binding_preparations_total", outcome="ready") == count
        assert metric(metrics, "dra_operators_binding_preparations_in_flight") == 0

        await kube.request("DELETE", PODS.path(env.namespace))
        await env.wait_metric("dra_operators_binding_undos_total", count, result="success", timeout=240)
        await env.wait(lambda: _none(kube.list(RESOURCE_CLAIMS, env.namespace)), "all claims gone", timeout=120)
        seconds = metric(metrics, "dra_operators_binding_preparation_duration_seconds_sum") / count
        print(
            f"binding scale: {count} Pods Running in {running:.1f}s (1 s simulated preparation each, "
            f"{seconds:.2f}s mean preparation from start to outcome); all undone and gone after "
            f"{time.monotonic() - started:.1f}s"
        )
        assert not env.operator.errors(), env.operator.errors()[:5]


# -- http --------------------------------------------------------------------------------------


async def test_http_preparer_with_a_slow_a_failing_and_a_down_attach_service(kube, lab, controllers, unique, log_dir):
    controllers.use("ours")
    server = AttachServer({"gpu-0": ("slow", 3), "gpu-1": "failed", "gpu-2": "ready"})
    await server.start()
    # Credentials in the URL: namespace users read the claim's conditions and Events, never them.
    password = f"pw-{unique}"
    config = {
        "url": server.url.replace("http://", f"http://attach:{password}@"),
        "timeout": 5,
        "retries": 1,
        "backoff": 0.2,
    }
    try:
        async with BindingEnv(
            kube, lab, log_dir, f"ht{unique}", {"lab-node-0": 4}, preparer="http", config=config
        ) as env:
            # Slow: the service answers after 3 s, within its timeout.
            await env.pod("slow")
            slow = await env.running("slow")
            slow_claim = await env.claim_of("slow")
            assert env.device_of(slow_claim) == "gpu-0"
            message = env.conditions(slow_claim, "gpu-0")[env.ready_type]["message"]
            assert message == "gpu-0 attached to lab-node-0" and slow["spec"]["nodeName"] == "lab-node-0"
            [body] = server.prepares("gpu-0")
            assert body["claim"]["uid"] == slow_claim["metadata"]["uid"] and body["node"] == "lab-node-0"
            data = bd.device_status(slow_claim, bd.DeviceRef(env.driver, "lab-node-0", "gpu-0"))["data"]
            assert data == {"fabricPort": 7}

            # Fails: gpu-1 is reported failed, tainted and undone; the Pod gets gpu-2.
            await env.pod("unlucky")
            await env.running("unlucky")
            unlucky = await env.claim_of("unlucky")
            assert env.device_of(unlucky) == "gpu-2"
            failed = await env.wait_event("DevicePreparationFailed", unlucky["metadata"]["name"], "gpu-1")
            assert "FabricPortDown" in failed["message"]
            await env.wait(lambda: _some(server.undos("gpu-1")), "undo of gpu-1 at the attach service")
            assert [r["spec"]["deviceSelector"]["device"] for r in await env.rules()] == ["gpu-1"]

            # Down: nothing answers; after its retries the preparer reports the device failed.
            await server.stop()
            await env.pod("stranded")
            stranded = (await env.claim_of("stranded"))["metadata"]["name"]
            down = await env.wait_event("DevicePreparationFailed", stranded, "AttachServiceUnavailable")
            assert "gpu-3" in down["message"] and "after 2 attempts" in down["message"]
            assert f"http://***@{server.url.removeprefix('http://')}/prepare" in down["message"], down["message"]
            events = await kube.list(EVENTS, env.namespace)
            claims = await kube.list(RESOURCE_CLAIMS, env.namespace)  # their conditions quote the outcome too
            for text in [json.dumps(events), json.dumps(claims), env.operator.log.read_text()]:
                assert password not in text, text[-3000:]
            await env.wait(lambda: _tainted(env, {"gpu-1", "gpu-3"}), "gpu-3 tainted as well")
            assert (await kube.get(PODS, "stranded", env.namespace))["status"].get("phase") == "Pending"
            metrics = env.metrics()
            assert metric(metrics, "dra_operators_binding_preparations_total", outcome="ready") == 2
            assert metric(metrics, "dra_operators_binding_preparations_total", outcome="failed") == 2
            assert not env.operator.errors(), env.operator.errors()[:5]
    finally:
        await server.stop()


async def _some(items) -> bool:
    return bool(items)


async def _tainted(env: BindingEnv, devices: set[str]) -> bool:
    return {r["spec"]["deviceSelector"]["device"] for r in await env.rules()} == devices


# -- RBAC --------------------------------------------------------------------------------------


async def _service_account_kubeconfig(kube: Kube, lab, namespace: str, name: str, path: Path) -> Path:
    await kube.create(SERVICE_ACCOUNTS, {"metadata": {"name": name}}, namespace)
    token = await kube.request(
        "POST", SERVICE_ACCOUNTS.path(namespace, name, "token"), body={"spec": {"expirationSeconds": 3600}}
    )
    admin = yaml.safe_load(Path(lab.kubeconfig).read_text())
    cluster = admin["clusters"][0]["cluster"]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": cluster}],
                "users": [{"name": name, "user": {"token": token["status"]["token"]}}],
                "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": name}}],
                "current-context": "lab",
            }
        )
    )
    return path


async def test_operator_works_with_exactly_its_rbac_and_not_without_the_driver_subresource(
    kube, lab, controllers, unique, log_dir, tmp_path
):
    controllers.use("ours")
    token = f"rb{unique}"
    sa_namespace = f"bd-sa-{unique}"
    drivers = bd.DriverFilter.parse(f"{token}.binding.lab.dra-operators.dev")
    role = rbac.cluster_role(drivers, name=f"binding-{token}")
    binding = rbac.cluster_role_binding("binding", sa_namespace, name=f"binding-{token}")
    lease_role = rbac.leader_election_role(sa_namespace)
    lease_binding = rbac.leader_election_role_binding("binding", sa_namespace)
    await kube.create(NAMESPACES, {"metadata": {"name": sa_namespace}})
    await wait_for(
        lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", sa_namespace), timeout=30, what="default ServiceAccount"
    )
    kubeconfig = await _service_account_kubeconfig(kube, lab, sa_namespace, "binding", tmp_path / "sa.kubeconfig")
    await kube.create(CLUSTER_ROLES, role)
    await kube.create(CLUSTER_ROLE_BINDINGS, binding)
    await kube.create(ROLES, lease_role, sa_namespace)
    await kube.create(ROLE_BINDINGS, lease_binding, sa_namespace)
    try:
        async with BindingEnv(
            kube,
            lab,
            log_dir,
            token,
            {"lab-node-1": 2},
            config={"delay": 1},
            kubeconfig=kubeconfig,
            env={"DRA_LEADER_ELECTION": "true", "DRA_LEADER_ELECTION_NAMESPACE": sa_namespace},
        ) as env:
            assert env.driver == drivers.patterns[0]
            await env.pod("app")
            await env.running("app")
            lease = await kube.get(LEASES, "dra-operators-binding", sa_namespace)
            assert lease["spec"]["holderIdentity"], lease
            claim = await env.claim_of("app")
            assert env.conditions(claim, env.device_of(claim))[env.ready_type]["status"] == "True"
            env.operator.stop()

            # Without resourceclaims/driver the same identity may no longer touch status.devices.
            role["rules"] = [r for r in role["rules"] if r.get("resources") != ["resourceclaims/driver"]]
            role["metadata"] = (await kube.get(CLUSTER_ROLES, role["metadata"]["name"]))["metadata"]
            await kube.replace(CLUSTER_ROLES, role)
            limited = await Kube.connect(str(kubeconfig))
            try:
                device = env.device_of(claim)
                dev = bd.BindingDevice(
                    bd.DeviceRef(env.driver, env.pool_of(claim), device), "gpu", (env.ready_type,), (env.failed_type,)
                )
                body = bd.status_apply(claim, dev, bd.outcome_conditions(dev, False, "Test", "x", None, utcnow()))

                async def refused():
                    try:
                        await limited.apply(
                            RESOURCE_CLAIMS, body, field_manager=dev.ref.field_manager, force=True, subresource="status"
                        )
                    except ApiError as e:
                        return e
                    return None

                error = await wait_for(refused, timeout=30, what="status write refused without the driver verb")
                assert error.status in (403, 422) and "resourceclaims/driver" in error.message, error
                assert "arbitrary-node:patch" in error.message
            finally:
                await limited.close()
    finally:
        for res, name in (
            (CLUSTER_ROLE_BINDINGS, binding["metadata"]["name"]),
            (CLUSTER_ROLES, role["metadata"]["name"]),
            (NAMESPACES, sa_namespace),
        ):
            try:
                await kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise


async def test_preparations_deallocated_while_the_operator_was_down_are_undone_after_it_starts(
    kube, lab, controllers, unique, log_dir
):
    """A claim of two devices: each entry is written on its own; the Pod goes away while the
    operator is stopped, and the records on the claim make the restarted operator undo both."""
    controllers.use("ours")
    async with BindingEnv(kube, lab, log_dir, f"ud{unique}", {"lab-node-1": 3}, config={"delay": 1}) as env:
        body = objects.resource_claim("pair", env.device_class)
        body["spec"] = objects.claim_spec(env.device_class, count=2)
        await kube.create(RESOURCE_CLAIMS, body, env.namespace)
        await kube.create(PODS, objects.pod("app", {"gpu": {"resourceClaimName": "pair"}}), env.namespace)
        await env.running("app")
        claim = await kube.get(RESOURCE_CLAIMS, "pair", env.namespace)
        devices = sorted(r["device"] for r in claim["status"]["allocation"]["devices"]["results"])
        assert len(devices) == 2
        for device in devices:
            assert env.conditions(claim, device)[env.ready_type]["status"] == "True"
        served = bd.DriverFilter.parse(env.driver)
        assert sorted(r.ref.device for r in bd.records(claim, served)) == devices
        managers = {m["manager"] for m in claim["metadata"]["managedFields"]}
        assert {bd.DeviceRef(env.driver, "lab-node-1", x).field_manager for x in devices} <= managers

        env.operator.stop()
        await env.delete_pod("app")

        async def deallocated():
            c = await kube.get(RESOURCE_CLAIMS, "pair", env.namespace)
            return c if not bd.allocation(c) else None

        claim = await env.wait(deallocated, "claim deallocated by the claims operator")
        assert not claim["status"].get("devices")
        assert len(bd.records(claim, served)) == 2, "the records outlive the allocation"

        await asyncio.to_thread(env.operator.start)
        await env.wait_metric("dra_operators_binding_undos_total", 2, result="success")
        for device in devices:
            await env.wait_event("DeviceUnprepared", "pair", device)

        async def forgotten():
            return not bd.records(await kube.get(RESOURCE_CLAIMS, "pair", env.namespace), served)

        await env.wait(forgotten, "records removed after the undo")
        assert metric(env.metrics(), "dra_operators_binding_preparations_total", outcome="ready") == 0
        assert not await env.rules()
        assert not env.operator.errors(), env.operator.errors()[:5]


async def test_a_claim_deleted_while_the_operator_is_down_waits_for_the_undo(kube, lab, controllers, unique, log_dir):
    """The finalizer keeps a claim with preparation records until they are undone: the operator
    SIGKILLed, the Pod (and so its generated claim) deleted, the operator back: undone, finalizer
    removed, claim gone. A record without the finalizer (written by an older version) gets it."""
    controllers.use("ours")
    async with BindingEnv(kube, lab, log_dir, f"fz{unique}", {"lab-node-0": 1}) as env:
        await env.pod("app")
        await env.running("app")
        claim = await env.claim_of("app")
        name = claim["metadata"]["name"]
        served = bd.DriverFilter.parse(env.driver)
        assert bd.has_finalizer(claim) and len(bd.records(claim, served)) == 1

        # An older version's record: no finalizer. The running operator adds it.
        index = claim["metadata"]["finalizers"].index(bd.FINALIZER)
        await kube.request(
            "PATCH",
            RESOURCE_CLAIMS.path(env.namespace, name),
            content_type="application/json-patch+json",
            body=[
                {"op": "test", "path": f"/metadata/finalizers/{index}", "value": bd.FINALIZER},
                {"op": "remove", "path": f"/metadata/finalizers/{index}"},
            ],
        )
        await env.wait(lambda: _has_finalizer(kube, env.namespace, name), "the finalizer applied again")

        env.operator.kill()
        await env.delete_pod("app")

        async def held():
            # Deallocated first, then the claims operator takes its delete-protection finalizer
            # off in a second update (as upstream's controller): wait for both, not the first.
            c = await kube.get_or_none(RESOURCE_CLAIMS, name, env.namespace)
            deleting = c and c["metadata"].get("deletionTimestamp") and not bd.allocation(c)
            return c if deleting and c["metadata"].get("finalizers") == [bd.FINALIZER] else None

        claim = await env.wait(held, "the claim deleted and deallocated, kept by our finalizer alone")
        assert bd.records(claim, served)

        await asyncio.to_thread(env.operator.start)
        await env.wait_metric("dra_operators_binding_undos_total", 1, result="success")
        await env.wait(lambda: _gone(kube, env.namespace, name), "the claim gone after the undo")
        assert not env.operator.errors(), env.operator.errors()[:5]


async def _has_finalizer(kube, namespace, name):
    return bd.has_finalizer(await kube.get(RESOURCE_CLAIMS, name, namespace))


async def _gone(kube, namespace, name):
    return await kube.get_or_none(RESOURCE_CLAIMS, name, namespace) is None


# -- the example -------------------------------------------------------------------------------


async def test_example_runs_as_its_readme_says(kube, lab, controllers, unique, log_dir):
    """config/examples/binding-conditions applied with kubectl, the operator configured as in its
    README: gpu-0 fails, gets tainted and undone, the Pod runs on gpu-1 (the fabric pool is
    reachable from every node; bindsToNode pins the allocation to the chosen one)."""
    controllers.use("ours")
    namespace = f"bd-ex-{unique}"
    operator = OperatorProcess(
        ["binding"],
        lab.kubeconfig,
        log_dir,
        env={
            "DRA_BINDING_DRIVERS": "fabric-gpu.example.com",
            "DRA_BINDING_COOL_OFF": "60",
            "DRA_BINDING_PREPARER_CONFIG": json.dumps({"delay": 3, "fail": ["gpu-0"]}),
        },
    )
    operator.log = log_dir / f"binding-example-{unique}.log"
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    await wait_for(
        lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", namespace), timeout=30, what="default ServiceAccount"
    )
    await asyncio.to_thread(operator.start)
    # The example's slice skips node operations: only Nodes that declare it get its devices.
    await declare_node_feature(kube, "DRAOptionalNodeOperations")
    try:
        result = lab.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE), check=False)
        assert result.returncode == 0, result.stderr

        async def running():
            pod = await kube.get_or_none(PODS, "fabric-gpu-user", namespace)
            return pod if pod and pod["status"].get("phase") == "Running" else None

        pod = await wait_for(
            running, timeout=90, what="example Pod Running", describe=lambda: describe_namespace(kube, namespace)
        )
        [status] = pod["status"]["resourceClaimStatuses"]
        claim = await kube.get(RESOURCE_CLAIMS, status["resourceClaimName"], namespace)
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["pool"], result["device"]) == ("fabric", "gpu-1")
        assert bd.node_of(claim) == pod["spec"]["nodeName"]
        reasons = {e["reason"] for e in await kube.list(EVENTS, namespace)}
        assert {
            "BindingConditionsPending",
            "PreparingDevice",
            "DevicePreparationFailed",
            "DeviceUnprepared",
            "DevicePrepared",
        } <= reasons, reasons
        rules = await kube.list(DEVICE_TAINT_RULES, label_selector=f"{bd.DRIVER_LABEL}=fabric-gpu.example.com")
        assert [r["spec"]["deviceSelector"]["device"] for r in rules] == ["gpu-0"]
        assert not operator.errors(), operator.errors()[:5]
    finally:
        operator.stop()
        await kube.delete(NAMESPACES, namespace)
        for rule in await kube.list(DEVICE_TAINT_RULES, label_selector=f"{bd.DRIVER_LABEL}=fabric-gpu.example.com"):
            await kube.delete(DEVICE_TAINT_RULES, rule["metadata"]["name"])
        for res, name in ((RESOURCE_SLICES, "fabric-gpu-example"), (DEVICE_CLASSES, "fabric-gpu.example.com")):
            try:
                await kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise
