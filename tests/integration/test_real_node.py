"""The node agent as the DRA plugin of a real kubelet: a lab of this module's own with one real
Node (kubelet + containerd + runc + bridge CNI, ``LabOptions(real_nodes=1)``), the agent
(simulated backend) as a process registered through kubelet's plugin watcher, our claims
operator for template claims, and busybox Pods whose containers print the environment the
agent's CDI specs give them.

The fake-kubelet tests (test_kubelet_plugin.py) check the plugin's answers call by call; these
check that a real kubelet and containerd get the same behaviour end to end (ported in spirit
from upstream's test/e2e/dra kubelet section)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from operators.core.api.kube import MERGE_PATCH, ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
    Resource,
)
from operators.lab import Lab
from operators.nodeagent.backends.simulated import HEALTH_ANNOTATION, PREPARE_FAILURE_ANNOTATION
from operators.nodeagent.plugin import device_status
from operators.nodeagent.plugin.checkpoint import PreparedDevice
from operators.nodeagent.plugin.opaque_config import API_VERSION as CONFIG_API
from operators.nodeagent.plugin.opaque_config import KIND as CONFIG_KIND

from . import objects
from .fake_kubelet import FakeKubelet
from .labs import client_of, running_lab, short_run_dir
from .operator_process import OperatorProcess
from .test_deploy import service_account_kubeconfig
from .waiting import describe_namespace, wait_for, wait_gone

CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles", False)
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io/v1", "clusterrolebindings", False)

NODE = "lab-real-0"
DRIVER = "gpu.rn.lab"  # short: kubelet's plugin sockets must fit in 107 characters

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (mounts, bridges, cgroups)")


@pytest.fixture(scope="module")
def real_lab() -> Lab:
    """One kwok Node and one real Node."""
    with running_lab("-real", short_run_dir("rn-"), nodes=1, real_nodes=1, remove_run_dir=True) as lab:
        yield lab


@pytest.fixture(scope="module")
async def rkube(real_lab: Lab) -> Kube:
    async with client_of(real_lab) as client:
        yield client


class Agent:
    """The node agent of the real node, as a process, with kubelet's directories."""

    def __init__(self, lab: Lab, log_dir: Path):
        self.files = lab.real_node(NODE)
        self.inventory = inventory = log_dir / "inventory.yaml"
        self.write_inventory()
        self.process = OperatorProcess(
            ["nodeagent"],
            lab.kubeconfig,
            log_dir,
            env={
                "NODE_NAME": NODE,
                "DRA_NODEAGENT_BACKEND": "simulated",
                "DRA_NODEAGENT_INVENTORY": str(inventory),
                "DRA_NODEAGENT_DRIVER": DRIVER,
                "DRA_NODEAGENT_SYNC_DELAY": "1",
                "DRA_NODEAGENT_HEALTH_QUIET_PERIOD": "1",
                "DRA_NODEAGENT_REGISTRY_DIR": str(self.files.plugins_registry),
                "DRA_NODEAGENT_PLUGINS_DIR": str(self.files.plugins),
                "DRA_NODEAGENT_CDI_ROOT": str(self.files.cdi),
                # A stand-in NVIDIA Container Toolkit spec is looked for where containerd reads CDI specs.
                "DRA_NODEAGENT_TOOLKIT_CDI_DIRS": str(self.files.cdi),
            },
        )

    def write_inventory(self, **extra) -> None:
        """The simulated inventory (the agent re-reads it when it changes)."""
        gpus = {"model": "RealLabGPU", "memory": "16Gi", "count": 4, **extra.pop("gpu", {})}
        self.inventory.write_text(yaml.safe_dump({"gpus": [gpus], **extra}))

    def spec_path(self, uid: str) -> Path:
        return self.files.cdi / f"k8s.{DRIVER}-claim_{uid}.json"

    def checkpoint_uids(self) -> list[str]:
        try:
            document = json.loads((self.files.plugins / DRIVER / "checkpoint.json").read_text())
        except FileNotFoundError:
            return []
        return [c["uid"] for c in document.get("preparedClaims", [])]

    def registered(self) -> bool:
        return "registered with kubelet" in self.process.log.read_text(errors="replace")


@pytest.fixture(scope="module")
async def agent(real_lab: Lab, rkube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Agent:
    logs = tmp_path_factory.mktemp("real-node-logs")
    started = Agent(real_lab, logs)
    claims = OperatorProcess(["claims"], real_lab.kubeconfig, logs)
    claims.start()
    started.process.start()
    await rkube.create(DEVICE_CLASSES, objects.device_class(DRIVER, DRIVER))
    await wait_for(
        lambda: rkube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}"), what="the agent's slices"
    )
    try:
        yield started
    finally:
        started.process.stop()
        claims.stop()


@pytest.fixture
async def ns(rkube: Kube, unique: str) -> str:
    name = f"rn-{unique}"
    await rkube.create(NAMESPACES, {"metadata": {"name": name}})
    await wait_for(
        lambda: rkube.get_or_none(SERVICE_ACCOUNTS, "default", name), timeout=30, what=f"ServiceAccount {name}/default"
    )
    yield name
    await rkube.delete(NAMESPACES, name)
    # Gone means kubelet stopped its Pods and unprepared their claims (busybox_pod's grace
    # period keeps each Pod in the API until then): the next test gets the devices free.
    await wait_gone(rkube, NAMESPACES, name)


PRINT_ENV = "env | grep ^DRA_ | sort"
# Print, then hold the devices until the Pod is deleted (kubelet unprepares a Pod's claims once
# the Pod has ended, so the checks of a prepared claim happen while it runs).
HOLD = PRINT_ENV + "; echo done; exec sleep 3600"


