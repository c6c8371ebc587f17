"""The poolstatus operator side by side with upstream's resourcepoolstatusrequest-controller.

The inputs of every scenario (ResourceSlices, DeviceTaintRules, claims allocated by the real
kube-scheduler for Pods that kwok runs) are created once, each scenario with drivers of its own.
Then the same ResourcePoolStatusRequests are created twice: once answered by upstream's
controller inside kube-controller-manager, once by our operator (with our claims and taints
operators beside it, as upstream's run beside its own). Each scenario is a test of its own that
compares the two answers after normalising request names and condition times.

Upstream keeps answered requests for a fixed hour; retention is tested on ours alone with short
TTL settings, and the answer it gave before deleting the request is compared with upstream's.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from operators.core.api.kube import Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIMS,
    RESOURCE_POOL_STATUS_REQUESTS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.core.framework.metrics import samples

from . import objects
from .conftest import ClusterObjects
from .operator_process import OperatorProcess
from .test_deploy import base  # noqa: F401 - the kustomize base applied to the lab (a fixture)
from .waiting import wait_for, wait_gone

NODE = "lab-node-0"
REQUESTS = RESOURCE_POOL_STATUS_REQUESTS
PENDING_WAIT = 1.5  # upstream drops a request with an incomplete pool after 5 retries (~0.2 s)


@dataclass
class Env:
    """One scenario's inputs and the requests to answer (name suffix -> spec)."""

    kube: Kube
    namespace: str
    unique: str
    scenario: str
    created: ClusterObjects | None = None  # cluster-scoped inputs, deleted at the end
    requests: dict[str, dict] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # requests neither controller answers

    def driver(self, short: str = "d") -> str:
        return f"{short}-{self.scenario[:12].replace('_', '-')}-{self.unique}.lab.dra-operators.dev"

    async def cluster(self, res, body: dict) -> dict:
        self.created = self.created or ClusterObjects(self.kube)
        return await self.created.create(res, body)

    async def slice_(
        self,
        name: str,
        driver: str,
        pool: str,
        devices: list[dict],
        *,
        node: str | None = NODE,
        count: int = 1,
        generation: int = 1,
        **spec: Any,
    ) -> None:
        body = objects.resource_slice(
            f"{name}-{self.unique}", driver, node or NODE, devices, pool=pool, generation=generation
        )
        body["spec"]["pool"]["resourceSliceCount"] = count
        if not devices:
            del body["spec"]["devices"]  # a slice of counters only: "devices" must be absent
        if node is None:
            del body["spec"]["nodeName"]
            body["spec"]["allNodes"] = True
        body["spec"].update(spec)
        await self.cluster(RESOURCE_SLICES, body)

    async def device_class(self, driver: str) -> str:
        name = driver.split(".")[0]
        await self.cluster(DEVICE_CLASSES, objects.device_class(name, driver))
        return name

    async def claim(self, name: str, class_name: str, **exactly: Any) -> None:
        body = objects.resource_claim(name, class_name)
        body["spec"]["devices"]["requests"][0]["exactly"].update(exactly)
        await self.kube.create(RESOURCE_CLAIMS, body, self.namespace)

    async def pod(self, name: str, claim: str) -> None:
        await self.kube.create(PODS, objects.pod(name, {"gpu": {"resourceClaimName": claim}}), self.namespace)

    def request(self, suffix: str, driver: str, *, pending: bool = False, **spec: Any) -> None:
        self.requests[suffix] = {"driver": driver, **spec}
        if pending:
            self.pending.add(suffix)


def dev(name: str, **extra: Any) -> dict:
    return {"name": name, **extra}


# -- scenarios: each creates its inputs and names its requests ------------------------------------


async def plain_devices(env: Env) -> None:
    driver = env.driver()
    await env.slice_("pd-a", driver, "pool-a", [dev(f"gpu-{i}") for i in range(4)])
    await env.slice_("pd-b1", driver, "pool-b", [dev("gpu-0")], count=2)
    await env.slice_("pd-b2", driver, "pool-b", [dev("gpu-1"), dev("gpu-2")], count=2, node="lab-node-1")
    await env.slice_("pd-c", driver, "pool-c", [dev("x-0")], node=None)
    env.request("all", driver)


