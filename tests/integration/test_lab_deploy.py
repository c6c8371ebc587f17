"""The project deployed as users deploy it: the image (``make image``) on a lab's two real nodes,
the kind overlay applied with kubectl (``lab up --real-nodes 2 --deploy``, operators/lab/deploy.py),
upstream's two DRA controllers off. Every operator runs as a Pod under its kustomize
ServiceAccount, RBAC and admission policy; the examples run on the nodes with their devices; the
README's kind walkthrough prints what it says."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from operators.core.api.kube import ApiError, Kube
from operators.core.api.resources import (
    DEVICE_TAINT_RULES,
    EVENTS,
    LEASES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.lab import Lab
from operators.lab.cluster import LabState
from operators.lab.deploy import DAEMONSET, NAMESPACE, Target, deploy, deployments

from ..readme import kind_walkthrough
from . import objects
from .labs import client_of, running_lab, short_run_dir
from .served_examples import served_copy
from .waiting import describe_namespace, wait_for, wait_gone

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
DRIVER = "gpu.sim.dra-operators.dev"
NODES = ("lab-real-0", "lab-real-1")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (mounts, bridges, cgroups)")


@pytest.fixture(scope="module")
def deployed() -> Lab:
    """Two real Nodes, no kwok Node, and the project deployed onto them."""
    with running_lab("-deploy", short_run_dir("dp-"), nodes=0, real_nodes=2, remove_run_dir=True) as lab:
        deploy(Target.of(LabState.load(lab.run_dir), lab.bin_dir), progress=lambda m: print(m, flush=True))
        yield lab


@pytest.fixture(scope="module")
async def dkube(deployed: Lab) -> Kube:
    async with client_of(deployed) as client:
        yield client


async def operator_pods(kube: Kube) -> list[dict]:
    return await kube.list(PODS, NAMESPACE)


def logs(lab: Lab, namespace: str, pod: str, *args: str) -> str:
    result = lab.kubectl("logs", "-n", namespace, pod, *args, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


async def test_every_workload_runs_from_the_image_on_the_real_nodes_as_its_user(deployed, dkube):
    pods = await operator_pods(dkube)
    by_app = {}
    for pod in pods:
        by_app.setdefault(pod["metadata"]["labels"]["app.kubernetes.io/name"], []).append(pod)
    # Before 1.36 no ResourcePoolStatusRequest: the overlay leaves the poolstatus operator out.
    assert {name: len(pods) for name, pods in by_app.items()} == {
        name: 2 for name in (*deployments(deployed.minor), DAEMONSET)
    }
    assert sorted(p["spec"]["nodeName"] for p in by_app[DAEMONSET]) == list(NODES)
    for pod in pods:
        assert pod["status"]["phase"] == "Running", pod["metadata"]["name"]
        [status] = pod["status"]["containerStatuses"]
        assert status["ready"] and status["image"].endswith("dra-operators:0.1.0"), status
        uid = deployed.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "--", "id", "-u").stdout.strip()
        assert uid == ("0" if pod in by_app[DAEMONSET] else "65532"), (pod["metadata"]["name"], uid)


HEALTH_CHECK = """
import asyncio, sys
from grpclib.client import Channel
from grpclib.health.v1 import health_grpc, health_pb2 as pb
async def check():
    channel = Channel("127.0.0.1", 51515)
    try:
        answer = await health_grpc.HealthStub(channel).Check(pb.HealthCheckRequest(service=sys.argv[1]), timeout=5)
    finally:
        channel.close()
    print(pb.HealthCheckResponse.ServingStatus.Name(answer.status))
asyncio.run(check())
"""


async def test_the_node_agents_grpc_liveness_probe_answers_serving(deployed, dkube):
    """kubelet probes the agent through grpc.health.v1 (service "liveness"), which stays SERVING
    while the agent's self-check reaches its own kubelet plugin sockets: no restart."""
    agents = [p for p in await operator_pods(dkube) if p["metadata"]["labels"]["app.kubernetes.io/name"] == DAEMONSET]
    assert len(agents) == 2
    for pod in agents:
        [container] = pod["spec"]["containers"]
        assert container["livenessProbe"]["grpc"] == {"port": 51515, "service": "liveness"}, container
        answer = deployed.kubectl(
            "exec",
            "-n",
            NAMESPACE,
            pod["metadata"]["name"],
            "--",
            "python",
            "-c",
            HEALTH_CHECK,
            "liveness",
            check=False,
        )
        assert answer.returncode == 0 and answer.stdout.strip() == "SERVING", (answer.stdout, answer.stderr)
        fresh = await dkube.get(PODS, pod["metadata"]["name"], NAMESPACE)
        assert fresh["status"]["containerStatuses"][0]["restartCount"] == 0, fresh["status"]