def busybox_pod(
    name: str,
    claims: dict[str, dict[str, str]],
    containers: list[dict] | None = None,
    init: list[dict] | None = None,
    script: str = PRINT_ENV,
) -> dict:
    """A Pod on the real node; by default one container using every claim and printing its
    DRA_ environment."""
    body = objects.pod(name, claims)
    spec = body["spec"]
    spec["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    spec["restartPolicy"] = "Never"
    # Not 0: a Pod deleted at once leaves the API before kubelet has unprepared its claims, which
    # are then deallocated, and the next claim may get a device the node still holds.
    spec["terminationGracePeriodSeconds"] = 1
    spec["containers"] = containers or [
        {
            "name": "main",
            "image": "busybox:1.37",
            "command": ["sh", "-c", script],
            "resources": {"claims": [{"name": n} for n in claims]},
        }
    ]
    if init:
        spec["initContainers"] = init
    return body


def container(name: str, claims: list[str], script: str = PRINT_ENV) -> dict:
    return {
        "name": name,
        "image": "busybox:1.37",
        "command": ["sh", "-c", script],
        "resources": {"claims": [{"name": n} for n in claims]},
    }


def environment(log: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in log.splitlines() if "=" in line)


async def wait_phase(
    kube: Kube, ns: str, name: str, phases: tuple[str, ...] = ("Succeeded",), timeout: float = 120
) -> dict:
    async def done():
        pod = await kube.get(PODS, name, ns)
        phase = pod.get("status", {}).get("phase")
        if phase == "Failed" and "Failed" not in phases:
            raise AssertionError(f"Pod {ns}/{name} failed: {json.dumps(pod.get('status'))[:3000]}")
        return pod if phase in phases else None

    return await wait_for(
        done, timeout=timeout, what=f"Pod {ns}/{name} {'/'.join(phases)}", describe=lambda: describe_namespace(kube, ns)
    )


def logs(lab: Lab, ns: str, pod: str, container: str = "main") -> str:
    """Through the API server to the kubelet (kubectl logs), as a user reads them."""
    return lab.kubectl("logs", "-n", ns, pod, "-c", container).stdout


async def printed(lab: Lab, ns: str, pod: str, container: str = "main") -> dict[str, str]:
    """The environment a HOLD container printed (waits for its "done")."""

    async def complete():
        text = logs(lab, ns, pod, container)
        return text if "done" in text.split() else None

    return environment(await wait_for(complete, timeout=60, what=f"{pod}/{container} printed its environment"))


async def running(kube: Kube, ns: str, name: str) -> dict:
    return await wait_phase(kube, ns, name, ("Running",))


async def pod_claim(kube: Kube, ns: str, pod: str, claim: str = "gpu") -> dict:
    async def named():
        status = (await kube.get(PODS, pod, ns)).get("status", {})
        return next(
            (
                s["resourceClaimName"]
                for s in status.get("resourceClaimStatuses") or []
                if s["name"] == claim and s.get("resourceClaimName")
            ),
            None,
        )

    return await kube.get(RESOURCE_CLAIMS, await wait_for(named, what=f"{pod}'s claim {claim}"), ns)


async def delete_and_wait_unprepared(kube: Kube, agent: Agent, ns: str, pod: str, uids: list[str]) -> None:
    await kube.delete(PODS, pod, ns)
    await wait_for(lambda: _gone(kube, ns, pod), timeout=90, what=f"Pod {ns}/{pod} gone")

    async def unprepared():
        return not any(agent.spec_path(u).exists() for u in uids) and not set(uids) & set(agent.checkpoint_uids())

    await wait_for(unprepared, timeout=60, what=f"claims {uids} unprepared")


async def node_story(lab: Lab, kube: Kube, ns: str) -> str:
    """The namespace, and kubelet's and containerd's last words, for a failure message."""
    lines = [await describe_namespace(kube, ns)]
    for component in (f"kubelet-{NODE}", f"containerd-{NODE}"):
        log = (lab.files.logs / f"{component}.log").read_text(errors="replace").splitlines()
        lines.append(f"--- {component} (last error lines)")
        lines.extend([line[:400] for line in log if line.startswith("E") or "level=error" in line][-15:])
    return "\n".join(lines)


async def _gone(kube: Kube, ns: str, name: str) -> bool:
    return await kube.get_or_none(PODS, name, ns) is None


# -- the headline: a template claim's device environment in a real container -----------------------


async def test_template_claim_runs_on_the_real_node_and_is_unprepared(real_lab, rkube, agent, ns):
    assert await wait_for(lambda: _true(agent.registered()), timeout=30, what="registration with kubelet")
    await rkube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("gpu", DRIVER), ns)
    await rkube.create(
        PODS, busybox_pod("app", {"gpu": {"resourceClaimTemplateName": "gpu"}}, script=PRINT_ENV + "; sleep 3"), ns
    )
    pod = await running(rkube, ns, "app")
    assert pod["spec"]["nodeName"] == NODE
    claim = await pod_claim(rkube, ns, "app")
    uid, name = claim["metadata"]["uid"], claim["metadata"]["name"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    device, key = result["device"], result["device"].upper().replace("-", "_")
    assert agent.spec_path(uid).exists() and uid in agent.checkpoint_uids()

    await wait_phase(rkube, ns, "app")  # the container exited 0
    env = environment(logs(real_lab, ns, "app"))
    assert env[f"DRA_DEVICE_{key}"] == device
    assert env[f"DRA_DEVICE_{key}_RESOURCE_CLAIM"] == uid
    assert env[f"DRA_DEVICE_{key}_CLAIM"] == f"{ns}/{name}"
    assert env["DRA_DRIVER_NAME"] == DRIVER

    await delete_and_wait_unprepared(rkube, agent, ns, "app", [uid])
    await wait_for(
        lambda: _true(rkube.get_or_none(RESOURCE_CLAIMS, name, ns), negate=True), what="the template's claim deleted"
    )


async def _true(value, negate: bool = False):
    if hasattr(value, "__await__"):
        value = await value
    return (not value) if negate else bool(value)


# -- ported from upstream's kubelet checks (test/e2e/dra), and the restarts -------------------------


def devices_of(env: dict[str, str]) -> set[str]:
    """The devices a container sees: DRA_DEVICE_<KEY>=<device> (not the per-device details)."""
    return {v for k, v in env.items() if k.startswith("DRA_DEVICE_") and k.count("_") == 3}


async def test_two_containers_two_claims_and_an_init_container(real_lab, rkube, agent, ns):
    for name in ("a", "b"):
        await rkube.create(RESOURCE_CLAIMS, objects.resource_claim(name, DRIVER), ns)
    body = busybox_pod(
        "two",
        {"a": {"resourceClaimName": "a"}, "b": {"resourceClaimName": "b"}},
        containers=[container("first", ["a"], HOLD), container("second", ["b"], HOLD)],
        init=[container("init", ["a"])],
    )
    await rkube.create(PODS, body, ns)
    await running(rkube, ns, "two")
    claims = {n: await rkube.get(RESOURCE_CLAIMS, n, ns) for n in ("a", "b")}
    devices = {n: c["status"]["allocation"]["devices"]["results"][0]["device"] for n, c in claims.items()}
    assert devices["a"] != devices["b"]
    assert devices_of(environment(logs(real_lab, ns, "two", "init"))) == {devices["a"]}
    assert devices_of(await printed(real_lab, ns, "two", "first")) == {devices["a"]}
    assert devices_of(await printed(real_lab, ns, "two", "second")) == {devices["b"]}
    await delete_and_wait_unprepared(rkube, agent, ns, "two", [c["metadata"]["uid"] for c in claims.values()])


async def test_shared_claim_is_unprepared_after_the_last_pod(real_lab, rkube, agent, ns):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("shared", DRIVER), ns)
    for name in ("one", "two"):
        await rkube.create(PODS, busybox_pod(name, {"gpu": {"resourceClaimName": "shared"}}, script=HOLD), ns)
    for name in ("one", "two"):
        await running(rkube, ns, name)
    claim = await rkube.get(RESOURCE_CLAIMS, "shared", ns)
    uid, device = claim["metadata"]["uid"], claim["status"]["allocation"]["devices"]["results"][0]["device"]
    assert devices_of(await printed(real_lab, ns, "one")) == {device}
    assert devices_of(await printed(real_lab, ns, "two")) == {device}
    await rkube.delete(PODS, "one", ns)
    await wait_for(lambda: _gone(rkube, ns, "one"), timeout=90, what="first Pod gone")
    await asyncio.sleep(3)  # kubelet had its chance to unprepare: it must not while "two" still runs
    assert agent.spec_path(uid).exists() and uid in agent.checkpoint_uids()
    await delete_and_wait_unprepared(rkube, agent, ns, "two", [uid])