async def allocated_devices(env: Env) -> None:
    driver = env.driver()
    await env.slice_("ad", driver, "pool", [dev(f"gpu-{i}") for i in range(4)])
    cls = await env.device_class(driver)
    await env.claim("shared", cls)
    await env.claim("own", cls)
    await env.claim("admin", cls, adminAccess=True)
    for pod, claim in (("a1", "shared"), ("a2", "shared"), ("b", "own"), ("watcher", "admin")):
        await env.pod(pod, claim)
    env.request("all", driver)


async def counters_partitions(env: Env) -> None:
    driver = env.driver()
    cost = lambda mem: [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}]  # noqa: E731
    profile = lambda p: {"profile": {"string": p}}  # noqa: E731
    await env.slice_(
        "cp-counters",
        driver,
        "pool",
        [],
        count=2,
        sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
    )
    await env.slice_(
        "cp-devices",
        driver,
        "pool",
        [
            dev("full", attributes=profile("Full"), consumesCounters=cost("80Gi")),
            dev("half-0", attributes=profile("Half"), consumesCounters=cost("40Gi")),
            dev("half-1", attributes=profile("Half"), consumesCounters=cost("40Gi")),
            dev("quarter-0", attributes=profile("Quarter"), consumesCounters=cost("20Gi")),
        ],
        count=2,
    )
    cls = await env.device_class(driver)
    await env.claim(
        "half", cls, selectors=[{"cel": {"expression": 'device.attributes["' + driver + '"].profile == "Half"'}}]
    )
    await env.pod("p", "half")
    env.request("no-attribute", driver)
    env.request("default-attribute", driver, defaultPartitionTypeAttribute=f"{driver}/profile")
    # A second driver's pool whose devices of one type cost differently: a view error.
    other = env.driver("m")
    await env.slice_(
        "cp-mismatch",
        other,
        "pool",
        [
            dev("h-0", attributes=profile("Half"), consumesCounters=cost("40Gi")),
            dev("h-1", attributes=profile("Half"), consumesCounters=cost("50Gi")),
        ],
        count=2,
    )
    await env.slice_(
        "cp-mismatch-counters",
        other,
        "pool",
        [],
        count=2,
        sharedCounters=[{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
    )
    env.request("mismatch", other, defaultPartitionTypeAttribute=f"{other}/profile")


async def shared_capacity(env: Env) -> None:
    driver = env.driver()

    def shareable(n):
        return dev(
            n,
            allowMultipleAllocations=True,
            attributes={"shareable": {"bool": True}},
            capacity={
                "memory": {
                    "value": "40Gi",
                    "requestPolicy": {"default": "10Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
                },
                "cores": {"value": "4"},
            },
        )

    await env.slice_("sc", driver, "pool", [shareable("s-0"), shareable("s-1"), dev("plain")])
    cls = await env.device_class(driver)
    only_shareable = [{"cel": {"expression": f'device.attributes["{driver}"].shareable == true'}}]
    await env.claim("small", cls, selectors=only_shareable, capacity={"requests": {"memory": "3Gi"}})
    await env.claim("default", cls, selectors=only_shareable)
    await env.pod("small", "small")
    await env.pod("default", "default")
    env.request("all", driver)


async def tainted_devices(env: Env) -> None:
    driver = env.driver()
    taint = lambda effect: [{"key": "example.com/maintenance", "effect": effect}]  # noqa: E731
    await env.slice_(
        "td",
        driver,
        "pool",
        [
            dev("no-schedule", taints=taint("NoSchedule")),
            dev("no-execute", taints=taint("NoExecute")),
            dev("none", taints=taint("None")),
            dev("ruled"),
            dev("ruled-none"),
            dev("free"),
        ],
    )
    rules = await env.kube.preferred_version(DEVICE_TAINT_RULES)
    for name, device, effect in (("r1", "ruled", "NoSchedule"), ("r2", "ruled-none", "None")):
        await env.cluster(
            rules,
            {
                "apiVersion": rules.group_version,
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"{name}-{env.unique}"},
                "spec": {
                    "deviceSelector": {"driver": driver, "pool": "pool", "device": device},
                    "taint": {"key": "example.com/rule", "effect": effect},
                },
            },
        )
    env.request("all", driver)


async def filters(env: Env) -> None:
    one, two = env.driver("a"), env.driver("b")
    for driver in (one, two):
        for pool in ("p1", "p2"):
            await env.slice_(f"f-{driver[0]}-{pool}", driver, pool, [dev("gpu-0"), dev("gpu-1")])
    env.request("driver", one)
    env.request("driver-pool", two, poolName="p2")
    env.request("no-such-pool", one, poolName="p9")
    env.request("no-such-driver", env.driver("z"))


async def over_limit(env: Env) -> None:
    driver = env.driver()
    for pool in ("c", "a", "b"):
        await env.slice_(f"ol-{pool}", driver, f"pool-{pool}", [dev("gpu-0")])
    env.request("limit-2", driver, limit=2)
    env.request("limit-1000", driver, limit=1000)


async def incomplete_pool(env: Env) -> None:
    driver = env.driver()
    await env.slice_("ip-a", driver, "pool-a", [dev("gpu-0")])
    await env.slice_("ip-b", driver, "pool-b", [dev("gpu-0")], count=2)  # one of two slices published
    env.request("incomplete", driver, pending=True)
    env.request("incomplete-past-limit", driver, limit=1)


async def generations(env: Env) -> None:
    driver = env.driver()
    await env.slice_("g-old", driver, "pool", [dev(f"gpu-{i}") for i in range(6)], generation=1)
    await env.slice_("g-new", driver, "pool", [dev("gpu-0"), dev("gpu-1")], generation=2)
    env.request("all", driver)


async def generation_rollout(env: Env) -> None:
    driver = env.driver()
    await env.slice_("gr-old-1", driver, "pool", [dev("gpu-0")], count=2, generation=1)
    await env.slice_("gr-old-2", driver, "pool", [dev("gpu-1")], count=2, generation=1)
    await env.slice_("gr-new-1", driver, "pool", [dev("gpu-0")], count=2, generation=2)  # one of two so far
    env.request("all", driver, pending=True)


async def partition_errors(env: Env) -> None:
    cost = [{"counterSet": "c", "counters": {"memory": {"value": "10Gi"}}}]
    counters = [{"name": "c", "counters": {"memory": {"value": "80Gi"}}}]
    missing = env.driver("a")  # a counter-consuming device without the grouping attribute
    await env.slice_(
        "pe-a",
        missing,
        "pool",
        [
            dev("typed", attributes={"profile": {"string": "S"}}, consumesCounters=cost),
            dev("untyped", consumesCounters=cost),
        ],
        count=2,
    )
    await env.slice_("pe-a-counters", missing, "pool", [], count=2, sharedCounters=counters)
    env.request("attribute-missing", missing, defaultPartitionTypeAttribute=f"{missing}/profile")
    no_counters = env.driver("b")  # a grouping attribute but no shared counters in the pool
    await env.slice_("pe-b", no_counters, "pool", [dev("d", attributes={"profile": {"string": "S"}})])
    env.request("no-counters", no_counters, defaultPartitionTypeAttribute=f"{no_counters}/profile")
    over = env.driver("c")  # 33 partition types: more than the status may list
    await env.slice_(
        "pe-c",
        over,
        "pool",
        [dev(f"t-{i}", attributes={"profile": {"string": f"T{i:02d}"}}, consumesCounters=cost) for i in range(33)],
        count=2,
    )
    await env.slice_("pe-c-counters", over, "pool", [], count=2, sharedCounters=counters)
    env.request("over-cap", over, defaultPartitionTypeAttribute=f"{over}/profile")


async def slice_attribute_wins(env: Env) -> None:
    driver = env.driver()
    cost = [{"counterSet": "c", "counters": {"memory": {"value": "20Gi"}}}]
    attrs = {"profile": {"string": "Quarter"}, f"{driver}/shape": {"string": "Small"}}
    await env.slice_(
        "sa-devices",
        driver,
        "pool",
        [dev(f"q-{i}", attributes=attrs, consumesCounters=cost) for i in range(3)],
        count=2,
        partitionTypeAttribute=f"{driver}/profile",
    )
    await env.slice_(
        "sa-counters",
        driver,
        "pool",
        [],
        count=2,
        sharedCounters=[{"name": "c", "counters": {"memory": {"value": "50Gi"}}}],
    )
    env.request("slice-attribute", driver, defaultPartitionTypeAttribute=f"{driver}/shape")


async def shareable_edges(env: Env) -> None:
    bare = env.driver("a")  # shareable devices without capacities
    await env.slice_(
        "se-a", bare, "pool", [dev("s-0", allowMultipleAllocations=True), dev("s-1", allowMultipleAllocations=True)]
    )
    env.request("no-capacity", bare)
    many = env.driver("b")  # 34 capacity names over two devices: more than the status may list
    await env.slice_(
        "se-b",
        many,
        "pool",
        [
            dev(f"s-{d}", allowMultipleAllocations=True, capacity={f"c{d}{i:02d}": {"value": "1Gi"} for i in range(17)})
            for d in range(2)
        ],
    )
    env.request("over-cap", many)
    formats = env.driver("c")  # sums printed as resource.Quantity prints them
    await env.slice_(
        "se-c",
        formats,
        "pool",
        [
            dev(
                "s-0",
                allowMultipleAllocations=True,
                capacity={"mem": {"value": "1536Mi"}, "bw": {"value": "1500m"}, "n": {"value": "1e3"}},
            ),
            dev(
                "s-1",
                allowMultipleAllocations=True,
                capacity={"mem": {"value": "512Mi"}, "bw": {"value": "500m"}, "n": {"value": "2e3"}},
            ),
        ],
    )
    env.request("formats", formats)


async def empty_and_odd_pools(env: Env) -> None:
    driver = env.driver()
    await env.slice_("eo-empty", driver, "empty", [])
    await env.slice_("eo-slash", driver, "rack-1/tray-2", [dev("gpu-0")])
    env.request("all", driver)
    env.request("slashed", driver, poolName="rack-1/tray-2")


async def taint_rule_scopes(env: Env) -> None:
    whole, pooled = env.driver("a"), env.driver("b")
    for driver in (whole, pooled):
        for pool in ("p1", "p2"):
            await env.slice_(f"trs-{driver[0]}-{pool}", driver, pool, [dev("gpu-0"), dev("gpu-1")])
    rules = await env.kube.preferred_version(DEVICE_TAINT_RULES)
    # The whole driver; one pool; one device name in every pool of a driver.
    for name, selector in (
        ("all", {"driver": whole}),
        ("pool", {"driver": pooled, "pool": "p2"}),
        ("device", {"driver": pooled, "device": "gpu-0"}),
    ):
        await env.cluster(
            rules,
            {
                "apiVersion": rules.group_version,
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"trs-{name}-{env.unique}"},
                "spec": {"deviceSelector": selector, "taint": {"key": "example.com/rule", "effect": "NoSchedule"}},
            },
        )
    env.request("whole-driver", whole)
    env.request("pool-and-device", pooled)


async def tainted_allocated(env: Env) -> None:
    """A device tainted after it was allocated counts as allocated and as unavailable (upstream
    subtracts it twice from the available ones)."""
    driver = env.driver()
    await env.slice_("ta", driver, "pool", [dev("gpu-0"), dev("gpu-1")])
    cls = await env.device_class(driver)
    await env.claim("ta", cls)  # names are unique in the namespace all scenarios share
    await env.pod("ta", "ta")

    async def allocated():
        claim = await env.kube.get(RESOURCE_CLAIMS, "ta", env.namespace)
        return ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")

    [result] = await wait_for(allocated, timeout=30, what="claim ta allocated")
    rules = await env.kube.preferred_version(DEVICE_TAINT_RULES)
    await env.cluster(
        rules,
        {
            "apiVersion": rules.group_version,
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"ta-{env.unique}"},
            "spec": {
                "deviceSelector": {"driver": driver, "pool": "pool", "device": result["device"]},
                "taint": {"key": "example.com/rule", "effect": "NoSchedule"},
            },
        },
    )
    env.request("all", driver)


