"""The node agent on each release's slice rules: the probe reads them, the slices obey them.

``release_rules`` makes the fake API server apply what kube-apiserver does to a ResourceSlice on
create and update (``resourceslice/strategy.go`` dropDisabledFields, then ``validation.go``):
1.34 wants counter sets beside the devices that consume them, 1.35 and later in slices of their
own, and a gate that is off drops its fields.
"""

from __future__ import annotations

import copy

import pytest
from prometheus_client import CollectorRegistry

from operators.core.api.resources import NODES, RESOURCE_SLICES
from operators.nodeagent.agent import NodeAgent
from operators.nodeagent.backends.base import Inventory
from operators.nodeagent.health import XID, HealthEvent, HealthTracker
from operators.nodeagent.metrics import Metrics
from operators.nodeagent.slices import MAX_COUNTERS_INLINE, fit_to_cluster, split_into_slices
from operators.nodeagent.support import SliceSupport, probe_slice_support
from tests.fakeapi import Action, FakeApi, invalid, status_error

NODE, DRIVER = "node-1", "gpu.example.com"


def release_rules(fake: FakeApi, *, v134: bool, partitionable: bool, taints: bool, shareable: bool = True) -> None:
    def react(action: Action):
        spec = action.obj["spec"]
        if not shareable:
            for device in spec.get("devices") or []:
                device.pop("allowMultipleAllocations", None)
                for capacity in (device.get("capacity") or {}).values():
                    capacity.pop("requestPolicy", None)
        if not partitionable:
            spec.pop("sharedCounters", None)
            for device in spec.get("devices") or []:
                device.pop("consumesCounters", None)
        if not taints:
            for device in spec.get("devices") or []:
                device.pop("taints", None)
        local = {s["name"] for s in spec.get("sharedCounters") or []}
        for device in spec.get("devices") or []:
            for used in device.get("consumesCounters") or []:
                if v134 and used["counterSet"] not in local:
                    raise invalid(RESOURCE_SLICES, "", "must reference a counterSet defined in the ResourceSlice")
        if not v134 and spec.get("sharedCounters") and spec.get("devices"):
            raise invalid(RESOURCE_SLICES, "", "spec: only one of sharedCounters or devices is allowed")
        return None  # stored as changed

    fake.prepend_reactor("create", "resourceslices", react)
    fake.prepend_reactor("update", "resourceslices", react)


RELEASES = {
    "1.37": ({"v134": False, "partitionable": True, "taints": True}, SliceSupport()),
    "1.36": ({"v134": False, "partitionable": True, "taints": True}, SliceSupport()),
    "1.35 default gates": (
        {"v134": False, "partitionable": False, "taints": False, "shareable": False},
        SliceSupport(partitionable=False, taints=False, shareable=False),
    ),
    "1.34 default gates": (
        {"v134": True, "partitionable": False, "taints": False, "shareable": False},
        SliceSupport(partitionable=False, taints=False, shareable=False),
    ),
    "1.34 gates on": (
        {"v134": True, "partitionable": True, "taints": True},
        SliceSupport(counters_inline=True),
    ),
}


@pytest.mark.parametrize("release", RELEASES)
async def test_the_probe_reads_each_release(release):
    rules, expected = RELEASES[release]
    fake = FakeApi()
    release_rules(fake, **rules)
    support, why = await probe_slice_support(fake, DRIVER, NODE)
    assert (support, why) == (expected, None)
    assert fake.objects(RESOURCE_SLICES) == [], "a probe is a dry run"
    assert all(a.params.get("dryRun") for a in fake.actions_of("create"))


async def test_a_probe_that_is_forbidden_assumes_the_newest_rules_and_says_why():
    fake = FakeApi()
    fake.fail("create", "resourceslices", status_error(403, "Forbidden", "resourceslices is forbidden"))
    support, why = await probe_slice_support(fake, DRIVER, NODE)
    assert support == SliceSupport(known=False)
    assert "forbidden" in why and "unknown" in support.describe()


def _gpus(count: int, parts: int) -> Inventory:
    devices, sets = [], []
    for g in range(count):
        sets.append({"name": f"gpu-{g}-counters", "counters": {"memory": {"value": "80Gi"}}})
        use = [{"counterSet": f"gpu-{g}-counters", "counters": {"memory": {"value": "80Gi"}}}]
        devices.append({"name": f"gpu-{g}", "consumesCounters": use})
        for p in range(parts):
            part = [{"counterSet": f"gpu-{g}-counters", "counters": {"memory": {"value": f"{80 // parts}Gi"}}}]
            devices.append({"name": f"gpu-{g}-part-{p}", "consumesCounters": part})
    return Inventory(devices=devices + [{"name": "nic-0"}], counter_sets=sets)


def test_inline_layout_keeps_each_gpu_with_its_counters_within_the_limits():
    inv = _gpus(40, 1)
    specs = split_into_slices(inv.devices, inv.counter_sets, inline=True)
    for spec in specs[:-1]:
        local = {s["name"] for s in spec["sharedCounters"]}
        assert {c["counterSet"] for d in spec["devices"] for c in d["consumesCounters"]} == local
        assert len(local) <= MAX_COUNTERS_INLINE and len(spec["devices"]) <= 64
    assert [len(s["devices"]) for s in specs] == [64, 16, 1]  # 32 GPUs of 2 devices, 8 more, the NIC
    assert specs[-1] == {"devices": [{"name": "nic-0"}]}