async def test_claim_no_container_uses_is_still_prepared(real_lab, rkube, agent, ns):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("unused", DRIVER), ns)
    body = busybox_pod("idle", {"gpu": {"resourceClaimName": "unused"}}, containers=[container("main", [], HOLD)])
    await rkube.create(PODS, body, ns)
    await running(rkube, ns, "idle")
    uid = (await rkube.get(RESOURCE_CLAIMS, "unused", ns))["metadata"]["uid"]
    assert agent.spec_path(uid).exists() and uid in agent.checkpoint_uids()
    assert devices_of(await printed(real_lab, ns, "idle")) == set()
    await delete_and_wait_unprepared(rkube, agent, ns, "idle", [uid])


async def test_force_deleted_pod_is_unprepared(real_lab, rkube, agent, ns):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("forced", DRIVER), ns)
    await rkube.create(PODS, busybox_pod("long", {"gpu": {"resourceClaimName": "forced"}}, script=HOLD), ns)
    await running(rkube, ns, "long")
    uid = (await rkube.get(RESOURCE_CLAIMS, "forced", ns))["metadata"]["uid"]
    await rkube.delete(PODS, "long", ns, grace_period_seconds=0)

    async def unprepared():
        return not agent.spec_path(uid).exists() and uid not in agent.checkpoint_uids()

    await wait_for(unprepared, timeout=90, what="force-deleted Pod's claim unprepared")


async def test_agent_restarted_between_prepare_and_unprepare(real_lab, rkube, agent, ns):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("survives", DRIVER), ns)
    await rkube.create(PODS, busybox_pod("s", {"gpu": {"resourceClaimName": "survives"}}, script=HOLD), ns)
    await running(rkube, ns, "s")
    uid = (await rkube.get(RESOURCE_CLAIMS, "survives", ns))["metadata"]["uid"]
    registrations = agent.process.log.read_text().count("registered with kubelet")
    agent.process.kill()
    agent.process.start()
    await wait_for(
        lambda: _true(agent.process.log.read_text().count("registered with kubelet") > registrations),
        timeout=60,
        what="the restarted agent registered again",
    )
    assert uid in agent.checkpoint_uids()
    await delete_and_wait_unprepared(rkube, agent, ns, "s", [uid])


async def test_kubelet_restart_with_a_running_pod(real_lab, rkube, agent, ns):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("kept", DRIVER), ns)
    await rkube.create(PODS, busybox_pod("r", {"gpu": {"resourceClaimName": "kept"}}, script=HOLD), ns)
    await running(rkube, ns, "r")
    uid = (await rkube.get(RESOURCE_CLAIMS, "kept", ns))["metadata"]["uid"]
    before = agent.spec_path(uid).read_text()
    real_lab.restart(f"kubelet-{NODE}")
    real_lab.wait_node_schedulable(NODE)
    # kubelet admits the running Pod again from its own checkpoint (dra_manager_state); a
    # repeated NodePrepareResources, if it makes one, gets the same answer: nothing changes.
    await asyncio.sleep(5)
    pod = await rkube.get(PODS, "r", ns)
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert agent.spec_path(uid).read_text() == before and agent.checkpoint_uids().count(uid) == 1
    # The restarted kubelet still knows the claim: deleting the Pod unprepares it.
    await delete_and_wait_unprepared(rkube, agent, ns, "r", [uid])


async def test_emptied_cdi_dir_is_rewritten_when_the_container_restarts(real_lab, rkube, agent, ns):
    """As after a reboot empties /var/run/cdi (kubernetes#141433): the container restarts, the
    repeated prepare rewrites the spec, and the container starts with its device again."""
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("reboot", DRIVER), ns)
    body = busybox_pod(
        "rb", {"gpu": {"resourceClaimName": "reboot"}}, script=PRINT_ENV + "; echo done; sleep 4; exit 1"
    )
    body["spec"]["restartPolicy"] = "OnFailure"
    await rkube.create(PODS, body, ns)
    await running(rkube, ns, "rb")
    claim = await rkube.get(RESOURCE_CLAIMS, "reboot", ns)
    uid, device = claim["metadata"]["uid"], claim["status"]["allocation"]["devices"]["results"][0]["device"]
    before = agent.spec_path(uid).read_text()
    prepares = agent.process.log.read_text().count('"prepared claim"')
    for path in agent.files.cdi.iterdir():
        path.unlink()
    # A reboot ends the sandbox and restarts kubelet too. kubelet 1.37 asks NodePrepareResources
    # only when it creates a sandbox: a container restarting in the same sandbox with the spec
    # gone fails with "unresolvable CDI devices" for ever (kubernetes#141433).
    real_lab.restart(f"kubelet-{NODE}", downtime=1)
    real_lab.kill_containers(NODE)

    async def restarted():
        pod = await rkube.get(PODS, "rb", ns)
        statuses = pod.get("status", {}).get("containerStatuses") or []
        return statuses and statuses[0].get("restartCount", 0) >= 1 and "running" in statuses[0].get("state", {})

    await wait_for(restarted, timeout=120, what="container restarted", describe=lambda: node_story(real_lab, rkube, ns))
    assert agent.spec_path(uid).read_text() == before  # rewritten, the same spec
    assert agent.process.log.read_text().count('"prepared claim"') > prepares  # the repeated prepare
    assert devices_of(await printed(real_lab, ns, "rb")) == {device}
    await delete_and_wait_unprepared(rkube, agent, ns, "rb", [uid])


def kill_container(lab: Lab, pod: dict, container: str = "main") -> None:
    """SIGKILL one container's process (its sandbox lives on): kubelet starts it again in the same
    sandbox, without asking the plugin for a prepare."""
    [status] = [s for s in pod["status"]["containerStatuses"] if s["name"] == container]
    lab.ctr(NODE, "task", "kill", "--signal", "SIGKILL", status["containerID"].split("://", 1)[1])