async def default_limit(env: Env) -> None:
    """105 pools and no limit in the request: the API server defaults it to 100."""
    driver = env.driver()
    limit = asyncio.Semaphore(10)

    async def one(i: int) -> None:
        async with limit:
            await env.slice_(f"dl-{i:03d}", driver, f"pool-{i:03d}", [dev("gpu-0")])

    await asyncio.gather(*(one(i) for i in range(105)))
    env.request("default", driver)


async def multi_counter_sets(env: Env) -> None:
    driver = env.driver()
    cost = [
        {"counterSet": "mem", "counters": {"memory": {"value": "80Gi"}}},
        {"counterSet": "cores", "counters": {"sm": {"value": "8"}}},
    ]
    await env.slice_(
        "mc-counters",
        driver,
        "pool",
        [],
        count=2,
        sharedCounters=[
            {"name": "mem", "counters": {"memory": {"value": "160Gi"}}},
            {"name": "cores", "counters": {"sm": {"value": "8"}}},
        ],
    )
    await env.slice_(
        "mc-devices",
        driver,
        "pool",
        [dev(f"full-{i}", attributes={"profile": {"string": "Full"}}, consumesCounters=cost) for i in range(2)],
        count=2,
        partitionTypeAttribute=f"{driver}/profile",
    )
    env.request("all", driver)


