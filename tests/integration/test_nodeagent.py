"""The node agent on the lab: what it publishes (golden files), the real scheduler using it,
300 devices and an inventory change, self-healing slices, restart, health taints and recovery,
and bad input."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from operators.core.api.kube import MERGE_PATCH
from operators.core.api.resources import DEVICE_CLASSES, EVENTS, NODES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from operators.core.framework.metrics import samples
from operators.nodeagent.agent import NodeAgent
from operators.nodeagent.backends.nvml import NvmlBackend
from operators.nodeagent.backends.simulated import HEALTH_ANNOTATION
from operators.nodeagent.health import HealthTracker

from ..nvmlmodel import dgx_a100_mixed_mig, eight_gpu_machine, h100_box
from . import objects
from .operator_process import OperatorProcess
from .waiting import wait_for

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "nodeagent"


@pytest.fixture
def node(lab, unique):
    name = f"na-{unique}"
    lab.create_node(name)
    lab.wait_node_schedulable(name)
    yield name
    try:
        lab.api("DELETE", f"/api/v1/nodes/{name}")
    except OSError:
        pass


@pytest.fixture
def driver(unique):
    return f"na-{unique}.lab.dra-operators.dev"


def kubelet_dirs() -> dict[str, str]:
    """Short directories for the plugin's sockets (a socket path has at most 107 characters)."""
    root = Path(tempfile.mkdtemp(prefix="na-"))
    return {
        "DRA_NODEAGENT_REGISTRY_DIR": str(root / "registry"),
        "DRA_NODEAGENT_PLUGINS_DIR": str(root / "plugins"),
        "DRA_NODEAGENT_CDI_ROOT": str(root / "cdi"),
    }


@pytest.fixture
def agents(lab, tmp_path):
    started: list[OperatorProcess] = []

    def start(node: str, driver: str, inventory: Path, **env: str) -> OperatorProcess:
        agent = OperatorProcess(
            ["nodeagent"],
            lab.kubeconfig,
            tmp_path,
            env={
                **kubelet_dirs(),
                "NODE_NAME": node,
                "DRA_NODEAGENT_BACKEND": "simulated",
                "DRA_NODEAGENT_INVENTORY": str(inventory),
                "DRA_NODEAGENT_DRIVER": driver,
                "DRA_NODEAGENT_SYNC_DELAY": "1",
                "DRA_NODEAGENT_HEALTH_QUIET_PERIOD": "3",
                **env,
            },
        )
        agent.log = tmp_path / f"nodeagent-{node}.log"
        agent.start()
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()


def write_inventory(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document))
    return path


async def pool_slices(kube, driver: str, node: str) -> list[dict]:
    return sorted(
        await kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver},spec.nodeName={node}"),
        key=lambda s: s["metadata"]["name"],
    )


class _Found(list):
    """A match, even when it is the empty pool."""

    def __bool__(self) -> bool:
        return True


async def wait_pool(kube, driver: str, node: str, predicate, what: str, timeout: float = 30) -> list[dict]:
    async def check():
        slices = await pool_slices(kube, driver, node)
        return _Found(slices) if predicate(slices) else None

    return await wait_for(check, timeout=timeout, what=what)


def complete(devices: int | None = None, generation: int | None = None):
    """A predicate: the pool is complete (all slices of the newest generation present)."""

    def check(slices: list[dict]) -> bool:
        if not slices:
            return False
        newest = max(s["spec"]["pool"]["generation"] for s in slices)
        current = [s for s in slices if s["spec"]["pool"]["generation"] == newest]
        if len(current) != current[0]["spec"]["pool"]["resourceSliceCount"] or len(current) != len(slices):
            return False
        if generation is not None and newest != generation:
            return False
        return devices is None or sum(len(s["spec"].get("devices") or []) for s in current) == devices

    return check


def normalise(slices: list[dict], node: str, driver: str, node_uid: str) -> list[dict]:
    out = []
    for s in slices:
        meta = s["metadata"]
        out.append(
            {
                "metadata": {"generateName": meta["generateName"], "ownerReferences": meta["ownerReferences"]},
                "spec": s["spec"],
            }
        )
    text = json.dumps(out, sort_keys=True).replace(node_uid, "<node-uid>")
    return json.loads(
        text.replace(f'"{driver}"', '"<driver>"')
        .replace(f"-{driver}-", "-<driver>-")
        .replace(f'"{node}"', '"<node>"')
        .replace(f"-{node}-", "-<node>-")
    )