async def test_a_spec_lost_under_a_running_pod_is_restored_and_the_container_restarts(real_lab, rkube, agent, ns):
    """The issue's story (kubernetes#141433 without a reboot): the spec removed while the Pod's
    sandbox lives, the agent re-created (as its DaemonSet does), kubelet restarted, the container
    killed: kubelet starts it again in the same sandbox, with no prepare, so only a spec the agent
    wrote again lets it start. Then once more with the agent running all along."""
    assert await wait_for(lambda: _true(agent.registered()), timeout=30, what="registration with kubelet")
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("lost", DRIVER), ns)
    body = busybox_pod("lost", {"gpu": {"resourceClaimName": "lost"}}, script=HOLD)
    body["spec"]["restartPolicy"] = "Always"
    await rkube.create(PODS, body, ns)
    pod = await running(rkube, ns, "lost")
    claim = await rkube.get(RESOURCE_CLAIMS, "lost", ns)
    uid, device = claim["metadata"]["uid"], claim["status"]["allocation"]["devices"]["results"][0]["device"]
    before = agent.spec_path(uid).read_text()
    sandbox = pod["status"]["podIP"]

    async def restarted(count: int):
        pod = await rkube.get(PODS, "lost", ns)
        [status] = pod.get("status", {}).get("containerStatuses") or [{}]
        return pod if status.get("restartCount", 0) >= count and "running" in status.get("state", {}) else None

    agent.spec_path(uid).unlink()
    registrations = agent.process.log.read_text().count("registered with kubelet")
    agent.process.kill()
    agent.process.start()
    await wait_for(
        lambda: _true(agent.process.log.read_text().count("registered with kubelet") > registrations),
        timeout=60,
        what="the re-created agent registered",
    )
    real_lab.restart(f"kubelet-{NODE}")
    real_lab.wait_node_schedulable(NODE)
    kill_container(real_lab, pod)
    pod = await wait_for(
        lambda: restarted(1),
        timeout=120,
        what="the container running again",
        describe=lambda: node_story(real_lab, rkube, ns),
    )
    assert pod["status"]["podIP"] == sandbox  # the same sandbox: kubelet asked for no prepare
    assert agent.spec_path(uid).read_text() == before
    assert devices_of(await printed(real_lab, ns, "lost")) == {device}

    agent.spec_path(uid).unlink()  # now with the agent running: it notices within seconds
    kill_container(real_lab, pod)
    await wait_for(
        lambda: restarted(2),
        timeout=120,
        what="the container running again (second time)",
        describe=lambda: node_story(real_lab, rkube, ns),
    )
    assert agent.spec_path(uid).read_text() == before
    events = [
        e
        for e in await rkube.list(EVENTS, ns)
        if e["reason"] == "CDISpecRestored" and e["involvedObject"].get("name") == "lost"
    ]
    assert events and events[0]["type"] == "Warning", events
    await delete_and_wait_unprepared(rkube, agent, ns, "lost", [uid])


async def test_kubelet_retries_prepare_after_an_injected_failure(real_lab, rkube, agent, ns):
    """While the simulated backend fails every prepare, the Pod's container does not start and
    kubelet reports the failure; once the failure is lifted kubelet's retry prepares the claim."""
    failure = {"metadata": {"annotations": {PREPARE_FAILURE_ANNOTATION: ",".join(f"gpu-{i}" for i in range(4))}}}
    await rkube.patch(NODES, NODE, failure, content_type=MERGE_PATCH)
    try:
        await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("flaky", DRIVER), ns)
        await rkube.create(PODS, busybox_pod("retry", {"gpu": {"resourceClaimName": "flaky"}}, script=HOLD), ns)

        async def failed_prepare():
            return [
                e
                for e in await rkube.list(EVENTS, ns)
                if e["involvedObject"].get("name") == "retry"
                and "simulated prepare failure" in (e.get("message") or "")
            ]

        await wait_for(
            failed_prepare,
            timeout=90,
            what="kubelet reporting the failed prepare",
            describe=lambda: node_story(real_lab, rkube, ns),
        )
        pod = await rkube.get(PODS, "retry", ns)
        assert pod["status"].get("phase") == "Pending" and not pod["status"].get("containerStatuses", [{}])[0].get(
            "state", {}
        ).get("running"), pod["status"]
        uid = (await rkube.get(RESOURCE_CLAIMS, "flaky", ns))["metadata"]["uid"]
        assert not agent.spec_path(uid).exists() and uid not in agent.checkpoint_uids()
    finally:
        await rkube.patch(
            NODES, NODE, {"metadata": {"annotations": {PREPARE_FAILURE_ANNOTATION: None}}}, content_type=MERGE_PATCH
        )
    await wait_phase(rkube, ns, "retry", ("Running",), timeout=120)
    assert devices_of(await printed(real_lab, ns, "retry"))
    await delete_and_wait_unprepared(rkube, agent, ns, "retry", [uid])


async def test_stale_prepare_after_unprepare_does_not_bring_the_claim_back(real_lab, rkube, agent, ns):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("late", DRIVER), ns)
    await rkube.create(PODS, busybox_pod("p", {"gpu": {"resourceClaimName": "late"}}, script=HOLD), ns)
    await running(rkube, ns, "p")
    claim = await rkube.get(RESOURCE_CLAIMS, "late", ns)
    uid = claim["metadata"]["uid"]
    await delete_and_wait_unprepared(rkube, agent, ns, "p", [uid])

    async def released():
        current = await rkube.get(RESOURCE_CLAIMS, "late", ns)
        return not (current.get("status") or {}).get("reservedFor")

    await wait_for(released, what="the claim no longer reserved")
    # kubelet's NodePrepareResources for the deleted Pod, delivered late, straight to the agent.
    kubelet = FakeKubelet(agent.files.plugins_registry)
    try:
        await kubelet.register()
        response = await kubelet.prepare([claim])
    finally:
        await kubelet.close()
    assert response.claims[uid].error, response
    assert uid not in agent.checkpoint_uids() and not agent.spec_path(uid).exists()


# -- the NVIDIA Container Toolkit's CDI devices, resolved and injected by containerd ------------------

MARKER = "/run/nvidia-toolkit-marker"