async def test_one_leader_per_operator(deployed, dkube):
    """The Lease names one replica's process, and that replica's running container is the one
    that says it became leader (a replica that loses its Lease exits, so its restarted container
    starts as a standby with a new identity)."""
    for deployment in deployments(deployed.minor):
        operator = deployment.removeprefix("dra-")

        async def one_leader():
            lease = await dkube.get_or_none(LEASES, f"dra-operators-{operator}", NAMESPACE)
            holder = lease and lease["spec"].get("holderIdentity")
            if not holder:
                return None
            replicas = [
                p["metadata"]["name"]
                for p in await operator_pods(dkube)
                if p["metadata"]["labels"]["app.kubernetes.io/name"] == deployment
            ]
            leading = [
                name
                for name in replicas
                if any(
                    "became leader" in line and holder in line for line in logs(deployed, NAMESPACE, name).splitlines()
                )
            ]
            return (holder, leading) if len(replicas) == 2 and len(leading) == 1 else None

        holder, [leader] = await wait_for(one_leader, timeout=90, interval=2, what=f"one {operator} leader")
        assert holder.startswith(leader), (holder, leader)


async def test_the_node_agents_publish_their_real_nodes_devices(deployed, dkube):
    async def published():
        slices = await dkube.list(RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER}")
        return sorted({s["spec"]["nodeName"] for s in slices}) == list(NODES)

    await wait_for(published, timeout=60, what="slices of both real nodes")