SCENARIOS: list[Callable[[Env], Awaitable[None]]] = [
    plain_devices,
    allocated_devices,
    counters_partitions,
    shared_capacity,
    tainted_devices,
    filters,
    over_limit,
    incomplete_pool,
    generations,
    generation_rollout,
    partition_errors,
    slice_attribute_wins,
    shareable_edges,
    empty_and_odd_pools,
    taint_rule_scopes,
    tainted_allocated,
    default_limit,
    multi_counter_sets,
]


# -- running them -----------------------------------------------------------------------------------


def normalise(request: dict | None) -> dict | None:
    if request is None:
        return None
    status = copy.deepcopy(request.get("status"))
    for condition in (status or {}).get("conditions") or []:
        assert condition.pop("lastTransitionTime", None)
    return {"spec": request["spec"], "status": status}


class Runs:
    def __init__(self, kube: Kube, unique: str, namespace: str):
        self.kube, self.unique, self.namespace = kube, unique, namespace
        self.envs = {s.__name__: Env(kube, namespace, unique, s.__name__) for s in SCENARIOS}
        self.results: dict[str, dict[str, dict[str, Any]]] = {"upstream": {}, "ours": {}}
        self.errors: dict[str, BaseException] = {}

    def name(self, mode: str, scenario: str, suffix: str) -> str:
        return f"{mode[:2]}-{scenario.replace('_', '-')}-{suffix}-{self.unique}"

    async def prepare(self) -> None:
        for scenario in SCENARIOS:
            try:
                await scenario(self.envs[scenario.__name__])
            except Exception as e:  # noqa: BLE001 - the scenario's own test reports it
                self.errors[scenario.__name__] = e

        # Every Pod Running: its claim is allocated (and reserved) by the real scheduler.
        async def running() -> bool:
            pods = await self.kube.list(PODS, self.namespace)
            return all(p["status"].get("phase") == "Running" for p in pods)

        await wait_for(running, timeout=60, what="every Pod Running")

    async def ask(self, mode: str) -> None:
        names = {}
        for scenario, env in self.envs.items():
            if scenario in self.errors:
                continue
            for suffix, spec in env.requests.items():
                name = self.name(mode, scenario, suffix)
                await self.kube.create(
                    REQUESTS,
                    {
                        "apiVersion": REQUESTS.group_version,
                        "kind": "ResourcePoolStatusRequest",
                        "metadata": {"name": name},
                        "spec": spec,
                    },
                )
                names[name] = (scenario, suffix, suffix in env.pending)
        started = time.monotonic()

        async def answered() -> bool:
            got = {r["metadata"]["name"]: r for r in await self.kube.list(REQUESTS)}
            done = all(got.get(n, {}).get("status") is not None for n, (_, _, pending) in names.items() if not pending)
            return done and time.monotonic() - started >= PENDING_WAIT

        await wait_for(answered, timeout=30, what=f"requests answered by {mode}")
        got = {r["metadata"]["name"]: r for r in await self.kube.list(REQUESTS)}
        for name, (scenario, suffix, _) in names.items():
            self.results[mode].setdefault(scenario, {})[suffix] = normalise(got.get(name))

    async def cleanup(self) -> None:
        for env in self.envs.values():
            if env.created is not None:
                await env.created.cleanup()