async def test_toolkit_cdi_devices_are_injected_by_containerd(real_lab, rkube, agent, ns, tmp_path):
    """With ``nvidiaContainerToolkit: true`` the simulated GPUs behave as NVML's do: prepare also
    answers the NVIDIA Container Toolkit's device (``nvidia.com/gpu=<uuid>``, else its index). A
    stand-in toolkit spec (``nvidia.yaml``, named as ``nvidia-ctk cdi generate`` names devices)
    mounts a marker file and sets a variable per device: the container sees both, so containerd
    really resolved and injected the toolkit's devices beside the claim's own."""
    slices = await rkube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}")
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    marker = tmp_path / "marker"
    marker.write_text("injected by the toolkit's spec\n")
    toolkit = agent.files.cdi / "nvidia.yaml"
    toolkit.write_text(
        yaml.safe_dump(
            {
                "cdiVersion": "0.5.0",
                "kind": "nvidia.com/gpu",
                # Even GPUs by uuid, odd ones by index: both names must resolve.
                "devices": [
                    {
                        "name": d["attributes"]["uuid"]["string"]
                        if d["attributes"]["index"]["int"] % 2 == 0
                        else str(d["attributes"]["index"]["int"]),
                        "containerEdits": {"env": [f"TOOLKIT_GPU_{d['attributes']['index']['int']}=injected"]},
                    }
                    for d in devices
                ],
                "containerEdits": {
                    "env": ["NVIDIA_VISIBLE_DEVICES=void"],
                    "mounts": [
                        {"hostPath": str(marker), "containerPath": MARKER, "options": ["ro", "nosuid", "nodev", "bind"]}
                    ],
                },
            }
        )
    )
    # The attribute makes the re-read inventory observable (the slice changes with it).
    agent.write_inventory(nvidiaContainerToolkit=True, gpu={"attributes": {"toolkit": {"bool": True}}})
    try:
        await wait_for(lambda: _published_attribute(rkube, "toolkit", True), what="the toolkit inventory published")
        await rkube.create(
            RESOURCE_CLAIMS, {"metadata": {"name": "tk"}, "spec": objects.claim_spec(DRIVER, count=2)}, ns
        )
        await rkube.create(
            PODS,
            busybox_pod(
                "tk",
                {"gpu": {"resourceClaimName": "tk"}},
                script=f"cat {MARKER}; env | grep -E '^(DRA_|TOOLKIT_|NVIDIA_)' | sort; echo done; exec sleep 3600",
            ),
            ns,
        )
        await wait_phase(rkube, ns, "tk", ("Running",), timeout=120)
        claim = await rkube.get(RESOURCE_CLAIMS, "tk", ns)
        indexes = sorted(int(r["device"].split("-")[1]) for r in claim["status"]["allocation"]["devices"]["results"])
        env = await printed(real_lab, ns, "tk")
        assert "injected by the toolkit's spec" in logs(real_lab, ns, "tk")
        assert {k: v for k, v in env.items() if k.startswith("TOOLKIT_")} == {
            f"TOOLKIT_GPU_{i}": "injected" for i in indexes
        }
        assert devices_of(env) == {f"gpu-{i}" for i in indexes}  # the claim's own spec too
        assert env["NVIDIA_VISIBLE_DEVICES"] == "void"  # the toolkit's spec-wide edits
        prepared = json.loads(agent.spec_path(claim["metadata"]["uid"]).read_text())
        assert prepared["kind"] == f"k8s.{DRIVER}/claim"
        await delete_and_wait_unprepared(rkube, agent, ns, "tk", [claim["metadata"]["uid"]])
    finally:
        agent.write_inventory()
        toolkit.unlink(missing_ok=True)
        await wait_for(lambda: _published_attribute(rkube, "toolkit", None), what="the plain inventory published")


async def _published_attribute(kube: Kube, name: str, value) -> bool:
    slices = await kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}")
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    return bool(devices) and all((d.get("attributes") or {}).get(name, {}).get("bool") == value for d in devices)


# -- device health through kubelet's DRAResourceHealth stream ---------------------------------------