async def _namespace(kube: Kube, name: str) -> str:
    await kube.create(NAMESPACES, {"metadata": {"name": name}})
    await wait_for(lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", name), what=f"{name}/default ServiceAccount")
    return name


async def _running(kube: Kube, namespace: str, name: str, timeout: float = 120) -> dict:
    async def check():
        pod = await kube.get_or_none(PODS, name, namespace)
        return pod if pod and pod["status"].get("phase") == "Running" else None

    return await wait_for(
        check,
        timeout=timeout,
        what=f"Pod {namespace}/{name} Running",
        describe=lambda: describe_namespace(kube, namespace),
    )


async def _printed(lab: Lab, namespace: str, pod: str) -> dict[str, str]:
    """The DRA_DEVICE_ environment the example's container printed, through kubelet."""

    async def check():
        text = lab.kubectl("logs", "-n", namespace, pod, check=False).stdout
        return text if "DRA_DEVICE_" in text else None

    text = await wait_for(check, timeout=60, what=f"{pod} printed its devices")
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


# example folder -> the Pods it runs (binding-conditions needs a kubelet plugin for its fabric
# driver, which nothing here serves: it is left to the binding example of a later issue).
EXAMPLE_PODS = {
    "basic-template": ["basic"],
    "shared-claim": ["shared-a", "shared-b"],
    "cel-selector": None,
    "prioritized-list": None,
    "consumable-capacity": ["capacity-small", "capacity-large"],
    "taints-tolerations": ["tolerating"],
    "opaque-config": ["configured"],
    "numa-aligned": ["numa-aligned"],  # the NIC prepared as any simulated device
}
# What else the container must print: the merged class and claim configs of opaque-config.
EXAMPLE_PRINTS = {
    "opaque-config": {
        "GPU_PROFILE": "training",
        "GPU_OWNER": "platform-team",
        "_SHARING_STRATEGY": "TimeSlicing",
        "_TIMESLICE_INTERVAL": "Long",
    }
}


def _pods_of(example: str) -> list[str]:
    text = (EXAMPLES / example / "example.yaml").read_text()
    return re.findall(r"kind: Pod\nmetadata:\n  name: (\S+)", text)


@pytest.fixture(scope="module")
async def served(deployed: Lab, dkube: Kube, tmp_path_factory):
    """config/examples as a user of the lab's release applies them (served_examples.py)."""
    rules = await dkube.preferred_version(DEVICE_TAINT_RULES)
    assert rules is not None, "DeviceTaintRule is not served"
    root = tmp_path_factory.mktemp("examples")
    return lambda path: served_copy(path, root, deployed.minor, rules.group_version)


@pytest.mark.parametrize("example", sorted(EXAMPLE_PODS))
async def test_example_runs_on_a_real_node_with_its_devices(deployed, dkube, served, unique, example):
    namespace = await _namespace(dkube, f"ex-{example[:20]}-{unique}")
    try:
        applied = deployed.kubectl("apply", "-n", namespace, "-f", str(served(EXAMPLES / example)), check=False)
        assert applied.returncode == 0, applied.stderr
        for name in EXAMPLE_PODS[example] or _pods_of(example):
            pod = await _running(dkube, namespace, name)
            assert pod["spec"]["nodeName"] in NODES
            printed = await _printed(deployed, namespace, name)
            claims = {s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or []}
            claims |= {c["resourceClaimName"] for c in pod["spec"]["resourceClaims"] if c.get("resourceClaimName")}
            devices = set()
            for claim_name in claims:
                claim = await dkube.get(RESOURCE_CLAIMS, claim_name, namespace)
                devices |= {
                    r["device"]
                    for r in claim["status"]["allocation"]["devices"]["results"]
                    if r["pool"] == pod["spec"]["nodeName"]
                }
            assert devices and devices <= {v for k, v in printed.items() if re.fullmatch(r"DRA_DEVICE_\w+_\d+", k)}, (
                printed,
                devices,
            )
            for key, value in EXAMPLE_PRINTS.get(example, {}).items():
                assert [v for k, v in printed.items() if k == key or (key.startswith("_") and k.endswith(key))] == [
                    value
                ], (key, value, printed)
    finally:
        await dkube.delete(NAMESPACES, namespace)
        deployed.kubectl("delete", "devicetaintrules", "--all", check=False)


async def test_admin_access_example(deployed, dkube):
    applied = deployed.kubectl("apply", "-f", str(EXAMPLES / "admin-access"), check=False)
    assert applied.returncode == 0, applied.stderr
    try:
        await _running(dkube, "dra-example-admin", "gpu-monitor")
        printed = await _printed(deployed, "dra-example-admin", "gpu-monitor")
        assert any(k.endswith("_ADMIN_ACCESS") and v == "true" for k, v in printed.items()), printed
    finally:
        await dkube.delete(NAMESPACES, "dra-example-admin")


async def test_the_admission_policy_holds_for_the_deployed_agents_token(deployed, dkube, unique, tmp_path):
    """The node agent Pod's own token (projected, bound to the Pod and so to its node)."""
    [agent] = [
        p
        for p in await operator_pods(dkube)
        if p["metadata"]["name"].startswith("dra-nodeagent-") and p["spec"].get("nodeName") == "lab-real-0"
    ]
    token = deployed.kubectl(
        "exec",
        "-n",
        NAMESPACE,
        agent["metadata"]["name"],
        "--",
        "cat",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
    ).stdout.strip()
    async with Kube.with_token(deployed.server, token, str(deployed.pki.ca_cert)) as agent_kube:
        for node, driver, message in (
            ("lab-real-1", DRIVER, "may not write ResourceSlices of node lab-real-1"),
            ("lab-real-0", f"x{unique}.example.com", f"may not write ResourceSlices of driver x{unique}.example.com"),
        ):
            with pytest.raises(ApiError) as denied:
                await agent_kube.create(
                    RESOURCE_SLICES,
                    objects.resource_slice(f"intruder-{unique}-{node}", driver, node, [objects.device("gpu-0")]),
                )
            assert message in denied.value.message


async def test_a_replaced_node_agent_pod_registers_again_and_prepares(deployed, dkube, unique):
    [agent] = [
        p
        for p in await operator_pods(dkube)
        if p["metadata"]["name"].startswith("dra-nodeagent-") and p["spec"].get("nodeName") == "lab-real-0"
    ]
    await dkube.delete(PODS, agent["metadata"]["name"], NAMESPACE)

    async def replaced():
        pods = [
            p
            for p in await operator_pods(dkube)
            if p["metadata"]["name"].startswith("dra-nodeagent-")
            and p["spec"].get("nodeName") == "lab-real-0"
            and p["metadata"]["uid"] != agent["metadata"]["uid"]
        ]
        return pods and all(
            c["ready"] for p in pods for c in p["status"].get("containerStatuses") or [{"ready": False}]
        )

    await wait_for(replaced, timeout=120, what="the DaemonSet's new node agent Pod on lab-real-0 ready")
    namespace = await _namespace(dkube, f"re-{unique}")
    try:
        pod = objects.pod("after", {"gpu": {"resourceClaimTemplateName": "one"}})
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "lab-real-0"}
        # Deleted gracefully, as users delete: the Pod stays in the API until kubelet has stopped it
        # and unprepared its claim. (With 0 it vanishes at once, its claim is deallocated while the
        # container still runs, and the next test's Pod meets the device still prepared.)
        pod["spec"]["terminationGracePeriodSeconds"] = 1
        pod["spec"]["containers"] = [
            {
                "name": "main",
                "image": "busybox:1.37",
                "command": ["sh", "-c", "env | grep ^DRA_DEVICE_ ; sleep 3600"],
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ]
        await dkube.create(
            RESOURCE_CLAIM_TEMPLATES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "one"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}},
            },
            namespace,
        )
        await dkube.create(PODS, pod, namespace)
        await _running(dkube, namespace, "after")
        printed = await _printed(deployed, namespace, "after")
        assert any(re.fullmatch(r"DRA_DEVICE_GPU_\d+", k) and v.startswith("gpu-") for k, v in printed.items()), printed
    finally:
        await dkube.delete(NAMESPACES, namespace)
        # Gone only once kubelet has unprepared the claim (kubelet.go, SyncTerminatingPod): the
        # node is left with nothing prepared for the tests after this one.
        await wait_gone(dkube, NAMESPACES, namespace)


