"""The demo's decisions (operators/demo.py): what it creates and runs on the lab and on a
KUBECONFIG cluster, when it goes ahead, and what it removes on exit, in which order."""

from __future__ import annotations

import pytest

from operators import demo
from operators.demo import (
    DEMO_NAMESPACE,
    KCM_FLAG,
    KCM_OPTION,
    REAL_NAMESPACE,
    SIMULATED_DRIVER,
    YES_OPTION,
    Cluster,
    Removal,
    build_plan,
    confirmation,
    current_context,
    describe_plan,
    device_class_files,
    removal_order,
    slices_to_remove,
)

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
    assert "binding" in text and "on Ctrl-C" in text


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


def test_the_device_classes_are_the_files_of_config_deviceclasses():
    files = device_class_files()
    assert set(files) == set(OURS)
    assert all(path.name == f"{name}.yaml" for name, path in files.items())
