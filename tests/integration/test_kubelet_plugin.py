"""The node agent as kubelet's DRA plugin: a fake kubelet registers it over its Unix sockets and
prepares and unprepares claims the real scheduler allocated from the agent's own slices."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import tempfile
from pathlib import Path

import grpc
import jsonschema
import pytest
import yaml

from operators.core.api.kube import MERGE_PATCH
from operators.core.api.resources import DEVICE_CLASSES, EVENTS, NAMESPACES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from operators.nodeagent.agent import NodeAgent
from operators.nodeagent.backends.nvml import NvmlBackend
from operators.nodeagent.health import HealthTracker
from operators.nodeagent.plugin.server import KubeletPlugin

from ..nvmlmodel import eight_gpu_machine
from . import objects
from .fake_kubelet import FakeKubelet
from .operator_process import OperatorProcess
from .waiting import wait_for

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "schemas" / "cdi-spec.json").read_text())


class Node:
    """A kwok node with a simulated node agent serving as kubelet plugin, its DeviceClass, and a
    fake kubelet."""

    def __init__(self, lab, kube, namespace, unique, tmp_path, suffix="a", inventory=None, driver=None):
        self.lab, self.kube, self.namespace = lab, kube, namespace
        self.name = f"kp-{unique}-{suffix}"
        self.driver = driver or f"kp-{unique}.lab.dra-operators.dev"
        self.root = Path(tempfile.mkdtemp(prefix="kp-"))
        self.registry, self.plugins, self.cdi = self.root / "registry", self.root / "plugins", self.root / "cdi"
        self.inventory = tmp_path / f"inventory-{suffix}.yaml"
        self.inventory.write_text(yaml.safe_dump(inventory or {"gpus": [{"model": "M", "memory": "16Gi", "count": 4}]}))
        self.agent = OperatorProcess(
            ["nodeagent"],
            lab.kubeconfig,
            tmp_path,
            env={
                "NODE_NAME": self.name,
                "DRA_NODEAGENT_BACKEND": "simulated",
                "DRA_NODEAGENT_INVENTORY": str(self.inventory),
                "DRA_NODEAGENT_DRIVER": self.driver,
                "DRA_NODEAGENT_SYNC_DELAY": "1",
                "DRA_NODEAGENT_REGISTRY_DIR": str(self.registry),
                "DRA_NODEAGENT_PLUGINS_DIR": str(self.plugins),
                "DRA_NODEAGENT_CDI_ROOT": str(self.cdi),
            },
        )
        self.agent.log = tmp_path / f"agent-{suffix}.log"
        self.kubelet = FakeKubelet(self.registry)

    async def start(self, device_class: bool = True) -> Node:
        self.lab.create_node(self.name)
        self.lab.wait_node_schedulable(self.name)
        self.agent.start()
        if device_class:
            await self.kube.create(DEVICE_CLASSES, objects.device_class(self.driver, self.driver))
        await wait_for(
            lambda: self.kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={self.name}"),
            what="slices published",
        )
        await self.kubelet.register()
        return self

    async def stop(self) -> None:
        await self.kubelet.close()
        self.agent.stop()
        for call in (lambda: self.lab.api("DELETE", f"/api/v1/nodes/{self.name}"),):
            try:
                call()
            except OSError:
                pass

    async def allocated_claim(
        self, name: str, count: int = 1, admin: bool = False, pod: str | None = None, claim_class: str | None = None
    ) -> dict:
        """A claim the real scheduler allocated on this node, through a Pod using it."""
        if await self.kube.get_or_none(RESOURCE_CLAIMS, name, self.namespace) is None:
            body = objects.resource_claim(name, claim_class or self.driver)
            request = body["spec"]["devices"]["requests"][0]["exactly"]
            request["count"] = count
            if admin:
                request["adminAccess"] = True
            await self.kube.create(RESOURCE_CLAIMS, body, self.namespace)
        pod_body = objects.pod(pod or f"{name}-user", {"gpu": {"resourceClaimName": name}})
        pod_body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": self.name}
        await self.kube.create(PODS, pod_body, self.namespace)

        async def allocated():
            claim = await self.kube.get(RESOURCE_CLAIMS, name, self.namespace)
            reserved = {r["name"] for r in claim.get("status", {}).get("reservedFor") or []}
            return claim if claim["status"].get("allocation") and pod_body["metadata"]["name"] in reserved else None

        return await wait_for(allocated, what=f"claim {name} allocated and reserved")

    def spec(self, uid: str) -> dict:
        return json.loads((self.cdi / f"k8s.{self.driver}-claim_{uid}.json").read_text())

    def checkpoint(self) -> dict:
        return json.loads((self.plugins / self.driver / "checkpoint.json").read_text())


@pytest.fixture
async def node(lab, kube, namespace, unique, tmp_path):
    started = await Node(lab, kube, namespace, unique, tmp_path).start()
    yield started
    await started.stop()
    await kube.delete(DEVICE_CLASSES, started.driver)


def env_of(spec: dict) -> dict[str, str]:
    return dict(e.split("=", 1) for d in spec["devices"] for e in d["containerEdits"].get("env", []))


async def test_registration_prepare_idempotent_unprepare(node, kube):
    info = node.kubelet.info
    assert (info.type, info.name) == ("DRAPlugin", node.driver)
    assert info.endpoint == str(node.plugins / node.driver / "dra.sock") and Path(info.endpoint).is_socket()
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]

    claim = await node.allocated_claim("one")
    uid = claim["metadata"]["uid"]
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    response = await node.kubelet.prepare([claim])
    entry = response.claims[uid]
    assert entry.error == ""
    [prepared] = entry.devices
    assert (prepared.pool_name, prepared.device_name, list(prepared.request_names)) == (node.name, device, ["gpu"])
    assert list(prepared.cdi_device_ids) == [f"k8s.{node.driver}/claim={uid}-{device}"]

    spec = node.spec(uid)
    jsonschema.validate(spec, SCHEMA)
    assert spec["kind"] == f"k8s.{node.driver}/claim" and spec["cdiVersion"] == "0.6.0"
    key = device.upper().replace("-", "_")
    env = env_of(spec)
    assert env[f"DRA_DEVICE_{key}"] == device and env[f"DRA_DEVICE_{key}_RESOURCE_CLAIM"] == uid
    assert env[f"DRA_DEVICE_{key}_CLAIM"] == f"{node.namespace}/one"
    assert f"KUBERNETES_NODE_NAME={node.name}" in spec["containerEdits"]["env"]
    assert [c["uid"] for c in node.checkpoint()["preparedClaims"]] == [uid]

    again = await node.kubelet.prepare([claim])  # idempotent: same answer, nothing added
    assert again.claims[uid] == entry and len(node.checkpoint()["preparedClaims"]) == 1
    beta = await node.kubelet.prepare([claim], version="v1beta1")
    assert list(beta.claims[uid].devices[0].cdi_device_ids) == list(prepared.cdi_device_ids)
    assert (await node.kubelet.prepare([])).claims == {}

    done = await node.kubelet.unprepare([claim, {"namespace": "x", "name": "never", "uid": "unknown-uid"}])
    assert set(done.claims) == {uid, "unknown-uid"} and all(e.error == "" for e in done.claims.values())
    assert not (node.cdi / f"k8s.{node.driver}-claim_{uid}.json").exists()
    assert "preparedClaims" not in node.checkpoint()
    assert (await node.kubelet.unprepare([claim])).claims[uid].error == ""  # again: fine
    metrics = node.agent.metrics()
    assert f'dra_nodeagent_node_prepare_claims_total{{driver="{node.driver}",outcome="success"}}' in metrics


async def test_multi_device_and_shared_claims(node, kube):
    multi = await node.allocated_claim("multi", count=2)
    shared = await node.allocated_claim("shared", pod="first")
    await node.allocated_claim("shared", pod="second")  # one claim, two Pods on the node
    response = await node.kubelet.prepare([multi, shared])
    assert len(response.claims[multi["metadata"]["uid"]].devices) == 2
    first = response.claims[shared["metadata"]["uid"]]
    second = (await node.kubelet.prepare([shared])).claims[shared["metadata"]["uid"]]
    assert first == second and first.error == ""
    names = {d.device_name for d in response.claims[multi["metadata"]["uid"]].devices} | {first.devices[0].device_name}
    assert len(names) == 3
    assert len(node.spec(multi["metadata"]["uid"])["devices"]) == 2


async def test_admin_access_shares_a_device_already_prepared(node, kube):
    exclusive = await node.allocated_claim("exclusive")
    await node.kubelet.prepare([exclusive])
    await kube.patch(
        NAMESPACES,
        node.namespace,
        {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}},
        content_type=MERGE_PATCH,
    )
    admin = await node.allocated_claim("monitor", count=1, admin=True)
    [result] = admin["status"]["allocation"]["devices"]["results"]
    assert result.get("adminAccess") is True
    entry = (await node.kubelet.prepare([admin])).claims[admin["metadata"]["uid"]]
    assert entry.error == ""
    key = result["device"].upper().replace("-", "_")
    assert env_of(node.spec(admin["metadata"]["uid"]))[f"DRA_DEVICE_{key}_ADMIN_ACCESS"] == "true"


async def test_errors_are_per_claim(lab, kube, node, namespace, unique, tmp_path, cluster_objects):
    good = await node.allocated_claim("good")
    # The same driver on another node: a claim allocated there is not ours to prepare.
    other_node = await Node(lab, kube, namespace, unique, tmp_path, suffix="b", driver=node.driver).start(
        device_class=False
    )
    try:
        elsewhere = await other_node.allocated_claim("elsewhere")
        # Another driver's device on this node.
        other_driver = f"other-{unique}.lab.dra-operators.dev"
        await cluster_objects.create(DEVICE_CLASSES, objects.device_class(other_driver, other_driver))
        await cluster_objects.create(
            RESOURCE_SLICES,
            objects.resource_slice(f"other-{unique}", other_driver, node.name, [objects.device("gpu-0")]),
        )
        foreign = await node.allocated_claim("foreign", claim_class=other_driver)
        replaced = dict(good["metadata"], uid="00000000-0000-0000-0000-000000000000")
        missing = {"namespace": namespace, "name": "missing", "uid": "11111111-1111-1111-1111-111111111111"}
        response = await node.kubelet.prepare([good, elsewhere, foreign, {"metadata": replaced}, missing])
        errors = {uid: entry.error for uid, entry in response.claims.items()}
        assert errors[good["metadata"]["uid"]] == ""
        assert (
            f"allocated on node {other_node.name}, not on this node {node.name}" in errors[elsewhere["metadata"]["uid"]]
        )
        assert f"has no device of driver {node.driver}" in errors[foreign["metadata"]["uid"]]
        assert "got replaced" in errors["00000000-0000-0000-0000-000000000000"]
        assert "does not exist" in errors[missing["uid"]]
        assert [c["uid"] for c in node.checkpoint()["preparedClaims"]] == [good["metadata"]["uid"]]
    finally:
        await other_node.stop()


async def test_agent_killed_between_prepare_and_unprepare_and_corrupt_checkpoint(node, kube):
    claim = await node.allocated_claim("survivor")
    uid = claim["metadata"]["uid"]
    before = (await node.kubelet.prepare([claim])).claims[uid]
    node.agent.kill()
    node.agent.start()
    kubelet = FakeKubelet(node.registry)
    await kubelet.register()
    assert (await kubelet.prepare([claim])).claims[uid] == before  # no second preparation
    assert len(node.checkpoint()["preparedClaims"]) == 1

    node.agent.kill()
    (node.plugins / node.driver / "checkpoint.json").write_text("{ this is not json")
    node.agent.start()
    await kubelet.close()
    kubelet = FakeKubelet(node.registry)
    await kubelet.register()
    # Rebuilt from the CDI spec: the claim is still known as prepared.
    assert [c["uid"] for c in node.checkpoint()["preparedClaims"]] == [uid]
    events = [
        e
        for e in await kube.list(EVENTS, "default")
        if e["involvedObject"].get("name") == node.name and e["reason"] == "CheckpointCorrupt"
    ]
    assert events and "rebuilt 1 prepared claim(s)" in events[0]["message"]
    assert (await kubelet.unprepare([claim])).claims[uid].error == ""
    assert "preparedClaims" not in node.checkpoint()
    await kubelet.close()


async def test_consumable_capacity_shares_are_prepared_per_share(lab, kube, namespace, unique, tmp_path):
    inventory = {
        "gpus": [
            {
                "model": "S",
                "memory": "16Gi",
                "count": 1,
                "allowMultipleAllocations": True,
                "memoryPolicy": {"default": "1Gi", "min": "1Gi", "step": "1Gi"},
            }
        ]
    }
    node = await Node(lab, kube, namespace, unique, tmp_path, suffix="s", inventory=inventory).start()
    try:
        claims = []
        for name in ("share-a", "share-b"):
            body = objects.resource_claim(name, node.driver)
            body["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "4Gi"}}
            await kube.create(RESOURCE_CLAIMS, body, namespace)
            claims.append(await node.allocated_claim(name))
        results = [c["status"]["allocation"]["devices"]["results"][0] for c in claims]
        assert results[0]["device"] == results[1]["device"] == "gpu-0"
        assert results[0]["shareID"] != results[1]["shareID"]
        response = await node.kubelet.prepare(claims)
        for claim, result in zip(claims, results, strict=True):
            entry = response.claims[claim["metadata"]["uid"]]
            assert entry.error == "" and entry.devices[0].share_id == result["shareID"]
            assert entry.devices[0].cdi_device_ids[0].endswith(f"-gpu-0-{result['shareID']}")
    finally:
        await node.stop()
        await kube.delete(DEVICE_CLASSES, node.driver)


async def test_fake_nvml_cdi_names_gpu_and_mig_device_nodes(lab, kube, namespace, unique, tmp_path, cluster_objects):
    name, driver = f"kp-{unique}-nv", f"nv-{unique}.lab.dra-operators.dev"
    lab.create_node(name)
    lab.wait_node_schedulable(name)
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    for control in ("nvidiactl", "nvidia-uvm"):
        (dev / control).write_text("")
    for parts, minor in ((("gi9",), 84), (("gi9", "ci0"), 85)):
        access = proc.joinpath("driver", "nvidia", "capabilities", "gpu7", "mig", *parts, "access")
        access.parent.mkdir(parents=True, exist_ok=True)
        access.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\n")
    model = eight_gpu_machine()
    agent = NodeAgent(
        kube,
        NvmlBackend(driver, nvml=model, dev_root=str(dev), proc_root=str(proc)),
        node_name=name,
        driver=driver,
        sync_delay=1,
        health=HealthTracker(driver),
    )
    root = Path(tempfile.mkdtemp(prefix="nv-"))
    # A stand-in for the NVIDIA Container Toolkit's generated spec (devices by UUID).
    (root / "tk").mkdir()
    (root / "tk" / "nvidia.yaml").write_text(
        json.dumps(
            {
                "cdiVersion": "0.5.0",
                "kind": "nvidia.com/gpu",
                "devices": [
                    {"name": u, "containerEdits": {}}
                    for g in model.gpus
                    for u in [g.uuid, *(m.uuid for m in g.instances)]
                ],
            }
        )
    )
    plugin = KubeletPlugin(
        agent,
        kube,
        registry_dir=str(root / "r"),
        plugins_dir=str(root / "p"),
        cdi_root=str(root / "c"),
        toolkit_cdi_dirs=(str(root / "tk"),),
    )
    await agent.start()
    await plugin.start()
    kubelet = FakeKubelet(root / "r")
    try:
        await kubelet.register()
        await cluster_objects.create(
            DEVICE_CLASSES,
            objects.device_class(
                f"gpu-{unique}", driver, extra_selector=f"device.attributes['{driver}'].type == 'gpu'"
            ),
        )
        await cluster_objects.create(
            DEVICE_CLASSES,
            objects.device_class(
                f"mig-{unique}",
                driver,
                extra_selector=f"device.attributes['{driver}'].type == 'mig' && "
                f"device.attributes['{driver}'].profile == '1g.10gb'",
            ),
        )
        helper = Node.__new__(Node)
        helper.kube, helper.namespace, helper.name, helper.driver = kube, namespace, name, driver
        gpu = await Node.allocated_claim(helper, "gpu", claim_class=f"gpu-{unique}")
        mig = await Node.allocated_claim(helper, "mig", claim_class=f"mig-{unique}")
        response = await kubelet.prepare([gpu, mig])
        assert all(e.error == "" for e in response.claims.values()), response
        gpu_device = gpu["status"]["allocation"]["devices"]["results"][0]["device"]
        gpu_spec = json.loads((root / "c" / f"k8s.{driver}-claim_{gpu['metadata']['uid']}.json").read_text())
        mig_spec = json.loads((root / "c" / f"k8s.{driver}-claim_{mig['metadata']['uid']}.json").read_text())
        for spec in (gpu_spec, mig_spec):
            jsonschema.validate(spec, SCHEMA)
            assert spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}, {"path": "/dev/nvidia-uvm"}]
        [gpu_edits] = [d["containerEdits"] for d in gpu_spec["devices"]]
        minor = int(gpu_device.removeprefix("gpu-"))
        assert gpu_edits["deviceNodes"] == [{"path": f"/dev/nvidia{minor}", "type": "c", "major": 195, "minor": minor}]
        assert gpu_spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={model.gpu(minor).uuid}"]
        [mig_edits] = [d["containerEdits"] for d in mig_spec["devices"]]
        assert mig_edits["deviceNodes"] == [
            {"path": "/dev/nvidia7", "type": "c", "major": 195, "minor": 7},
            {"path": "/dev/nvidia-caps/nvidia-cap84"},
            {"path": "/dev/nvidia-caps/nvidia-cap85"},
        ]
        assert mig_spec["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=MIG-70000000-0000-4000-8000-000000000009"]
        ids = [list(d.cdi_device_ids) for e in response.claims.values() for d in e.devices]
        assert sorted(i[0] for i in ids) == sorted(
            [f"nvidia.com/gpu={model.gpu(minor).uuid}", "nvidia.com/gpu=MIG-70000000-0000-4000-8000-000000000009"]
        )
    finally:
        await kubelet.close()
        await plugin.stop()
        await agent.stop()
        lab.api("DELETE", f"/api/v1/nodes/{name}")


async def test_liveness_fails_when_the_plugin_stops_answering(lab, kube, namespace, unique, tmp_path):
    """The agent calls its own sockets as kubelet does; with its DRA socket gone (removed under the
    server: kubelet can no longer reach it, and nothing in the process notices otherwise) both
    liveness answers turn: kopf's /healthz 500 and the grpc.health.v1 service NOT_SERVING."""
    import urllib.error
    import urllib.request

    from grpclib.client import Channel
    from grpclib.health.v1 import health_grpc, health_pb2

    from operators.lab.cluster import free_ports

    [port] = free_ports(1)
    node = Node(lab, kube, namespace, unique, tmp_path)
    node.agent.extra_env.update({"DRA_NODEAGENT_GRPC_HEALTH_PORT": str(port), "DRA_NODEAGENT_SELF_CHECK_PERIOD": "0.5"})
    await node.start()
    try:

        async def status(service: str = "liveness") -> str:
            channel = Channel("127.0.0.1", port)
            try:
                answer = await health_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=service), timeout=5
                )
            finally:
                channel.close()
            return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)

        def healthz() -> tuple[int, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{node.agent.liveness_port}/healthz", timeout=5) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        assert await status() == "SERVING" and await status("") == "SERVING"
        assert healthz()[0] == 200
        dra_socket = Path(node.kubelet.info.endpoint)
        dra_socket.unlink()

        async def not_serving():
            return await status() == "NOT_SERVING"

        await wait_for(not_serving, what="gRPC health liveness NOT_SERVING")

        # kopf answers /healthz from probe results it keeps for a while: wait for the next one.
        async def failing():
            answer = healthz()
            return answer if answer[0] != 200 else None

        code, body = await wait_for(failing, what="/healthz failing")
        assert code == 500, body
        failures = [line for line in node.agent.log.read_text().splitlines() if "self-check failed" in line]
        assert failures and str(dra_socket) in failures[-1], node.agent.tail()
    finally:
        await node.stop()
        await kube.delete(DEVICE_CLASSES, node.driver)


# -- prepared state kept level-triggered, and the serialization lock ---------------------------------


async def _now(value):
    return value


def spec_path(node: Node, uid: str) -> Path:
    return node.cdi / f"k8s.{node.driver}-claim_{uid}.json"


async def test_a_lost_spec_is_written_again_and_an_orphan_undone_at_start(node, kube):
    """kubelet prepares a claim once per sandbox: a spec removed under a running Pod is written
    again by the agent (checkpoint = truth), an Event on the claim says so; a spec the checkpoint
    does not hold (a prepare that died before saving it) is removed when the agent starts."""
    claim = await node.allocated_claim("kept")
    uid = claim["metadata"]["uid"]
    assert (await node.kubelet.prepare([claim])).claims[uid].error == ""
    path = spec_path(node, uid)
    written = path.read_text()
    path.unlink()  # a cleanup tool, while the agent runs
    await wait_for(lambda: _now(path.is_file() and path.read_text() == written), what="the spec written again")

    async def restored():
        return [
            e
            for e in await kube.list(EVENTS, node.namespace)
            if e["reason"] == "CDISpecRestored" and e["involvedObject"].get("uid") == uid
        ]

    [event, *_] = await wait_for(restored, what="a CDISpecRestored Event on the claim")
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "ResourceClaim"
    assert "missing" in event["message"] and str(path) in event["message"]

    node.agent.kill()
    orphan = "22222222-2222-2222-2222-222222222222"
    spec_path(node, orphan).write_text(written.replace(uid, orphan))
    path.unlink()
    node.agent.start()
    kubelet = FakeKubelet(node.registry)
    try:
        await kubelet.register()
        assert not spec_path(node, orphan).exists() and path.read_text() == written
        assert [c["uid"] for c in node.checkpoint()["preparedClaims"]] == [uid]
        assert (await kubelet.unprepare([claim])).claims[uid].error == ""
        assert not path.exists()
    finally:
        await kubelet.close()


def hold_lock(node: Node) -> int:
    """The serialization lock, taken as another instance of the agent would (a rolling update)."""
    fd = os.open(node.plugins / node.driver / "serialize.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


async def test_a_prepare_cancelled_while_waiting_for_the_lock_keeps_nothing(node, kube):
    """kubelet's deadline ends a prepare waiting for the lock another instance holds; once that
    instance is done, the next prepare goes through (the cancelled one held the lock for good)."""
    claim = await node.allocated_claim("waits")
    uid = claim["metadata"]["uid"]
    held = hold_lock(node)
    try:
        with pytest.raises(grpc.aio.AioRpcError) as cancelled:
            await node.kubelet.prepare([claim], timeout=3)
        assert cancelled.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        os.close(held)
    assert (await node.kubelet.prepare([claim])).claims[uid].error == ""
    assert (await node.kubelet.unprepare([claim])).claims[uid].error == ""


async def test_a_claim_reallocated_while_a_prepare_waits_is_prepared_as_it_is_now(node, kube):
    claim = await node.allocated_claim("moved")
    uid, status = claim["metadata"]["uid"], claim["status"]
    [result] = status["allocation"]["devices"]["results"]
    waiting_lines = node.agent.log.read_text().count("waiting for the lock another instance holds")
    held = hold_lock(node)
    try:
        call = asyncio.create_task(node.kubelet.prepare([claim]))
        await wait_for(
            lambda: _now(
                node.agent.log.read_text().count("waiting for the lock another instance holds") > waiting_lines
            ),
            what="the prepare waiting for the lock",
        )
        # Deallocated and allocated anew, to another device, while the prepare waits.
        await kube.patch(
            RESOURCE_CLAIMS,
            "moved",
            {"status": {"reservedFor": None, "allocation": None}},
            node.namespace,
            content_type=MERGE_PATCH,
            subresource="status",
        )
        other = next(f"gpu-{i}" for i in range(4) if f"gpu-{i}" != result["device"])
        allocation = json.loads(json.dumps(status["allocation"]))
        allocation["devices"]["results"][0]["device"] = other
        await kube.patch(
            RESOURCE_CLAIMS,
            "moved",
            {"status": {"allocation": allocation, "reservedFor": status["reservedFor"]}},
            node.namespace,
            content_type=MERGE_PATCH,
            subresource="status",
        )
    finally:
        os.close(held)
    entry = (await call).claims[uid]
    assert entry.error == "" and [d.device_name for d in entry.devices] == [other]
    assert json.loads(spec_path(node, uid).read_text())["devices"][0]["name"] == f"{uid}-{other}"


def _memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM")}


async def test_oversized_messages_and_a_thousand_watch_streams_leave_the_agent_serving(
    lab, kube, namespace, unique, tmp_path
):
    """What any Pod could send to the agent's gRPC health port (and root on the node to its
    sockets): a request declaring 2 GiB is refused with RESOURCE_EXHAUSTED from its length prefix
    on every server (grpc-go's 4 MiB limit), 1,000 Watch streams get at most MAX_WATCHES places,
    the agent's memory stays far under its 384Mi limit, and kubelet's calls go on succeeding."""
    from grpclib.health.v1 import health_pb2

    from operators.lab.cluster import free_ports
    from operators.nodeagent.plugin import grpc_limits
    from operators.nodeagent.plugin.kubeletapi import dra_health_v1_pb2

    from ..raw_grpc import RawGrpc, frame

    [port] = free_ports(1)
    node = Node(lab, kube, namespace, unique, tmp_path)
    node.agent.extra_env["DRA_NODEAGENT_GRPC_HEALTH_PORT"] = str(port)
    await node.start()
    clients: list[RawGrpc] = []
    try:
        claim = await node.allocated_claim("flooded")
        pid = node.agent.proc.pid
        registration = str(next(node.registry.glob("*-reg.sock")))
        dra = node.kubelet.info.endpoint
        before = _memory_mib(pid)
        servers = {
            "health": ({"port": port}, "/grpc.health.v1.Health/Check"),
            "registration": ({"path": registration}, "/pluginregistration.Registration/GetInfo"),
            "dra": ({"path": dra}, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"),
        }
        sent = {}
        for name, (address, method) in servers.items():
            client = await RawGrpc.connect(**address)
            clients.append(client)
            stream = client.start(method, frame(b"", declared=2**31), end=False)
            # A bounded part of the 2 GiB: enough to show a server that reads on (64 MiB each).
            sent[name] = await client.send(stream, 64 * 1024 * 1024)
            await client.calls[stream].done.wait()
            call = client.calls[stream]
            assert (call.status, call.message) == (
                "8",
                f"grpc: received message larger than max (2147483648 vs. {grpc_limits.MAX_RECEIVE_MESSAGE})",
            ), (name, vars(call))
        after_prefix = _memory_mib(pid)
        assert all(s <= 2 * grpc_limits.WINDOW for s in sent.values()), sent

        async def flood(
            address: dict, method: str, request: bytes, over: list[RawGrpc] | None = None, streams: int = 50
        ):
            """1,000 calls of ``method``: 50 on each of 20 new connections (or of ``over``)."""
            opened = over or [await RawGrpc.connect(**address) for _ in range(20)]
            clients.extend(c for c in opened if c not in clients)
            calls = [(c, c.start(method, request)) for c in opened for _ in range(streams)]

            async def answered():
                return all(c.calls[s].answered for c, s in calls) or None

            await wait_for(answered, what=f"{len(calls)} {method} streams answered or refused")
            watching = [c.calls[s] for c, s in calls if c.calls[s].data and not c.calls[s].done.is_set()]
            refused = [c.calls[s] for c, s in calls if c.calls[s].status == "8"]
            return watching, refused, opened

        watch = frame(health_pb2.HealthCheckRequest(service="liveness").SerializeToString())
        watching, refused, connections = await flood({"port": port}, "/grpc.health.v1.Health/Watch", watch)
        assert (len(watching), len(refused)) == (grpc_limits.MAX_WATCHES, 1000 - grpc_limits.MAX_WATCHES)
        # Bounded, not merely smaller: 1,000 more on the same connections (the first 10 still
        # open) add nothing lasting (without the cap each open stream kept about 15 KiB).
        first = _memory_mib(pid)
        watching, refused, _ = await flood({"port": port}, "/grpc.health.v1.Health/Watch", watch, over=connections)
        assert (len(watching), len(refused)) == (0, 1000)
        assert _memory_mib(pid)["VmRSS"] - first["VmRSS"] < 4, (first, _memory_mib(pid))
        dra_watching, dra_refused, _ = await flood(
            {"path": dra},
            "/v1.DRAResourceHealth/NodeWatchResources",
            frame(dra_health_v1_pb2.NodeWatchResourcesRequest().SerializeToString()),
        )
        assert (len(dra_watching), len(dra_refused)) == (grpc_limits.MAX_WATCHES, 1000 - grpc_limits.MAX_WATCHES)
        flooded = _memory_mib(pid)

        # kubelet is served while the 3,000 streams' connections stay open.
        prepared = await node.kubelet.prepare([claim])
        assert not prepared.claims[claim["metadata"]["uid"]].error and prepared.claims[claim["metadata"]["uid"]].devices
        assert (await node.kubelet.register()).endpoint == dra
        assert node.agent.proc.poll() is None and node.agent.live()
        print(
            f"agent memory (MiB): before {before}, after three 2 GiB prefixes {after_prefix}, "
            f"after 3 x 1,000 watch streams {flooded}"
        )
        assert flooded["VmHWM"] - before["VmRSS"] < 48 and flooded["VmHWM"] < 192, (before, after_prefix, flooded)
    finally:
        for client in clients:
            await client.close()
        await node.stop()
        await kube.delete(DEVICE_CLASSES, node.driver)