def allocated_health(pod: dict) -> dict[str, str]:
    """resourceID -> health of the first container's allocatedResourcesStatus."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return {
        r["resourceID"]: r.get("health", "")
        for entry in statuses[0].get("allocatedResourcesStatus") or []
        for r in entry.get("resources") or []
    }


async def test_a_fault_on_a_prepared_device_reaches_the_pods_status_and_clears(real_lab, rkube, agent, ns):
    """A fault injected on the prepared device (simulated backend, Node annotation) shows in the
    Pod's status.containerStatuses[].allocatedResourcesStatus within seconds, through kubelet's
    health stream, and clears when the device recovers (quiet period 1 s here)."""
    # Which claims kubelet reports health for differs per release (docs/compatibility.md):
    if real_lab.minor >= 36:  # every claim
        name, source = "sick", {"resourceClaimName": "sick"}
        await rkube.create(RESOURCE_CLAIMS, objects.resource_claim(name, DRIVER), ns)
    elif real_lab.minor == 35:
        # only a claim named in the Pod's status.resourceClaimStatuses, that is one made from a
        # template (v1.35.8 cm/dra/manager.go UpdateAllocatedResourcesStatus)
        name, source = None, {"resourceClaimTemplateName": "sick"}
        await rkube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("sick", DRIVER), ns)
    else:
        # only a claim whose own name is the container's claim entry: 1.34 compares the two
        # (v1.34.12 cm/dra/manager.go UpdateAllocatedResourcesStatus, ``cClaim.Name ==
        # claimInfo.ClaimName``), so a generated name never matches
        name, source = "gpu", {"resourceClaimName": "gpu"}
        await rkube.create(RESOURCE_CLAIMS, objects.resource_claim(name, DRIVER), ns)
    await rkube.create(PODS, busybox_pod("sick", {"gpu": source}, script=HOLD), ns)
    await running(rkube, ns, "sick")
    [generated] = (await rkube.get(PODS, "sick", ns))["status"].get("resourceClaimStatuses") or [{}]
    claim = await rkube.get(RESOURCE_CLAIMS, name or generated["resourceClaimName"], ns)
    uid, device = claim["metadata"]["uid"], claim["status"]["allocation"]["devices"]["results"][0]["device"]
    ours = f"k8s.{DRIVER}/claim={uid}-{device}"  # kubelet names a device by its first CDI ID

    async def health_is(value: str):
        pod = await rkube.get(PODS, "sick", ns)
        return pod if allocated_health(pod).get(ours) == value else None

    pod = await wait_for(
        lambda: health_is("Healthy"),
        timeout=30,
        what="the device Healthy in the Pod's status",
        describe=lambda: node_story(real_lab, rkube, ns),
    )
    [entry] = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    assert entry["name"] == "claim:gpu"
    try:
        started = time.monotonic()
        await rkube.patch(
            NODES, NODE, {"metadata": {"annotations": {HEALTH_ANNOTATION: f"{device}=lost"}}}, content_type=MERGE_PATCH
        )
        pod = await wait_for(
            lambda: health_is("Unhealthy"),
            timeout=20,
            what="the device Unhealthy in the Pod's status",
            describe=lambda: node_story(real_lab, rkube, ns),
        )
        print(f"unhealthy in the Pod's status after {time.monotonic() - started:.1f} s")
        [resource] = pod["status"]["containerStatuses"][0]["allocatedResourcesStatus"][0]["resources"]
        if real_lab.minor >= 36:  # the message is new in 1.36 (ResourceHealthStatusMessage)
            assert "gpu-lost" in resource.get("message", ""), resource
    finally:
        await rkube.patch(
            NODES, NODE, {"metadata": {"annotations": {HEALTH_ANNOTATION: None}}}, content_type=MERGE_PATCH
        )
    started = time.monotonic()
    await wait_for(lambda: health_is("Healthy"), timeout=30, what="the device Healthy again after recovery")
    print(f"healthy again after {time.monotonic() - started:.1f} s")
    await delete_and_wait_unprepared(rkube, agent, ns, "sick", [uid])


# -- opaque configuration: class and claim merged, strict, another driver's left alone ----------------


def opaque(driver: str, parameters: dict, requests: list[str] | None = None) -> dict:
    config = {"opaque": {"driver": driver, "parameters": parameters}}
    if requests:
        config["requests"] = requests
    return config


async def test_class_and_claim_config_reach_the_container_merged_and_a_bad_one_fails_the_claim(
    real_lab, rkube, agent, ns
):
    klass = f"cfg-{ns}"
    body = objects.device_class(klass, DRIVER)
    body["spec"]["config"] = [
        opaque(DRIVER, {"apiVersion": CONFIG_API, "kind": CONFIG_KIND, "env": {"FROM_CLASS": "yes", "BOTH": "class"}})
    ]
    await rkube.create(DEVICE_CLASSES, body)
    try:
        good = {"metadata": {"name": "good"}, "spec": objects.claim_spec(klass)}
        good["spec"]["devices"]["config"] = [
            opaque("other.example.com", {"apiVersion": "other.example.com/v1", "kind": "Strange", "x": 1}),
            opaque(
                DRIVER,
                {
                    "apiVersion": CONFIG_API,
                    "kind": CONFIG_KIND,
                    "env": {"BOTH": "claim"},
                    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
                },
                ["gpu"],
            ),
        ]
        bad = {"metadata": {"name": "bad"}, "spec": objects.claim_spec(klass)}
        bad["spec"]["devices"]["config"] = [
            opaque(
                DRIVER,
                {"apiVersion": CONFIG_API, "kind": CONFIG_KIND, "sharing": {"strategy": "TimeSlicing", "slices": 3}},
            )
        ]
        for claim in (good, bad):
            await rkube.create(RESOURCE_CLAIMS, claim, ns)
        script = "env | grep -E '^(DRA_|FROM_CLASS|BOTH)' | sort; echo done; exec sleep 3600"
        await rkube.create(PODS, busybox_pod("good", {"gpu": {"resourceClaimName": "good"}}, script=script), ns)
        await rkube.create(PODS, busybox_pod("bad", {"gpu": {"resourceClaimName": "bad"}}, script=script), ns)
        await running(rkube, ns, "good")
        env = await printed(real_lab, ns, "good")
        [device] = devices_of(env)
        key = device.upper().replace("-", "_")
        assert (env["FROM_CLASS"], env["BOTH"]) == ("yes", "claim")  # class first, then the claim
        assert env[f"DRA_DEVICE_{key}_SHARING_STRATEGY"] == "TimeSlicing"
        assert env[f"DRA_DEVICE_{key}_TIMESLICE_INTERVAL"] == "Long"

        async def failed_prepare():
            return [
                e["message"]
                for e in await rkube.list(EVENTS, ns)
                if e["involvedObject"].get("name") == "bad"
                and "unknown field sharing.slices" in (e.get("message") or "")
            ]

        [message, *_] = await wait_for(
            failed_prepare,
            timeout=90,
            what="kubelet reporting the bad config",
            describe=lambda: node_story(real_lab, rkube, ns),
        )
        assert f"ResourceClaim {ns}/bad spec.devices.config[0]" in message, message
        assert (await rkube.get(PODS, "bad", ns))["status"].get("phase") == "Pending"
        uids = [(await rkube.get(RESOURCE_CLAIMS, n, ns))["metadata"]["uid"] for n in ("good", "bad")]
        assert uids[1] not in agent.checkpoint_uids()
        await rkube.delete(PODS, "bad", ns)
        await delete_and_wait_unprepared(rkube, agent, ns, "good", uids[:1])
    finally:
        await rkube.delete(DEVICE_CLASSES, klass)


# -- the binding-conditions example on a real node ------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


async def test_binding_conditions_example_runs_on_the_real_node(real_lab, rkube, agent, ns, tmp_path):
    """The example's fabric driver has no kubelet plugin: its slice says skipNodeOperations ["*"]
    (DRAOptionalNodeOperations, alpha in 1.37), the scheduler copies that into the allocation and
    kubelet starts the Pod without calling NodePrepareResources, once the binding operator reported
    the attachment. (``agent`` for the claims operator, which creates the template's claim.)"""
    if real_lab.minor < 37:
        pytest.skip("skipNodeOperations is new in Kubernetes 1.37: before, the fabric driver needs a kubelet plugin")
    documents = [
        d
        for file in ("example.yaml", "slice.yaml")
        for d in yaml.safe_load_all((EXAMPLES / "binding-conditions" / file).read_text())
        if d
    ]
    binding = OperatorProcess(
        ["binding"],
        real_lab.kubeconfig,
        tmp_path,
        env={"DRA_BINDING_DRIVERS": "fabric-gpu.example.com", "DRA_BINDING_PREPARER_CONFIG": '{"delay": 1}'},
    )
    binding.start()
    created = []
    try:
        for document in documents:
            kind = document["kind"]
            if kind == "Pod":
                document["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODE}
            resource = {
                "DeviceClass": DEVICE_CLASSES,
                "ResourceSlice": RESOURCE_SLICES,
                "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES,
                "Pod": PODS,
            }[kind]
            namespaced = kind in ("ResourceClaimTemplate", "Pod")
            await rkube.create(resource, document, ns if namespaced else None)
            if not namespaced:
                created.append((resource, document["metadata"]["name"]))
        pod = await wait_phase(rkube, ns, "fabric-gpu-user", ("Running",), timeout=90)
        assert pod["spec"]["nodeName"] == NODE
        claim = await pod_claim(rkube, ns, "fabric-gpu-user")
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert result["skipNodeOperations"] == ["*"]
        [device] = claim["status"]["devices"]
        assert {c["type"]: c["status"] for c in device["conditions"]}["fabric-gpu.example.com/attached"] == "True"
        await rkube.delete(PODS, "fabric-gpu-user", ns)
        await wait_for(lambda: _gone(rkube, ns, "fabric-gpu-user"), timeout=90, what="the example Pod gone")
        # The binding operator's finalizer keeps the claim until it has undone the preparation:
        # stopped earlier, it would leave the claim, and the namespace, for good.
        await wait_gone(rkube, RESOURCE_CLAIMS, claim["metadata"]["name"], ns)
    finally:
        binding.stop()
        for resource, name in created:
            await rkube.delete(resource, name)


# -- status.devices: the agent's data, and only for its own node's claims ---------------------------


async def test_status_devices_carry_the_agents_data_and_no_other_nodes_claim_is_writable(
    real_lab, rkube, agent, ns, tmp_path
):
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("st", DRIVER), ns)
    account = "dra-nodeagent"
    await rkube.create(SERVICE_ACCOUNTS, {"metadata": {"name": account}}, ns)
    body = busybox_pod("st", {"gpu": {"resourceClaimName": "st"}}, script=HOLD)
    body["spec"]["serviceAccountName"] = account  # its token is then bound to the real node, as a DaemonSet Pod's
    await rkube.create(PODS, body, ns)
    pod = await running(rkube, ns, "st")

    async def written():
        claim = await rkube.get(RESOURCE_CLAIMS, "st", ns)
        return claim if (claim.get("status") or {}).get("devices") else None

    claim = await wait_for(written, what="status.devices written by the agent")
    [entry] = claim["status"]["devices"]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    slices = await rkube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE},spec.driver={DRIVER}")
    [published] = [d for s in slices for d in s["spec"]["devices"] if d["name"] == result["device"]]
    assert (entry["driver"], entry["pool"], entry["device"]) == (DRIVER, NODE, result["device"])
    assert entry["data"]["uuid"] == published["attributes"]["uuid"]["string"]
    assert entry["data"]["productName"] == "RealLabGPU"
    assert entry["data"]["cdiDeviceIDs"] == [f"k8s.{DRIVER}/claim={claim['metadata']['uid']}-{result['device']}"]
    managers = {m["manager"] for m in claim["metadata"]["managedFields"] if m.get("subresource") == "status"}
    assert DRIVER in managers

    # The kustomize ClusterRole, for a ServiceAccount token bound to a Pod on the real node.
    [role] = [
        d
        for d in yaml.safe_load_all(
            (Path(__file__).resolve().parents[2] / "kustomize" / "base" / "nodeagent.yaml").read_text()
        )
        if d and d["kind"] == "ClusterRole"
    ]
    name = f"nodeagent-{ns}"
    await rkube.create(CLUSTER_ROLES, {"metadata": {"name": name}, "rules": role["rules"]})
    await rkube.create(
        CLUSTER_ROLE_BINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        },
    )
    far_slice = f"far-{ns}"
    try:
        kubeconfig = await service_account_kubeconfig(real_lab, rkube, account, tmp_path / "na.kubeconfig", pod, ns)
        async with await Kube.connect(str(kubeconfig)) as agent_kube:
            own = device_status.status_apply(
                claim,
                DRIVER,
                [PreparedDevice(NODE, result["device"])],
                {result["device"]: {"attributes": {"uuid": {"string": "rewritten"}}}},
            )
            await wait_for(
                lambda: agent_kube.apply(RESOURCE_CLAIMS, own, field_manager=DRIVER, force=True, subresource="status"),
                timeout=10,
                what="the agent's token writing its own node's claim status",
            )

            # No DRAResourceClaimGranularStatusAuthorization before 1.36: there the admission
            # policy dra-operators-nodeagent-own-claims guards other nodes' claims
            # (test_nodeagent_claim_status_policy.py, also run by make test-versions).
            if real_lab.minor >= 36:
                # A claim allocated on the kwok node: the same token may not write its status.devices.
                await rkube.create(
                    RESOURCE_SLICES, objects.resource_slice(far_slice, DRIVER, "lab-node-0", [objects.device("far-0")])
                )
                await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("far", DRIVER), ns)
                far_pod = objects.pod("far", {"gpu": {"resourceClaimName": "far"}})
                far_pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "lab-node-0"}
                await rkube.create(PODS, far_pod, ns)

                async def allocated():
                    far = await rkube.get(RESOURCE_CLAIMS, "far", ns)
                    return far if (far.get("status") or {}).get("allocation") else None

                far = await wait_for(allocated, what="the kwok node's claim allocated")
                other = device_status.status_apply(far, DRIVER, [PreparedDevice("lab-node-0", "far-0")], {})
                with pytest.raises(ApiError) as denied:
                    await agent_kube.apply(
                        RESOURCE_CLAIMS, other, field_manager=DRIVER, force=True, subresource="status"
                    )
                assert denied.value.status in (403, 422), denied.value
                assert (
                    "resourceclaims/driver" in denied.value.message and "arbitrary-node:patch" in denied.value.message
                )
        if real_lab.minor >= 36:
            assert not (await rkube.get(RESOURCE_CLAIMS, "far", ns))["status"].get("devices")
        rewritten = (await rkube.get(RESOURCE_CLAIMS, "st", ns))["status"]["devices"][0]
        assert rewritten["data"]["uuid"] == "rewritten"
    finally:
        await rkube.delete(CLUSTER_ROLE_BINDINGS, name)
        await rkube.delete(CLUSTER_ROLES, name)
        if real_lab.minor >= 36:
            await rkube.delete(PODS, "far", ns, grace_period_seconds=0)
            await rkube.delete(RESOURCE_SLICES, far_slice)
    await delete_and_wait_unprepared(rkube, agent, ns, "st", [claim["metadata"]["uid"]])

    # Deallocated by the claims operator once no Pod uses it: the API server drops the entries of
    # devices no longer allocated (strategy.go dropDeallocatedStatusDevices), nothing else needed.
    async def deallocated():
        status = (await rkube.get(RESOURCE_CLAIMS, "st", ns)).get("status") or {}
        return [status] if not status.get("allocation") else None

    [status] = await wait_for(deallocated, what="claim st deallocated")
    assert not status.get("devices"), status