def assert_golden(name: str, actual: list[dict]) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(yaml.safe_dump(actual, sort_keys=True))
    expected = yaml.safe_load(path.read_text())
    assert actual == expected, f"published slices differ from {path} (UPDATE_GOLDEN=1 rewrites it)"


@pytest.fixture
def golden_node(lab):
    """A fixed name: simulated device UUIDs derive from node and driver names."""
    name = "golden-node"
    lab.create_node(name)
    lab.wait_node_schedulable(name)
    yield name
    lab.api("DELETE", f"/api/v1/nodes/{name}")


async def test_golden_simulated_inventory(kube, golden_node, agents):
    node, driver = golden_node, "golden.lab.dra-operators.dev"
    agents(node, driver, GOLDEN / "simulated-inventory.yaml")
    slices = await wait_pool(kube, driver, node, complete(devices=10), "published pool")
    node_uid = (await kube.get(NODES, node))["metadata"]["uid"]
    assert_golden("simulated-slices.yaml", normalise(slices, node, driver, node_uid))


async def test_golden_dgx_a100_mixed_mig(kube, node, driver):
    """The strict NVML model playing a DGX A100 with MIG in mixed mode
    (input dgx-a100-mixed-mig.input.yaml): NVIDIA's device names, attributes and capacities."""
    agent = NodeAgent(
        kube,
        NvmlBackend(driver, nvml=dgx_a100_mixed_mig(), sysfs_root="/nonexistent-sysfs"),  # not this machine's
        node_name=node,
        driver=driver,
        sync_delay=1,
        health=HealthTracker(driver),
    )
    await agent.start()
    try:
        slices = await wait_pool(kube, driver, node, complete(devices=12), "published pool")
    finally:
        await agent.stop()
    node_uid = (await kube.get(NODES, node))["metadata"]["uid"]
    assert_golden("dgx-a100-mixed-mig.slices.yaml", normalise(slices, node, driver, node_uid))


async def test_scheduler_allocates_published_devices_on_the_right_nodes(
    kube, lab, unique, driver, agents, namespace, cluster_objects, tmp_path
):
    nodes = [f"na-{unique}-a", f"na-{unique}-b"]
    for name in nodes:
        lab.create_node(name)
        lab.wait_node_schedulable(name)
    try:
        inventory = write_inventory(tmp_path / "inv.yaml", {"gpus": [{"model": "M", "memory": "8Gi", "count": 2}]})
        for name in nodes:
            agents(name, driver, inventory)
        await cluster_objects.create(DEVICE_CLASSES, objects.device_class(f"na-{unique}", driver))
        for i in range(4):
            await kube.create(RESOURCE_CLAIMS, objects.resource_claim(f"c{i}", f"na-{unique}"), namespace)
            await kube.create(PODS, objects.pod(f"p{i}", {"gpu": {"resourceClaimName": f"c{i}"}}), namespace)
        seen = set()
        for i in range(4):
            pod = await wait_for(lambda: _running(kube, namespace, f"p{i}"), what=f"p{i} Running")
            claim = await kube.get(RESOURCE_CLAIMS, f"c{i}", namespace)
            [result] = claim["status"]["allocation"]["devices"]["results"]
            assert result["driver"] == driver and result["pool"] == pod["spec"]["nodeName"]
            seen.add((result["pool"], result["device"]))
        assert seen == {(n, f"gpu-{j}") for n in nodes for j in range(2)}
    finally:
        await kube.request("DELETE", PODS.path(namespace))
        for name in nodes:
            lab.api("DELETE", f"/api/v1/nodes/{name}")


async def _running(kube, namespace, name):
    pod = await kube.get_or_none(PODS, name, namespace)
    return pod if pod and pod["status"].get("phase") == "Running" else None