@pytest.fixture(scope="module")
def poolstatus_operator(controllers, lab, tmp_path_factory) -> OperatorProcess:
    """Ours beside the claims and taints operators of the session's ``controllers`` switch."""
    if controllers.mode == "ours":
        controllers.use("none")
    operator = OperatorProcess(["poolstatus"], lab.kubeconfig, tmp_path_factory.mktemp("poolstatus-logs"))
    controllers.operators["poolstatus"] = operator
    try:
        yield operator
    finally:
        controllers.use("none")
        controllers.operators.pop("poolstatus", None)


@pytest.fixture(scope="module")
async def runs(kube, controllers, poolstatus_operator) -> Runs:
    unique = __import__("uuid").uuid4().hex[:5]
    namespace = f"ps-{unique}"
    # adminAccess claims are allowed only in namespaces labelled for it.
    await kube.create(
        NAMESPACES, {"metadata": {"name": namespace, "labels": {"resource.kubernetes.io/admin-access": "true"}}}
    )
    await wait_for(
        lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", namespace), timeout=30, what="default ServiceAccount"
    )
    runs = Runs(kube, unique, namespace)
    try:
        await runs.prepare()
        for mode in ("upstream", "ours"):
            await asyncio.to_thread(controllers.use, mode)
            await runs.ask(mode)
        yield runs
    finally:
        await kube.delete(NAMESPACES, namespace)
        for request in await kube.list(REQUESTS):
            if request["metadata"]["name"].endswith(unique):
                await kube.delete(REQUESTS, request["metadata"]["name"])
        await runs.cleanup()