async def test_a_daemonset_rolling_update_while_pods_are_created(deployed, dkube, unique):
    """`kubectl rollout restart` of the node agent's DaemonSet (maxSurge 1, maxUnavailable 0) while
    Pods with claims keep coming on both nodes: each node runs the new agent beside the old one,
    kubelet moves to the newest registration, and the old one goes. Every Pod is prepared (it
    prints its device), kubelet reports no failed prepare, and afterwards each node's registry
    holds only the live agent's socket."""
    from operators.nodeagent.plugin import sockets

    before = {
        p["metadata"]["uid"]
        for p in await operator_pods(dkube)
        if p["metadata"]["labels"]["app.kubernetes.io/name"] == DAEMONSET
    }
    namespace = await _namespace(dkube, f"ru-{unique}")
    await dkube.create(
        RESOURCE_CLAIM_TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}},
        },
        namespace,
    )

    async def agents() -> list[dict]:
        return [p for p in await operator_pods(dkube) if p["metadata"]["labels"]["app.kubernetes.io/name"] == DAEMONSET]

    async def rolled_out() -> bool:
        pods = await agents()
        return (
            len(pods) == 2
            and not {p["metadata"]["uid"] for p in pods} & before
            and all(s.get("ready") for p in pods for s in p["status"].get("containerStatuses") or [{}])
        )

    created: list[str] = []
    followers = _LogFollowers(deployed)
    for pod in await agents():
        followers.follow(pod["metadata"]["name"])

    async def create(i: int) -> None:
        name = f"p{i}"
        pod = objects.pod(name, {"gpu": {"resourceClaimTemplateName": "one"}})
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": NODES[i % 2]}
        pod["spec"]["restartPolicy"] = "Never"  # done after printing: its device is free for the next
        pod["spec"]["containers"] = [
            {
                "name": "main",
                "image": "busybox:1.37",
                "command": ["sh", "-c", "env | grep ^DRA_DEVICE_"],
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ]
        await dkube.create(PODS, pod, namespace)
        created.append(name)

    try:
        restarted = deployed.kubectl("rollout", "restart", "-n", NAMESPACE, f"daemonset/{DAEMONSET}", check=False)
        assert restarted.returncode == 0, restarted.stderr
        i = 0
        while not await rolled_out():  # Pods keep coming for as long as the update lasts
            for pod in await agents():
                followers.follow(pod["metadata"]["name"])
            await create(i)
            i += 1
            await asyncio.sleep(2)  # pacing of the arrivals, not a wait for a result
            assert i < 150, "the rolling update did not finish: " + str(await agents())
        for _ in range(2):  # and right after it
            await create(i)
            i += 1
        assert len(created) >= 3, created

        async def all_done():
            pods = {p["metadata"]["name"]: p["status"].get("phase") for p in await dkube.list(PODS, namespace)}
            return pods if all(pods.get(n) in ("Succeeded", "Failed") for n in created) else None

        phases = await wait_for(
            all_done,
            timeout=300,
            interval=1,
            what="every Pod created during the update done",
            describe=lambda: describe_namespace(dkube, namespace),
        )
        assert set(phases.values()) == {"Succeeded"}, phases
        for name in created:
            printed = deployed.kubectl("logs", "-n", namespace, name, check=False).stdout
            assert re.search(r"^DRA_DEVICE_GPU_\d+=gpu-\d+$", printed, re.M), (name, printed)
        failed = [e for e in await dkube.list(EVENTS, namespace) if e.get("reason") == "FailedPrepareDynamicResources"]
        restarts = {
            p["metadata"]["name"]: [
                (s.get("restartCount"), s.get("lastState")) for s in p["status"].get("containerStatuses") or []
            ]
            for p in await agents()
        }
        if failed:
            # Printed, not put in the assertion: pytest cuts long assertion messages short, and
            # kubelet's side is the evidence of which agent it called.
            print("agent restarts:", restarts)
            for node, lines in _plugin_log(deployed).items():
                print(f"--- kubelet on {node}: DRA plugin lines")
                print("\n".join(lines))
            followers.print()
        assert not failed, [(e.get("lastTimestamp"), e.get("message")) for e in failed]

        live = await agents()
        for node in NODES:
            [agent] = [p for p in live if p["spec"].get("nodeName") == node]
            registry = deployed.real_node(node).plugins_registry
            ours = sorted(p.name for p in registry.iterdir() if sockets.is_ours(p.name, DRIVER, "registration"))
            if ours != [sockets.registration_name(str(registry), DRIVER, agent["metadata"]["uid"])]:
                print("agent restarts:", restarts)
                followers.print()
            assert ours == [sockets.registration_name(str(registry), DRIVER, agent["metadata"]["uid"])], (node, ours)
    finally:
        followers.stop()
        await dkube.delete(NAMESPACES, namespace)


class _LogFollowers:
    """``kubectl logs -f`` of every agent Pod seen during the update, into files: an old agent's
    log is gone with its Pod, and it is the evidence of why it stopped serving."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.dir = lab.files.logs / "rolling-update"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}

    def follow(self, pod: str) -> None:
        running = self.procs.get(pod)
        if running is not None and (running.poll() is None or running.returncode == 0):
            return  # following, or followed to the container's end
        # (Again where it failed: a container that has not started yet has no log to follow.)
        with open(self.dir / f"{pod}.log", "ab") as out:
            self.procs[pod] = subprocess.Popen(
                [str(self.lab.bin_dir / "kubectl"), f"--kubeconfig={self.lab.kubeconfig}", "logs", "-f"]
                + ["-n", NAMESPACE, pod],
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.terminate()
            proc.wait()

    def print(self) -> None:
        for pod in self.procs:
            lines = (self.dir / f"{pod}.log").read_text(errors="replace").splitlines()
            print(f"--- agent {pod}:", *[line[:400] for line in lines[-80:]], sep="\n")


def _plugin_log(lab: Lab) -> dict[str, list[str]]:
    """What each node's kubelet logged of DRA plugin (de)registrations and connections: the
    evidence when kubelet called an agent that was gone."""
    wanted = re.compile(
        r"Connection changed|socket path|RegisterPlugin|health stream|DRA driver"
        r"|(SyncLoop DELETE|SyncLoop \(probe\)|Probe failed|Killing container).*nodeagent"
    )
    found = {}
    for node in NODES:
        path = lab.files.logs / f"kubelet-{node}.log"
        lines = path.read_text(errors="replace").splitlines() if path.exists() else ["(no log)"]
        found[node] = [line[:300] for line in lines if wanted.search(line)][-120:]
    return found


async def test_the_readme_kind_walkthrough_prints_what_it_shows(deployed, dkube):
    commands, shown = kind_walkthrough()
    assert commands[-1] == "kubectl logs basic" and shown
    try:

        def run(command: str) -> subprocess.CompletedProcess:
            result = subprocess.run(
                [str(deployed.bin_dir / "kubectl"), f"--kubeconfig={deployed.kubeconfig}", *command.split()[1:]],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            assert result.returncode == 0, (command, result.stderr)
            return result

        for command in commands:  # as written, from the checkout
            result = run(command)
        # Ready means the container started, not that its shell has written yet: on a loaded
        # machine (CI, two workers) `kubectl logs` right after the wait once came back empty.
        deadline = time.monotonic() + 60
        while not result.stdout.strip() and time.monotonic() < deadline:
            time.sleep(1)
            result = run(commands[-1])
        # The variables are named after the device (gpu-0 in the README; whichever is free here).
        printed = [
            re.sub(r"GPU_\d+|=gpu-\d+$", lambda m: m.group(0).rstrip("0123456789") + "N", line)
            for line in result.stdout.splitlines()
        ]
        shown = [re.sub(r"GPU_\d+|=gpu-\d+$", lambda m: m.group(0).rstrip("0123456789") + "N", line) for line in shown]
        # The same variables; `env` lists them in the runtime's order, which on the 1.34 lab was
        # not the README's.
        assert sorted(line.split("=")[0] for line in printed) == sorted(line.split("=")[0] for line in shown), (
            printed,
            shown,
        )
        got, want = dict(p.split("=", 1) for p in printed), dict(s.split("=", 1) for s in shown)
        for key, value in want.items():
            if key.endswith("_RESOURCE_CLAIM"):
                assert re.fullmatch(r"[0-9a-f-]{36}", got[key]), (key, got[key])
            elif key.endswith("_CLAIM"):
                assert re.fullmatch(r"default/basic-gpu-[a-z0-9]{5}", got[key]), (key, got[key])
            else:
                assert got[key] == value, (key, got[key], value)
    finally:
        deployed.kubectl("delete", "-f", str(EXAMPLES / "basic-template"), "--wait=false", check=False)


async def test_the_operators_logs_show_no_denied_request(deployed, dkube):
    """RBAC: no request of ours was denied. An Event refused because an example's namespace was
    being deleted is a 403 too, but from NamespaceLifecycle admission, not RBAC, and expected when
    an eviction races the namespace's deletion; the recorder logs it at debug (this overlay's
    level), as client-go does at V(5)."""
    denied = re.compile(r"(?<![\w.-])403(?![\w-])|forbidden", re.I)  # not inside a UID
    terminating = re.compile(r"\[debug +\] could not post event .*because it is being terminated")
    for pod in await operator_pods(dkube):
        text = logs(deployed, NAMESPACE, pod["metadata"]["name"])
        found = [line for line in text.splitlines() if denied.search(line) and not terminating.search(line)]
        assert not found, pod["metadata"]["name"] + ":\n" + "\n".join(found)


async def test_no_operator_restarted_and_kopf_reached_the_api_server(deployed, dkube):
    """Last in the module, minutes after the deploy: no operator container restarted, and kopf's
    own connection reached the API server (the lab has no cluster DNS, as a booting node has none
    yet; kopf's default login named kubernetes.default.svc and stopped each process after a
    minute of failed attempts)."""
    restarted = {
        pod["metadata"]["name"]: status.get("restartCount")
        for pod in await operator_pods(dkube)
        for status in pod["status"].get("containerStatuses") or []
        if status.get("restartCount")
    }
    assert not restarted, restarted
    for pod in await operator_pods(dkube):
        text = logs(deployed, NAMESPACE, pod["metadata"]["name"])
        failed = [line for line in text.splitlines() if "kubernetes.default.svc" in line]
        assert not failed, pod["metadata"]["name"] + ":\n" + "\n".join(failed[:5])
