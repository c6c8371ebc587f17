"""The demo's decisions (operators/demo.py): what it creates and runs on the lab and on a
KUBECONFIG cluster, when it goes ahead, and what it removes on exit, in which order."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from operators import demo
from operators.core.api.resources import DEVICE_CLASSES, NAMESPACES, NODES, RESOURCE_SLICES
from operators.demo import (
    DEMO_NAMESPACE,
    KCM_FLAG,
    KCM_OPTION,
    REAL_NAMESPACE,
    SIMULATED_DRIVER,
    YES_OPTION,
    Cluster,
    Demo,
    Removal,
    build_plan,
    confirmation,
    current_context,
    describe_plan,
    device_classes,
    removal_order,
    slices_to_remove,
)
from tests.fakeapi import FakeApi

OURS = ("gpu.nvidia.com", "gpu.sim.dra-operators.dev", "mig.nvidia.com")


def cluster(**kw) -> Cluster:
    return Cluster(**{"context": "kind-dra", "server": "https://127.0.0.1:6443", "nodes": ("n1", "n2"), **kw})


def test_the_lab_gets_everything_and_removes_nothing_itself():
    plan = build_plan(None, OURS, kcm_controllers_off=False)
    assert plan.lab and not plan.remove_on_exit
    assert plan.operators == ("claims", "taints", "binding")
    assert plan.agent_nodes is None  # every Node of the lab, listed once it runs
    assert plan.device_classes == tuple(sorted(OURS))
    assert plan.namespaces == (DEMO_NAMESPACE, REAL_NAMESPACE)
    assert removal_order(plan) == [Removal("operators")]
    assert confirmation(plan, yes=False, interactive=False) == "go"


@pytest.mark.parametrize(
    ("kcm_off", "operators", "skipped"),
    [
        (False, ("binding",), ("claims", "taints")),
        (True, ("claims", "taints", "binding"), ()),
    ],
    ids=["kcm-runs-its-controllers", "kcm-controllers-off"],
)
def test_claims_and_taints_run_on_a_kubeconfig_cluster_only_when_kcm_is_said_not_to(kcm_off, operators, skipped):
    plan = build_plan(cluster(), OURS, kcm_controllers_off=kcm_off)
    assert plan.operators == operators
    assert tuple(name for name, _ in plan.skipped) == skipped
    assert all(KCM_OPTION in why for _, why in plan.skipped)


@pytest.mark.parametrize(
    ("existing", "nodes_with_slices", "namespaces", "classes", "agents", "skipped_agents"),
    [
        (frozenset(), frozenset(), frozenset(), OURS, ("n1", "n2"), ()),
        (frozenset({"gpu.nvidia.com"}), frozenset(), frozenset(), OURS[1:], ("n1", "n2"), ()),
        (frozenset(OURS), frozenset({"n2"}), frozenset(), (), ("n1",), ("nodeagent on n2",)),
        (
            frozenset(),
            frozenset({"n1", "n2"}),
            frozenset({DEMO_NAMESPACE}),
            OURS,
            (),
            ("nodeagent on n1", "nodeagent on n2"),
        ),
    ],
    ids=["empty-cluster", "a-class-exists", "all-classes-and-an-agent", "everything-there"],
)
def test_a_kubeconfig_cluster_keeps_what_it_has(
    existing, nodes_with_slices, namespaces, classes, agents, skipped_agents
):
    plan = build_plan(
        cluster(device_classes=existing, nodes_with_slices=nodes_with_slices, namespaces=namespaces),
        OURS,
        kcm_controllers_off=True,
    )
    assert plan.device_classes == classes  # created, so removed; what was there stays untouched
    assert plan.agent_nodes == agents
    assert tuple(name for name, _ in plan.skipped) == skipped_agents
    assert plan.namespaces == (() if namespaces else (DEMO_NAMESPACE,))
    assert REAL_NAMESPACE not in plan.namespaces  # no real Node outside the lab
    assert plan.remove_on_exit and not plan.lab


@pytest.mark.parametrize(
    ("yes", "interactive", "decision"),
    [(True, False, "go"), (True, True, "go"), (False, True, "ask"), (False, False, "refuse")],
)
def test_a_kubeconfig_cluster_needs_yes_or_an_answer(yes, interactive, decision):
    assert confirmation(build_plan(cluster(), OURS, False), yes=yes, interactive=interactive) == decision


def test_the_refusal_names_the_flag():
    assert YES_OPTION in demo.refusal() and "DEMO_ARGS" in demo.refusal()


@pytest.mark.parametrize("kcm_off", [False, True])
def test_the_description_names_the_cluster_what_it_creates_and_runs(kcm_off):
    plan = build_plan(cluster(device_classes=frozenset({"gpu.nvidia.com"})), OURS, kcm_controllers_off=kcm_off)
    text = describe_plan(plan)
    for piece in ("'kind-dra'", "https://127.0.0.1:6443", "n1, n2", SIMULATED_DRIVER, DEMO_NAMESPACE, KCM_FLAG):
        assert piece in text
    assert "gpu.sim.dra-operators.dev, mig.nvidia.com" in text and "gpu.nvidia.com," not in text
    assert ("not run: claims" in text) is not kcm_off
    assert ("the binding operator," in text) is not kcm_off and "on Ctrl-C" in text


def test_removal_runs_examples_and_namespaces_before_the_operators_stop():
    plan = build_plan(cluster(nodes_with_slices=frozenset({"n2"})), OURS, kcm_controllers_off=True)
    steps = removal_order(plan)
    assert [s.what for s in steps] == ["examples", "namespaces", "operators", "slices", "deviceclasses"]
    assert steps[0].names == tuple(reversed(plan.examples))
    assert steps[1].names == (DEMO_NAMESPACE,)
    assert steps[3].names == ("n1",)
    assert steps[4].names == OURS


def test_removal_leaves_out_what_it_did_not_create():
    plan = build_plan(
        cluster(
            device_classes=frozenset(OURS),
            namespaces=frozenset({DEMO_NAMESPACE}),
            nodes_with_slices=frozenset({"n1", "n2"}),
        ),
        OURS,
        kcm_controllers_off=False,
    )
    assert [s.what for s in removal_order(plan)] == ["examples", "operators"]


def test_slices_to_remove_are_the_simulated_drivers_on_served_nodes():
    def slice_(name, node, driver=SIMULATED_DRIVER):
        return {"metadata": {"name": name}, "spec": {"nodeName": node, "driver": driver}}

    found = [
        slice_("b", "n1"),
        slice_("a", "n1"),
        slice_("c", "n2"),
        slice_("d", "n1", "gpu.nvidia.com"),
        slice_("e", None),
    ]
    assert slices_to_remove(found, ["n1"]) == ["a", "b"]


@pytest.mark.parametrize(
    ("documents", "expected"),
    [
        (
            [
                {
                    "current-context": "kind-dra",
                    "contexts": [{"name": "kind-dra", "context": {"cluster": "kind", "user": "u"}}],
                    "clusters": [{"name": "kind", "cluster": {"server": "https://127.0.0.1:6443"}}],
                }
            ],
            ("kind-dra", "https://127.0.0.1:6443"),
        ),
        (  # a KUBECONFIG list: the first current-context, its cluster from a later file
            [
                {"current-context": "prod", "contexts": [{"name": "prod", "context": {"cluster": "c"}}]},
                {"current-context": "other", "clusters": [{"name": "c", "cluster": {"server": "https://api:443"}}]},
            ],
            ("prod", "https://api:443"),
        ),
        ([None, {"contexts": []}], ("?", "?")),
    ],
    ids=["one-file", "a-list", "nothing-known"],
)
def test_current_context(documents, expected):
    assert current_context(documents) == expected


def test_the_device_classes_are_those_of_config_deviceclasses():
    classes = device_classes()
    assert set(OURS) <= set(classes)  # the simulated driver's file holds its shared and partition classes too
    assert all(c["apiVersion"] == "resource.k8s.io/v1" and c["metadata"]["name"] == n for n, c in classes.items())


# -- the I/O edges, on the fake API -----------------------------------------------------------


class _Connected:
    def __init__(self, api: FakeApi):
        self.api = api

    async def __aenter__(self) -> FakeApi:
        return self.api

    async def __aexit__(self, *exc: object) -> None:
        return None


class _FakeDemo(Demo):
    def __init__(self, api: FakeApi, tmp_path: Path):
        super().__init__(nodes=2, logs=tmp_path)
        self.api = api
        self.kubeconfig = str(tmp_path / "kubeconfig")

    async def connect(self):  # type: ignore[override]
        return _Connected(self.api)


def _slice(name: str, node: str, driver: str = SIMULATED_DRIVER) -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "driver": driver, "pool": {"name": node}}}


def _objects() -> dict:
    return {
        NODES: [{"metadata": {"name": n}} for n in ("n1", "n2", "n3")],
        DEVICE_CLASSES: [{"metadata": {"name": "gpu.nvidia.com"}}],
        NAMESPACES: [],
        RESOURCE_SLICES: [_slice("theirs", "n3"), _slice("nvidia", "n1", "gpu.nvidia.com")],
    }


def test_the_survey_reads_what_the_plan_needs(tmp_path):
    (tmp_path / "kubeconfig").write_text(
        yaml.safe_dump(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k"}}],
                "clusters": [{"name": "k", "cluster": {"server": "https://k:6443"}}],
            }
        )
    )
    api = FakeApi(_objects())
    found = asyncio.run(_FakeDemo(api, tmp_path).survey(OURS))
    assert found == Cluster(
        context="c",
        server="https://k:6443",
        nodes=("n1", "n2", "n3"),
        device_classes=frozenset({"gpu.nvidia.com"}),
        namespaces=frozenset(),
        nodes_with_slices=frozenset({"n3"}),  # of the simulated driver only
    )
    assert not api.actions_of("create") and not api.actions_of("delete")


def test_the_removal_deletes_what_the_demo_created_and_nothing_else(tmp_path):
    api = FakeApi(_objects())
    demo_ = _FakeDemo(api, tmp_path)
    plan = build_plan(asyncio.run(demo_.survey(OURS)), OURS, kcm_controllers_off=False)
    assert plan.agent_nodes == ("n1", "n2") and plan.device_classes == OURS[1:]
    # What the demo did: its namespace, one of its two DeviceClasses (it stopped before the
    # second), and its node agents published a slice each.
    asyncio.run(demo_.ensure_namespaces(plan.namespaces))
    demo_.created["deviceclasses"].add("gpu.sim.dra-operators.dev")
    for obj, res in (
        ({"metadata": {"name": "gpu.sim.dra-operators.dev"}}, DEVICE_CLASSES),
        ({"metadata": {"name": "mig.nvidia.com"}}, DEVICE_CLASSES),  # someone else's, created meanwhile
        (_slice("ours-1", "n1"), RESOURCE_SLICES),
        (_slice("ours-2", "n2"), RESOURCE_SLICES),
    ):
        api.add(obj, res)
    removed = [
        line
        for step in removal_order(plan)
        if step.what in ("namespaces", "slices", "deviceclasses")
        for line in demo_.remove(step)
    ]
    assert removed == [
        f"namespace/{DEMO_NAMESPACE}",
        "resourceslice/ours-1",
        "resourceslice/ours-2",
        "deviceclass/gpu.sim.dra-operators.dev",
    ]
    assert sorted(o["metadata"]["name"] for o in api.objects(RESOURCE_SLICES)) == ["nvidia", "theirs"]
    assert sorted(o["metadata"]["name"] for o in api.objects(DEVICE_CLASSES)) == ["gpu.nvidia.com", "mig.nvidia.com"]