@pytest.mark.parametrize("scenario", [s.__name__ for s in SCENARIOS])
async def test_same_answer_as_upstream(scenario, runs):
    if scenario in runs.errors:
        raise runs.errors[scenario]
    upstream, ours = runs.results["upstream"][scenario], runs.results["ours"][scenario]
    assert ours == upstream, (
        "ours differs from upstream:\nupstream: "
        + json.dumps(upstream, indent=1)
        + "\nours: "
        + json.dumps(ours, indent=1)
    )
    env = runs.envs[scenario]
    for suffix, result in upstream.items():
        assert result is not None, f"request {suffix} vanished"
        assert (result["status"] is None) == (suffix in env.pending), (suffix, result)


def test_scenarios_show_what_they_are_about(runs):
    """The answers are the ones each scenario is about, not just equal (guards against both
    controllers failing alike)."""
    pools = lambda scenario, suffix="all": runs.results["ours"][scenario][suffix]["status"].get("pools") or []  # noqa: E731
    [allocated] = pools("allocated_devices")
    assert (allocated["allocatedDevices"], allocated["availableDevices"]) == (2, 2)  # shared claim once, admin none
    [tainted] = pools("tainted_devices")
    assert (tainted["unavailableDevices"], tainted["availableDevices"]) == (3, 3)
    [partitioned] = pools("counters_partitions", "default-attribute")
    assert {p["type"]: p["allocatable"] for p in partitioned["partitionSummary"]} == {
        "Full": 0,
        "Half": 1,
        "Quarter": 1,
    }
    [shared] = pools("shared_capacity")
    assert shared["shareableSummary"]["partiallyAvailableDevices"] >= 1
    assert runs.results["ours"]["over_limit"]["limit-2"]["status"]["poolCount"] == 3
    [mismatch] = pools("counters_partitions", "mismatch")
    assert mismatch["validationError"].startswith("PartitionCostMismatch:")
    errors = {
        suffix: pools("partition_errors", suffix)[0]["validationError"].split(" ")[:2]
        for suffix in ("attribute-missing", "no-counters", "over-cap")
    }
    assert errors == {
        "attribute-missing": ["PartitionTypeMissing:", "device"],
        "no-counters": ["PartitionTypeMissing:", "pool"],
        "over-cap": ["PartitionSummaryOverCap:", "pool"],
    }
    driver = runs.envs["slice_attribute_wins"].driver()
    assert pools("slice_attribute_wins", "slice-attribute")[0]["partitionSummary"] == [
        {"attribute": f"{driver}/profile", "type": "Quarter", "total": 3, "allocatable": 2}
    ]
    assert pools("shareable_edges", "no-capacity")[0]["shareableSummary"] == {
        "fullyAvailableDevices": 2,
        "partiallyAvailableDevices": 0,
    }
    assert pools("shareable_edges", "over-cap")[0]["validationError"].startswith("ShareableSummaryOverCap:")
    assert {c["name"]: c["total"] for c in pools("shareable_edges", "formats")[0]["shareableSummary"]["capacity"]} == {
        "bw": "2",
        "mem": "2Gi",
        "n": "3e3",
    }
    assert [(p["poolName"], p["totalDevices"]) for p in pools("empty_and_odd_pools")] == [
        ("empty", 0),
        ("rack-1/tray-2", 1),
    ]
    assert [p["unavailableDevices"] for p in pools("taint_rule_scopes", "whole-driver")] == [2, 2]
    assert [p["unavailableDevices"] for p in pools("taint_rule_scopes", "pool-and-device")] == [1, 2]
    [both] = pools("tainted_allocated")
    assert (both["allocatedDevices"], both["unavailableDevices"], both["availableDevices"]) == (1, 1, 0)
    default = runs.results["ours"]["default_limit"]["default"]
    assert (default["spec"]["limit"], default["status"]["poolCount"], len(default["status"]["pools"])) == (
        100,
        105,
        100,
    )
    assert pools("multi_counter_sets")[0]["partitionSummary"][0]["allocatable"] == 1