# -- seamless plugin update: two instances side by side, then the old one goes ----------------------


async def test_rolling_update_while_pods_are_created(real_lab, rkube, agent, ns, tmp_path):
    """As a DaemonSet with maxSurge 1 / maxUnavailable 0 does it: a second agent (its own POD_UID,
    so sockets of its own) starts beside the running one, Pods are created throughout, the old
    agent stops, the new one serves alone, then the old one comes back and the new one stops.
    Every Pod runs, no prepare fails, and no stale socket is left."""
    new = Agent(real_lab, tmp_path)
    new.process.extra_env["POD_UID"] = "4c1d2b3a-0000-4000-8000-00000000beef"
    registry = agent.files.plugins_registry
    failed_before = agent.process.log.read_text().count('"cannot prepare claim"')  # earlier tests' on purpose
    try:
        new.process.start()
        await wait_for(lambda: _true(new.registered()), timeout=30, what="the new instance registered")
        assert len([p for p in registry.iterdir() if p.name.endswith("-reg.sock")]) == 2
        pods = []

        async def create(name: str) -> None:
            await rkube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template(name, DRIVER), ns)
            await rkube.create(
                PODS,
                busybox_pod(
                    name,
                    {"gpu": {"resourceClaimTemplateName": name}},
                    script=PRINT_ENV + "; echo done; exec sleep 3600",
                ),
                ns,
            )
            pods.append(name)

        await create("during-both")
        agent.process.stop()  # the old instance goes: SIGTERM, sockets removed
        await create("after-old")
        await running(rkube, ns, "during-both")
        await running(rkube, ns, "after-old")
        before = agent.process.log.read_text().count("registered with kubelet")
        agent.process.start()  # and back, as the next update would bring it
        await wait_for(
            lambda: _true(agent.process.log.read_text().count("registered with kubelet") > before),
            timeout=30,
            what="the old instance registered again",
        )
        await create("after-return")
        new.process.stop()
        await create("after-new")
        for name in pods:
            await running(rkube, ns, name)
            assert devices_of(await printed(real_lab, ns, name))
        failures = [
            e["message"]
            for e in await rkube.list(EVENTS, ns)
            if "Prepare" in (e.get("reason") or "") and e.get("type") == "Warning"
        ]
        assert not failures, failures
        assert agent.process.log.read_text().count('"cannot prepare claim"') == failed_before
        assert '"cannot prepare claim"' not in new.process.log.read_text()
        sockets = sorted(p.name for p in registry.iterdir() if p.name.endswith("-reg.sock"))
        assert sockets == [f"{DRIVER}-reg.sock"], sockets  # the stopped instance's is gone
        assert sorted(p.name for p in (agent.files.plugins / DRIVER).iterdir() if p.name.endswith(".sock")) == [
            "dra.sock"
        ]
        for name in pods:
            await rkube.delete(PODS, name, ns)
    finally:
        new.process.stop()
        if agent.process.proc is None or agent.process.proc.poll() is not None:
            agent.process.start()