async def test_300_devices_then_an_inventory_change(
    kube, node, driver, agents, namespace, cluster_objects, tmp_path, unique
):
    before = [{"name": f"dev-{i:03d}"} for i in range(300)]
    inventory = write_inventory(tmp_path / "inv.yaml", {"devices": before})
    agents(node, driver, inventory)
    slices = await wait_pool(kube, driver, node, complete(devices=300), "300 devices published")
    assert [s["metadata"]["name"][:6] for s in slices] == ["00000-", "00001-", "00002-"]
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices} == {(1, 3)}
    assert all(s["metadata"]["generateName"] == f"{s['metadata']['name'][:5]}-{driver}-{node}-" for s in slices)
    old_names = {s["metadata"]["name"] for s in slices}

    # The first 100 devices go away. The scheduler allocates first-fit, so a Pod scheduled on
    # stale data would get one of them.
    await cluster_objects.create(DEVICE_CLASSES, objects.device_class(f"na-{unique}", driver))
    changed_at = None
    write_inventory(inventory, {"devices": before[100:]})

    async def watch_generation():
        nonlocal changed_at
        while changed_at is None:
            if any(s["spec"]["pool"]["generation"] == 2 for s in await pool_slices(kube, driver, node)):
                changed_at = time.time()
            await asyncio.sleep(0.02)

    watcher = asyncio.create_task(watch_generation())
    for i in range(40):  # Pods arrive before, during and after the change
        await kube.create(RESOURCE_CLAIMS, objects.resource_claim(f"c{i}", f"na-{unique}"), namespace)
        pod = objects.pod(f"p{i}", {"gpu": {"resourceClaimName": f"c{i}"}})
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
        await kube.create(PODS, pod, namespace)
        await asyncio.sleep(0.1)
    await asyncio.wait_for(watcher, 30)
    slices = await wait_pool(kube, driver, node, complete(devices=200, generation=2), "the changed pool")
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 72]
    assert len(old_names - {s["metadata"]["name"] for s in slices}) == 1, "the obsolete third slice must go"

    gone = {d["name"] for d in before[:100]}
    judged = 0
    for i in range(40):
        await wait_for(lambda: _running(kube, namespace, f"p{i}"), what=f"p{i} Running")
        claim = await kube.get(RESOURCE_CLAIMS, f"c{i}", namespace)
        allocated_at = claim["status"]["allocation"].get("allocationTimestamp")
        device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
        # allocationTimestamp has whole seconds: judge only allocations clearly after the change.
        if allocated_at and _epoch(allocated_at) >= changed_at + 1:
            judged += 1
            assert device not in gone, f"claim c{i} allocated {device}, which no longer exists"
    assert judged >= 5, "too few Pods were allocated after the change to judge it"
    await kube.request("DELETE", PODS.path(namespace))


def _epoch(timestamp: str) -> float:
    import datetime

    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