async def test_metrics_as_upstream_names_them(runs, poolstatus_operator):
    text = await asyncio.to_thread(poolstatus_operator.metrics) if poolstatus_operator.proc else ""
    assert text, "our operator is not running (the comparison stopped it): its metrics cannot be read"
    driver = runs.envs["plain_devices"].driver()
    assert samples(text, "resourcepoolstatusrequest_controller_requests_processed_total", driver_name=driver) == [
        ({"driver_name": driver}, 1.0)
    ]
    assert samples(
        text, "resourcepoolstatusrequest_controller_request_processing_duration_seconds_count", driver_name=driver
    )
    # Requests left pending (an incomplete pool) are never counted, as upstream.
    pending = runs.envs["incomplete_pool"].driver()
    assert samples(text, "resourcepoolstatusrequest_controller_requests_processed_total", driver_name=pending) == [
        ({"driver_name": pending}, 1.0)
    ]  # only the request whose incomplete pool is past its limit


async def test_retention(runs, kube, controllers, poolstatus_operator):
    """Completed requests go after DRA_POOLSTATUS_COMPLETED_TTL (upstream: 1 h, fixed), unanswered
    ones after DRA_POOLSTATUS_PENDING_TTL (upstream: 24 h); the answer before is upstream's."""
    controllers.use("ours")
    poolstatus_operator.stop()
    poolstatus_operator.extra_env = {
        "DRA_POOLSTATUS_COMPLETED_TTL": "2",
        "DRA_POOLSTATUS_PENDING_TTL": "5",
        "DRA_POOLSTATUS_CLEANUP_INTERVAL": "0.5",
    }
    try:
        await asyncio.to_thread(poolstatus_operator.start)
        plain, pending = runs.envs["plain_devices"], runs.envs["incomplete_pool"]
        names = {"done": f"rt-done-{runs.unique}", "pending": f"rt-pending-{runs.unique}"}
        for key, spec in (("done", plain.requests["all"]), ("pending", pending.requests["incomplete"])):
            await kube.create(REQUESTS, {"metadata": {"name": names[key]}, "spec": spec})
        created = time.monotonic()
        answer = await wait_for(lambda: _answered(kube, names["done"]), timeout=20, what="retention request answered")
        assert normalise(answer) == runs.results["upstream"]["plain_devices"]["all"]
        await wait_gone(kube, REQUESTS, names["done"], timeout=20)
        done_after = time.monotonic() - created
        await wait_gone(kube, REQUESTS, names["pending"], timeout=20)
        pending_after = time.monotonic() - created
        # The TTLs count from whole-second timestamps: up to a second earlier than our clock.
        assert 1 <= done_after < pending_after and pending_after >= 4, (done_after, pending_after)
    finally:
        poolstatus_operator.stop()
        poolstatus_operator.extra_env = {}
        controllers.use("none")


async def _answered(kube: Kube, name: str) -> dict | None:
    request = await kube.get_or_none(REQUESTS, name)
    return request if request is not None and request.get("status") is not None else None