async def test_a_deleted_registration_socket_is_served_again(real_lab, rkube, agent, ns):
    registrations = agent.process.log.read_text().count("registered with kubelet")
    socket = agent.files.plugins_registry / f"{DRIVER}-reg.sock"
    socket.unlink()
    await wait_for(lambda: _true(socket.is_socket()), timeout=20, what="the registration socket served again")
    await wait_for(
        lambda: _true(agent.process.log.read_text().count("registered with kubelet") > registrations),
        timeout=30,
        what="kubelet registered the plugin again",
    )
    await rkube.create(RESOURCE_CLAIMS, objects.resource_claim("again", DRIVER), ns)
    await rkube.create(PODS, busybox_pod("again", {"gpu": {"resourceClaimName": "again"}}, script=HOLD), ns)
    await running(rkube, ns, "again")
    uid = (await rkube.get(RESOURCE_CLAIMS, "again", ns))["metadata"]["uid"]
    await delete_and_wait_unprepared(rkube, agent, ns, "again", [uid])


# -- device metadata (KEP-5304), ported from upstream's "must mount device metadata ..." ------------

METADATA_DIR = "/var/run/kubernetes.io/dra-device-attributes"


def cat_script(paths: list[str]) -> str:
    """Print each file between markers (MISSING when it cannot be read), then hold the devices."""
    # cat's complaint on stdout: kubelet's log interleaves the two streams by time only.
    parts = [f'echo "=== {p}"; cat {p} 2>&1 || echo MISSING; echo' for p in paths]
    return "; ".join(parts) + "; echo done; exec sleep 3600"


async def printed_files(lab: Lab, ns: str, pod: str, container: str) -> dict[str, str]:
    async def complete():
        text = logs(lab, ns, pod, container)
        return text if "done" in text.split() else None

    text = await wait_for(complete, timeout=60, what=f"{pod}/{container} printed its files")
    files: dict[str, str] = {}
    for section in text.split("=== ")[1:]:
        path, _, content = section.partition("\n")
        files[path] = content.rsplit("\ndone", 1)[0].strip()
    return files


def metadata_document(text: str) -> dict:
    """The first document of the stream, as upstream's decoder takes the first it knows."""
    document, _ = json.JSONDecoder().raw_decode(text)
    return document


async def slice_attributes(kube: Kube) -> dict[str, dict]:
    slices = await kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
    return {d["name"]: d.get("attributes") or {} for s in slices for d in s["spec"].get("devices") or []}


def check_metadata(document: dict, claim: dict, request: str, attributes: dict[str, dict]) -> None:
    assert document["kind"] == "DeviceMetadata"
    assert document["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    meta = claim["metadata"]
    assert document["metadata"] == {
        "name": meta["name"],
        "namespace": meta["namespace"],
        "uid": meta["uid"],
        "generation": 1,
    }
    [entry] = document["requests"]
    assert entry["name"] == request
    results = [r for r in claim["status"]["allocation"]["devices"]["results"] if r["request"] == request]
    assert [(d["driver"], d["pool"], d["name"]) for d in entry["devices"]] == [
        (r["driver"], r["pool"], r["device"]) for r in results
    ]
    for device in entry["devices"]:
        assert device["attributes"] == attributes[device["name"]]


async def test_device_metadata_is_mounted_per_request_and_removed_on_unprepare(real_lab, rkube, agent, ns):
    """ "must mount device metadata for resource claims" and "... to the right containers": a
    container that uses the whole claim reads both requests' files, one that uses req1 only
    reads req1's and not req0's; after the Pod is gone the files are gone from the host."""
    body = objects.resource_claim("meta", DRIVER)
    [request] = body["spec"]["devices"]["requests"]
    body["spec"]["devices"]["requests"] = [{**request, "name": "req0"}, {**request, "name": "req1"}]
    await rkube.create(RESOURCE_CLAIMS, body, ns)
    path = f"{METADATA_DIR}/resourceclaims/meta/%s/{DRIVER}-metadata.json"
    both = [path % "req0", path % "req1"]
    pod = busybox_pod(
        "meta",
        {"meta": {"resourceClaimName": "meta"}},
        containers=[
            container("all-requests", ["meta"], cat_script(both)),
            {
                **container("req1-only", [], cat_script(both)),
                "resources": {"claims": [{"name": "meta", "request": "req1"}]},
            },
        ],
    )
    await rkube.create(PODS, pod, ns)
    await running(rkube, ns, "meta")
    claim = await rkube.get(RESOURCE_CLAIMS, "meta", ns)
    uid = claim["metadata"]["uid"]
    attributes = await slice_attributes(rkube)
    host = agent.files.plugins / DRIVER / "dra-device-metadata" / f"{ns}_meta"
    assert sorted(p.name for p in host.iterdir()) == ["req0", "req1"]

    everything = await printed_files(real_lab, ns, "meta", "all-requests")
    for request, file in zip(("req0", "req1"), both, strict=True):
        check_metadata(metadata_document(everything[file]), claim, request, attributes)
        # The container reads what the agent wrote on the host, byte for byte.
        assert everything[file] + "\n" == (host / request / "metadata.json").read_text()
    one = await printed_files(real_lab, ns, "meta", "req1-only")
    check_metadata(metadata_document(one[both[1]]), claim, "req1", attributes)
    assert one[both[0]].endswith("MISSING")  # req0's file is not in this container

    await delete_and_wait_unprepared(rkube, agent, ns, "meta", [uid])
    assert not host.exists()


async def test_device_metadata_of_a_template_claim_is_under_the_pods_claim_name(real_lab, rkube, agent, ns):
    """ "must mount device metadata for resource claim templates": the generated claim's file is
    at the Pod's name for the claim, with podClaimName in it."""
    await rkube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("gpu", DRIVER), ns)
    file = f"{METADATA_DIR}/resourceclaimtemplates/gpu/gpu/{DRIVER}-metadata.json"
    await rkube.create(
        PODS, busybox_pod("tmeta", {"gpu": {"resourceClaimTemplateName": "gpu"}}, script=cat_script([file])), ns
    )
    await running(rkube, ns, "tmeta")
    claim = await pod_claim(rkube, ns, "tmeta")
    document = metadata_document((await printed_files(real_lab, ns, "tmeta", "main"))[file])
    assert document["podClaimName"] == "gpu"
    check_metadata(document, claim, "gpu", await slice_attributes(rkube))
    host = agent.files.plugins / DRIVER / "dra-device-metadata" / f"{ns}_{claim['metadata']['name']}"
    assert (host / "gpu" / "metadata.json").exists()
    await delete_and_wait_unprepared(rkube, agent, ns, "tmeta", [claim["metadata"]["uid"]])
    assert not host.exists()