async def test_hand_edit_reverted_deleted_slice_recreated_restart_changes_nothing(kube, node, driver, agents, tmp_path):
    inventory = write_inventory(tmp_path / "inv.yaml", {"gpus": [{"model": "M", "memory": "8Gi", "count": 2}]})
    agent = agents(node, driver, inventory)
    [published] = await wait_pool(kube, driver, node, complete(devices=2), "published")
    edited = json.loads(json.dumps(published))
    edited["spec"]["devices"][0]["attributes"]["productName"] = {"string": "tampered"}
    await kube.replace(RESOURCE_SLICES, edited)
    [reverted] = await wait_pool(
        kube,
        driver,
        node,
        lambda s: (
            s
            and s[0]["spec"]["devices"][0]["attributes"]["productName"] == {"string": "M"}
            and s[0]["metadata"]["resourceVersion"] != published["metadata"]["resourceVersion"]
        ),
        "hand edit reverted",
    )
    assert reverted["spec"]["pool"]["generation"] == 1  # one slice changed: same generation

    await kube.delete(RESOURCE_SLICES, reverted["metadata"]["name"])
    [recreated] = await wait_pool(
        kube,
        driver,
        node,
        lambda s: s and s[0]["metadata"]["uid"] != reverted["metadata"]["uid"],
        "deleted slice recreated",
    )
    # As upstream: the generation continues from the slices that exist, none here, so 1 again.
    assert recreated["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}

    agent.kill()
    agent.start()
    await asyncio.sleep(3)  # more than the sync delay: anything it would change, it would have
    [after] = await pool_slices(kube, driver, node)
    assert after["metadata"]["resourceVersion"] == recreated["metadata"]["resourceVersion"]
    assert after["spec"]["pool"]["generation"] == 1


async def test_health_taint_recovery_and_ignorable_xid(kube, node, driver, agents, tmp_path):
    inventory = write_inventory(tmp_path / "inv.yaml", {"gpus": [{"model": "M", "memory": "8Gi", "count": 3}]})
    agent = agents(node, driver, inventory)
    await wait_pool(kube, driver, node, complete(devices=3), "published")

    async def annotate(value):
        await kube.patch(
            NODES, node, {"metadata": {"annotations": {HEALTH_ANNOTATION: value}}}, content_type=MERGE_PATCH
        )

    def taints(slices, device):
        return next(d.get("taints") or [] for s in slices for d in s["spec"]["devices"] if d["name"] == device)

    await annotate("gpu-1=xid:94,gpu-2=xid:13")  # 94: contained ECC error, restart the app
    slices = await wait_pool(kube, driver, node, lambda s: s and taints(s, "gpu-1") and taints(s, "gpu-2"), "tainted")
    [critical] = taints(slices, "gpu-1")
    assert (critical["key"], critical["value"], critical["effect"]) == (f"{driver}/xid", "94", "NoSchedule")
    assert critical["timeAdded"].endswith("Z")
    assert taints(slices, "gpu-2")[0]["effect"] == "None"
    assert taints(slices, "gpu-0") == []
    assert len(slices) == 1 and len(slices[0]["spec"]["devices"]) == 3

    # The pool by state (docs/monitoring.md): both tainted devices are the agent's own health taints.
    def states() -> dict[str, float]:
        return {
            labels["state"]: value
            for labels, value in samples(agent.metrics(), "dra_nodeagent_devices", driver=driver, pool=node)
        }

    async def counted() -> bool:
        return states() == {"published": 3.0, "tainted": 2.0, "unhealthy": 2.0}

    await wait_for(counted, timeout=20, what="devices by state")
    text = agent.metrics()
    assert samples(text, "dra_nodeagent_publish_consecutive_failures", driver=driver)[0][1] == 0
    assert samples(text, "dra_nodeagent_last_publish_success_timestamp_seconds", driver=driver)[0][1] > time.time() - 60

    # Still failing: the taint stays, with the same timeAdded, past the quiet period.
    await asyncio.sleep(4)
    assert taints(await pool_slices(kube, driver, node), "gpu-1")[0]["timeAdded"] == critical["timeAdded"]

    await annotate("gpu-2=xid:13,gpu-0=xid:79")  # gpu-1 passes its health check again; 79: off the bus
    await wait_pool(
        kube,
        driver,
        node,
        lambda s: s and not taints(s, "gpu-1") and taints(s, "gpu-0"),
        "gpu-1 recovered, gpu-0 tainted",
        timeout=20,
    )
    await annotate("gpu-2=xid:13")  # gpu-0 passes its check too, but XID 79 needs a reboot: it stays
    await asyncio.sleep(5)
    assert taints(await pool_slices(kube, driver, node), "gpu-0")[0]["value"] == "79"
    events = [e for e in await kube.list(EVENTS, "default") if e["involvedObject"].get("name") == node]
    assert {"DeviceUnhealthy", "DeviceRecovered"} <= {e["reason"] for e in events}
    metrics = agent.metrics()
    assert f'dra_nodeagent_health_events_total{{driver="{driver}",kind="xid",value="94"}} 1.0' in metrics
    assert f'dra_nodeagent_health_recoveries_total{{driver="{driver}"}} 1.0' in metrics
    # kopf only watched: nothing of it on the Node or the slices.
    node_obj = await kube.get(NODES, node)
    assert "kopf" not in json.dumps(node_obj["metadata"])
    assert "kopf" not in json.dumps([s["metadata"] for s in await pool_slices(kube, driver, node)])


async def test_bad_inventory_entries_are_reported_and_the_rest_published(kube, node, driver, agents, tmp_path):
    inventory = write_inventory(
        tmp_path / "inv.yaml",
        {
            "devices": [
                {"name": "good-0"},
                {"name": "long-string", "attributes": {"model": {"string": "x" * 65}}},
                {"name": "too-many", "attributes": {f"a{i}": {"int": i} for i in range(33)}},
                {"name": "Not_A_Label"},
                {"name": "good-1"},
            ]
        },
    )
    agent = agents(node, driver, inventory)
    [published] = await wait_pool(kube, driver, node, complete(devices=2), "the good devices")
    assert [d["name"] for d in published["spec"]["devices"]] == ["good-0", "good-1"]

    async def event():
        return [
            e
            for e in await kube.list(EVENTS, "default")
            if e["involvedObject"].get("name") == node and e["reason"] == "InvalidDevice"
        ]

    [found] = await wait_for(event, what="InvalidDevice Event on the Node")
    for text in (
        "device 'long-string': attributes[model]: 65 bytes",
        "device 'too-many': attributes and capacity: 33",
        "device 'Not_A_Label': name",
    ):
        assert text in found["message"]
    assert f'dra_nodeagent_invalid_devices{{driver="{driver}"}} 3.0' in agent.metrics()

    # An inventory that stops parsing keeps what was published and says where it broke.
    inventory.write_text("devices: [ {name: good-0\n")
    await asyncio.sleep(2.5)
    [kept] = await pool_slices(kube, driver, node)
    assert [d["name"] for d in kept["spec"]["devices"]] == ["good-0", "good-1"]
    [found] = await event()
    assert "does not parse" in found["message"] and "line" in found["message"]

    # Restarted while the inventory is still broken (a node reboot, a new image): the devices an
    # earlier run published stay. It once published the empty inventory and deleted them.
    unusable = "inventory unusable, keeping the devices published before"
    before = agent.log.read_text().count(unusable)
    agent.kill()
    agent.start()

    async def read_again() -> bool:
        return agent.log.read_text().count(unusable) > before

    await wait_for(read_again, what="the restarted agent read the broken inventory")
    await asyncio.sleep(2.5)  # more than the sync delay: a publish would have happened
    slices = await pool_slices(kube, driver, node)
    assert len(slices) == 1, f"the restarted agent changed the published slices: {slices}"
    [kept] = slices
    assert [d["name"] for d in kept["spec"]["devices"]] == ["good-0", "good-1"]
    inventory.write_text(yaml.safe_dump({"devices": [{"name": "good-0"}]}))
    await wait_pool(kube, driver, node, complete(devices=1), "the fixed inventory published")


def test_nvml_backend_without_nvml_exits_with_instructions(lab, node):
    import pynvml

    try:
        pynvml.nvmlInit()
        pytest.skip("a real NVML library is present: the missing-library exit cannot be shown here")
    except pynvml.NVMLError:
        pass
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig), "NODE_NAME": node, "DRA_NODEAGENT_BACKEND": "nvml"}
    result = subprocess.run(
        [sys.executable, "-m", "operators.cli", "run", "nodeagent", "--liveness", ""],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "install the NVIDIA driver" in result.stderr and "DRA_NODEAGENT_BACKEND=simulated" in result.stderr


async def test_slices_go_with_their_node(kube, lab, driver, agents, tmp_path, unique):
    name = f"na-{unique}-gone"
    lab.create_node(name)
    lab.wait_node_schedulable(name)
    inventory = write_inventory(tmp_path / "inv.yaml", {"gpus": [{"count": 1}]})
    agents(name, driver, inventory)
    await wait_pool(kube, driver, name, complete(devices=1), "published")
    lab.api("DELETE", f"/api/v1/nodes/{name}")
    await wait_pool(kube, driver, name, lambda s: not s, "slices deleted with the Node")


async def test_fake_nvml_xid_taints_the_published_device(kube, node, driver):
    fake = eight_gpu_machine()
    agent = NodeAgent(
        kube,
        NvmlBackend(driver, nvml=fake),
        node_name=node,
        driver=driver,
        sync_delay=1,
        health=HealthTracker(driver, quiet_period=3600),
    )
    await agent.start()
    try:
        await wait_pool(kube, driver, node, complete(devices=10), "published pool")
        await asyncio.sleep(0.5)  # the event thread registers
        fake.xid(3, 79)
        fake.xid(7, 43, gi=1, ci=0)  # an application error on a MIG device: effect None
        slices = await wait_pool(
            kube,
            driver,
            node,
            lambda s: s and sum(len(d.get("taints") or []) for x in s for d in x["spec"].get("devices") or []) == 2,
            "two taints",
        )
    finally:
        await agent.stop()
    devices = {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}
    [xid] = devices["gpu-3"]["taints"]
    assert (xid["key"], xid["value"], xid["effect"]) == (f"{driver}/xid", "79", "NoSchedule") and xid["timeAdded"]
    assert devices["gpu-7-mig-9-0-4"]["taints"][0]["effect"] == "None"
    # 64 devices per slice once a device has taints: still one slice for ten devices.
    assert len(slices) == 1


def _generation(slices) -> int:
    return max(s["spec"]["pool"]["generation"] for s in slices)


def _device_taints(slices, name):
    return next(
        (d.get("taints") or [] for s in slices for d in s["spec"].get("devices") or [] if d["name"] == name), None
    )


async def test_strict_nvml_gpu_lost_then_back_is_tainted_then_published_again(kube, node, driver):
    """The strict NVML model loses GPU 2 (nvmlEventSetWait raises GpuIsLost, the GPU answers
    nothing), then brings it back; then GPU 5 falls off the bus for good and returns."""
    model = h100_box()
    backend = NvmlBackend(driver, nvml=model, refresh_interval=0.3)
    agent = NodeAgent(
        kube, backend, node_name=node, driver=driver, sync_delay=1, health=HealthTracker(driver, quiet_period=1)
    )
    await agent.start()
    try:
        slices = await wait_pool(kube, driver, node, complete(devices=8), "published pool")
        await asyncio.sleep(0.5)
        model.lose(2)
        slices = await wait_pool(kube, driver, node, lambda s: s and _device_taints(s, "gpu-2"), "gpu-2 tainted")
        assert [t["key"] for t in _device_taints(slices, "gpu-2")] == [f"{driver}/gpu-lost"]
        assert sum(len(d.get("taints") or []) for s in slices for d in s["spec"]["devices"]) == 1
        model.restore(2)
        await wait_pool(
            kube, driver, node, lambda s: s and _device_taints(s, "gpu-2") == [], "gpu-2 untainted", timeout=30
        )
        before = _generation(await pool_slices(kube, driver, node))
        model.remove(5)
        slices = await wait_pool(
            kube, driver, node, lambda s: s and _device_taints(s, "gpu-5") is None, "gpu-5 unpublished", timeout=30
        )
        assert _generation(slices) == before + 1
        model.restore(5)
        slices = await wait_pool(kube, driver, node, complete(devices=8), "gpu-5 published again", timeout=30)
        assert _generation(slices) == before + 2
    finally:
        await agent.stop()


async def test_strict_nvml_mig_reconfigured_is_republished_with_a_new_generation(kube, node, driver):
    import pynvml

    from ..nvmlmodel.model import MigInstance

    model = dgx_a100_mixed_mig()
    agent = NodeAgent(
        kube,
        NvmlBackend(driver, nvml=model, refresh_interval=0.3),
        node_name=node,
        driver=driver,
        sync_delay=1,
        health=HealthTracker(driver),
    )
    await agent.start()
    try:
        slices = await wait_pool(kube, driver, node, complete(devices=12), "published pool")
        generation = _generation(slices)
        model.reconfigure(
            7,
            [
                MigInstance(
                    gi_id=0,
                    ci_id=0,
                    profile_index=pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
                    placement_start=0,
                    placement_size=8,
                    uuid="MIG-77777777-0000-4000-8000-000000000007",
                )
            ],
        )
        slices = await wait_pool(
            kube,
            driver,
            node,
            lambda s: s and _device_taints(s, "gpu-7-mig-0-0-8") is not None,
            "the 7g.40gb instance published",
            timeout=30,
        )
        assert _generation(slices) == generation + 1
        names = {d["name"] for s in slices for d in s["spec"]["devices"]}
        assert not {n for n in names if n.startswith("gpu-7-mig-") and n != "gpu-7-mig-0-0-8"}
        model.reconfigure(6, [], mig_enabled=False)
        slices = await wait_pool(
            kube,
            driver,
            node,
            lambda s: s and _device_taints(s, "gpu-6") is not None,
            "GPU 6 published whole",
            timeout=30,
        )
        assert _generation(slices) == generation + 2
    finally:
        await agent.stop()