async def test_exits_with_a_message_when_the_api_is_not_served(tmp_path):
    """An API server without v1alpha3 ResourcePoolStatusRequests (a fake one: discovery only)."""
    import sys

    import yaml
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        answers = {
            "/version": {"major": "1", "minor": "37", "gitVersion": "v1.37.1"},
            "/apis/resource.k8s.io": {
                "kind": "APIGroup",
                "name": "resource.k8s.io",
                "versions": [{"groupVersion": "resource.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "resource.k8s.io/v1", "version": "v1"},
            },
            "/apis/resource.k8s.io/v1": {
                "kind": "APIResourceList",
                "groupVersion": "resource.k8s.io/v1",
                "resources": [{"name": "resourceslices", "kind": "ResourceSlice"}],
            },
        }
        if request.path in answers:
            return web.json_response(answers[request.path])
        return web.json_response({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    kubeconfig = tmp_path / "fake.kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "x"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    try:
        env = {**__import__("os").environ, "KUBECONFIG": str(kubeconfig), "DRA_METRICS_PORT": "0"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "operators.cli",
            "run",
            "poolstatus",
            "--liveness",
            "",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
    finally:
        await runner.cleanup()
    output = out.decode(errors="replace")
    assert proc.returncode not in (0, None), output[-3000:]
    message = output.strip().splitlines()[-1]
    assert message.startswith("Error: poolstatus could not start: "), output[-3000:]
    assert "does not serve resource.k8s.io/v1alpha3 resourcepoolstatusrequests" in message, message
    assert "DRAResourcePoolStatus=true" in message and "resource.k8s.io/v1alpha3=true" in message, message


async def test_operator_with_its_own_service_account(base, lab, kube, controllers, poolstatus_operator, runs, tmp_path):  # noqa: F811 - the fixture imported from test_deploy
    """Exactly the kustomize RBAC (kustomize/base/poolstatus.yaml): leader election, the answer,
    and the retention delete, without a single 403."""
    from .test_deploy import NAMESPACE, assert_no_forbidden, service_account_kubeconfig

    controllers.use("none")
    kubeconfig = await service_account_kubeconfig(lab, kube, "dra-poolstatus", tmp_path / "poolstatus.kubeconfig")
    operator = OperatorProcess(
        ["poolstatus"],
        kubeconfig,
        tmp_path,
        env={
            "DRA_LEADER_ELECTION": "true",
            "DRA_LEADER_ELECTION_NAMESPACE": NAMESPACE,
            "DRA_POOLSTATUS_COMPLETED_TTL": "1",
            "DRA_POOLSTATUS_CLEANUP_INTERVAL": "0.5",
        },
    )
    await asyncio.to_thread(operator.start)
    try:
        name = f"rbac-{runs.unique}"
        await kube.create(REQUESTS, {"metadata": {"name": name}, "spec": runs.envs["tainted_devices"].requests["all"]})
        answer = await wait_for(lambda: _answered(kube, name), timeout=30, what="answered under the kustomize RBAC")
        assert normalise(answer) == runs.results["upstream"]["tainted_devices"]["all"]  # DeviceTaintRules read too
        await wait_gone(kube, REQUESTS, name, timeout=20)
        assert "became leader" in operator.log.read_text()
        assert_no_forbidden(operator)
    finally:
        operator.stop()


async def test_runs_beside_the_other_operators_in_one_process(
    kube, lab, controllers, poolstatus_operator, runs, tmp_path
):
    """`dra-operators run claims taints poolstatus`: one kopf process, handlers apart, one answer."""
    controllers.use("none")
    operator = OperatorProcess(["claims", "taints", "poolstatus"], lab.kubeconfig, tmp_path)
    await asyncio.to_thread(operator.start)
    try:
        name = f"one-process-{runs.unique}"
        await kube.create(
            REQUESTS, {"metadata": {"name": name}, "spec": runs.envs["allocated_devices"].requests["all"]}
        )
        answer = await wait_for(lambda: _answered(kube, name), timeout=30, what="answered by the shared process")
        assert normalise(answer) == runs.results["upstream"]["allocated_devices"]["all"]
        # Requests with an incomplete pool, left by the comparison, are dropped at error level, as upstream logs them.
        errors = [e for e in operator.errors() if "dropping request out of the queue after max retries" not in e]
        assert not errors, errors[:5]
    finally:
        operator.stop()