def test_a_group_too_large_for_one_slice_on_134_is_reported_not_sent():
    inv = _gpus(2, 70)
    devices, sets, problems = fit_to_cluster(inv.devices, inv.counter_sets, SliceSupport(counters_inline=True))
    assert devices == [{"name": "nic-0"}] and sets == []
    assert len(problems) == 2 and "must fit in one slice" in problems[0]


def test_without_partitionable_devices_only_whole_devices_are_published():
    inv = _gpus(2, 2)
    inv.devices.append({"name": "gpu-9"})
    devices, sets, problems = fit_to_cluster(inv.devices, inv.counter_sets, SliceSupport(partitionable=False))
    assert [d["name"] for d in devices] == ["nic-0", "gpu-9"] and sets == []
    assert "6 device(s) consuming shared counters not published" in problems[0]
    assert "DRAPartitionableDevices" in problems[0]


class _Backend:
    def __init__(self, inventory: Inventory):
        self.inventory = inventory

    def discover(self) -> Inventory:
        return copy.deepcopy(self.inventory)

    def observe_node(self, node) -> None:
        pass


async def _published(release: str, inventory: Inventory, unhealthy: str | None = None) -> list[dict]:
    rules, _ = RELEASES[release]
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid"}}
    fake = FakeApi({NODES: [node]})
    release_rules(fake, **rules)
    agent = NodeAgent(
        fake,
        _Backend(inventory),
        node_name=NODE,
        driver=DRIVER,
        sync_delay=0,
        health=HealthTracker(DRIVER),
        metrics=Metrics(CollectorRegistry()),
    )
    agent.on_node(fake.stored(NODES, NODE), deleted=False)
    await agent._rediscover()
    if unhealthy:
        await agent._on_health_event(HealthEvent(unhealthy, XID, "79"))
    await agent.publish()
    for found in fake.objects(RESOURCE_SLICES):  # what an informer would deliver
        agent.on_slice(found, deleted=False)
    writes = len(fake.actions_of("create")) + len(fake.actions_of("update"))
    await agent.publish()
    assert len(fake.actions_of("create")) + len(fake.actions_of("update")) == writes, "the pool is stable"
    return fake.objects(RESOURCE_SLICES)


@pytest.mark.parametrize("release", RELEASES)
async def test_the_agent_publishes_a_pool_each_release_accepts(release):
    rules, _ = RELEASES[release]
    slices = await _published(release, _gpus(2, 2))
    names = sorted(d["name"] for s in slices for d in s["spec"].get("devices") or [])
    assert len({s["spec"]["pool"]["resourceSliceCount"] for s in slices}) == 1
    assert len(slices) == slices[0]["spec"]["pool"]["resourceSliceCount"], "the pool is complete"
    if rules["partitionable"]:
        assert len(names) == 7
        in_own_slices = any(not s["spec"].get("devices") for s in slices)
        assert in_own_slices is not rules["v134"]
    else:
        assert names == ["nic-0"], "partitions must not be allocated without their counters"


@pytest.mark.parametrize("release", ["1.35 default gates", "1.37"])
async def test_an_unhealthy_device_is_withdrawn_where_taints_are_dropped(release):
    rules, _ = RELEASES[release]
    inventory = Inventory(devices=[{"name": "gpu-0"}, {"name": "gpu-1"}])
    slices = await _published(release, inventory, unhealthy="gpu-0")
    devices = {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}
    if rules["taints"]:
        assert devices["gpu-0"]["taints"] and "taints" not in devices["gpu-1"]
    else:
        assert list(devices) == ["gpu-1"]


def _shared_gpu() -> Inventory:
    policy = {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
    gpu = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": "8Gi", "requestPolicy": policy}},
    }
    return Inventory(devices=[gpu, {"name": "gpu-1", "capacity": {"memory": {"value": "8Gi"}}}])


@pytest.mark.parametrize("release", RELEASES)
async def test_a_shared_device_is_published_whole_where_sharing_is_dropped(release):
    """_published fails if the pool is rewritten on every pass, as it was when the agent sent
    fields the server then dropped."""
    rules, support = RELEASES[release]
    slices = await _published(release, _shared_gpu())
    devices = {d["name"]: d for s in slices for d in s["spec"].get("devices") or []}
    if support.shareable:
        assert devices["gpu-0"]["allowMultipleAllocations"] is True
        assert devices["gpu-0"]["capacity"]["memory"]["requestPolicy"]["default"] == "1Gi"
    else:
        assert devices["gpu-0"] == {"name": "gpu-0", "capacity": {"memory": {"value": "8Gi"}}}
    assert devices["gpu-1"] == {"name": "gpu-1", "capacity": {"memory": {"value": "8Gi"}}}


def test_without_consumable_capacity_the_problem_names_the_gate():
    inv = _shared_gpu()
    devices, _, problems = fit_to_cluster(inv.devices, [], SliceSupport(shareable=False))
    assert problems == [
        "1 shared device(s) published whole, for one claim at a time: the API server drops "
        "allowMultipleAllocations (feature gate DRAConsumableCapacity is off)"
    ]
    assert inv.devices[0]["allowMultipleAllocations"], "the inventory itself is left as discovered"
    assert "DRAConsumableCapacity off" in SliceSupport(shareable=False).describe()
