"""Direct tests of the allocator's parts: capacity (consumable_capacity.go), devicefit (the
per-device explanation, in the allocator's order), nodeselection (nodeaffinity and the
scheduler's node filters) and tolerations (resourceclaim.ToleratesTaint)."""

from fractions import Fraction

import pytest

from operators.core.dra import capacity, devicefit, nodeselection, tolerations
from operators.core.dra.allocator import Request
from operators.core.dra.pools import AllocatedState, Pool

# -- capacity --------------------------------------------------------------------------------------

RANGE = {"value": "8", "requestPolicy": {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}}
VALUES = {"value": "8", "requestPolicy": {"default": "1", "validValues": ["1", "3"]}}


@pytest.mark.parametrize(
    "name,cap,requested,consumed",
    [
        ("no-policy-request", {"value": "8"}, "3", 3),
        ("no-policy-no-request-takes-all", {"value": "8"}, None, 8),
        ("range-default", RANGE, None, 2),
        ("range-min", RANGE, "1", 2),
        ("range-step-rounds-up", RANGE, "3", 4),
        ("valid-values-default", VALUES, None, 1),
        ("valid-values-round-up", VALUES, "2", 3),
    ],
)
def test_consumed_amounts(name, cap, requested, consumed):
    req = {"requests": {"c": requested}} if requested is not None else None
    assert capacity.consumed_amounts(req, {"capacity": {"c": cap}}) == {"c": Fraction(consumed)}


@pytest.mark.parametrize(
    "name,cap,requested,in_use,problem",
    [
        ("fits", {"value": "8"}, "3", {}, None),
        ("fits-exactly", {"value": "8"}, "3", {"c": Fraction(5)}, None),
        ("over-remaining", {"value": "8"}, "3", {"c": Fraction(6)}, "c: needs 3, 2 of 8 left"),
        ("over-max", RANGE, "6", {}, "more than the maximum 4"),
        ("not-a-valid-value", VALUES, "5", {}, "not one of 1, 3"),
        ("unknown-capacity", {"value": "8"}, None, {}, None),
    ],
)
def test_capacity_problem(name, cap, requested, in_use, problem):
    req = {"requests": {"c": requested}} if requested is not None else None
    got = capacity.capacity_problem(req, {"capacity": {"c": cap}}, in_use)
    assert (got is None) if problem is None else (problem in got)


def test_a_request_for_a_capacity_the_device_lacks():
    assert (
        capacity.capacity_problem({"requests": {"other": "1"}}, {"capacity": {"c": {"value": "1"}}})
        == "has no capacity 'other'"
    )


def test_add_and_subtract_amounts():
    into = {"a": Fraction(1)}
    capacity.add(into, {"a": Fraction(2), "b": Fraction(1)})
    capacity.add(into, {"b": Fraction(1)}, -1)
    assert into == {"a": Fraction(3), "b": Fraction(0)}


# -- tolerations ------------------------------------------------------------------------------------

TAINT = {"key": "k", "value": "v", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    "name,toleration,tolerated",
    [
        ("equal", {"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"}, True),
        ("default-operator-is-equal", {"key": "k", "value": "v"}, True),
        ("other-value", {"key": "k", "value": "w"}, False),
        ("exists-any-value", {"key": "k", "operator": "Exists"}, True),
        ("exists-everything", {"operator": "Exists"}, True),
        ("other-effect", {"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        ("other-key", {"key": "j", "operator": "Exists"}, False),
        ("unknown-operator", {"key": "k", "operator": "Gt", "value": "v"}, False),
    ],
)
def test_tolerates(name, toleration, tolerated):
    assert tolerations.tolerates(toleration, TAINT) is tolerated


def test_only_filtering_effects_prevent_anything():
    taints = [
        TAINT,
        {"key": "n", "effect": "None"},
        {"key": "p", "effect": "PreferNoSchedule"},
        {"key": "x", "effect": "NoExecute"},
    ]
    assert tolerations.untolerated(taints, [{"key": "k", "operator": "Exists"}]) == [taints[3]]
    assert tolerations.describe_taint(TAINT) == "k=v:NoSchedule"
    assert tolerations.describe_taint({"key": "x", "effect": "NoExecute"}) == "x:NoExecute"


# -- node selection ---------------------------------------------------------------------------------

NODE = {"metadata": {"name": "node-1", "labels": {"region": "r1", "gpus": "4"}}, "spec": {}}


def term(*expressions, fields=()):
    return {"matchExpressions": list(expressions), "matchFields": list(fields)}


@pytest.mark.parametrize(
    "name,selector,matches",
    [
        ("in", {"nodeSelectorTerms": [term({"key": "region", "operator": "In", "values": ["r1"]})]}, True),
        ("not-in", {"nodeSelectorTerms": [term({"key": "region", "operator": "NotIn", "values": ["r1"]})]}, False),
        ("exists", {"nodeSelectorTerms": [term({"key": "gpus", "operator": "Exists"})]}, True),
        ("does-not-exist", {"nodeSelectorTerms": [term({"key": "gpus", "operator": "DoesNotExist"})]}, False),
        ("gt", {"nodeSelectorTerms": [term({"key": "gpus", "operator": "Gt", "values": ["3"]})]}, True),
        ("lt", {"nodeSelectorTerms": [term({"key": "gpus", "operator": "Lt", "values": ["3"]})]}, False),
        (
            "field",
            {"nodeSelectorTerms": [term(fields=[{"key": "metadata.name", "operator": "In", "values": ["node-1"]}])]},
            True,
        ),
        (
            "terms-are-ored",
            {
                "nodeSelectorTerms": [
                    term({"key": "region", "operator": "In", "values": ["r2"]}),
                    term({"key": "gpus", "operator": "Exists"}),
                ]
            },
            True,
        ),
        (
            "requirements-are-anded",
            {
                "nodeSelectorTerms": [
                    term(
                        {"key": "region", "operator": "In", "values": ["r1"]},
                        {"key": "gpus", "operator": "DoesNotExist"},
                    )
                ]
            },
            False,
        ),
        ("empty-term-matches-nothing", {"nodeSelectorTerms": [term()]}, False),
        ("no-selector", None, False),
    ],
)
def test_node_selector_matches(name, selector, matches):
    assert nodeselection.node_selector_matches(selector, NODE) is matches


def test_node_matches_by_name_all_or_selector():
    assert nodeselection.node_matches(NODE, "node-1", False, None)
    assert not nodeselection.node_matches(NODE, "node-2", True, None)  # a name wins over allNodes
    assert nodeselection.node_matches(NODE, "", True, None)
    assert nodeselection.node_matches(None, "", True, None)
    assert not nodeselection.node_matches(None, "", False, {"nodeSelectorTerms": []})
    assert not nodeselection.node_matches(NODE, "", False, None)


@pytest.mark.parametrize(
    "name,pod_spec,node_spec,labels,problem",
    [
        ("fits", {}, {}, {}, None),
        ("cordoned", {}, {"unschedulable": True}, {}, "is unschedulable"),
        (
            "cordoned-tolerated",
            {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]},
            {"unschedulable": True},
            {},
            None,
        ),
        ("other-node-name", {"nodeName": "node-2"}, {}, {}, "nodeName is node-2"),
        ("taint", {}, {"taints": [{"key": "t", "effect": "NoSchedule"}]}, {}, "has the taint t:NoSchedule"),
        ("prefer-taint-ignored", {}, {"taints": [{"key": "t", "effect": "PreferNoSchedule"}]}, {}, None),
        ("node-selector", {"nodeSelector": {"zone": "a"}}, {}, {"zone": "b"}, "nodeSelector zone=a"),
        (
            "affinity",
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [term({"key": "zone", "operator": "In", "values": ["a"]})]
                        }
                    }
                }
            },
            {},
            {"zone": "b"},
            "required node affinity",
        ),
    ],
)
def test_pod_node_problem(name, pod_spec, node_spec, labels, problem):
    node = {"metadata": {"name": "node-1", "labels": labels}, "spec": node_spec}
    got = nodeselection.pod_node_problem({"spec": pod_spec}, node)
    assert (got is None) if problem is None else (problem in got)


def test_device_reaches_and_slice_node_selection():
    assert nodeselection.device_reaches({"nodeName": "node-1"}, {}, NODE)
    assert nodeselection.device_reaches({"perDeviceNodeSelection": True}, {"allNodes": True}, NODE)
    assert not nodeselection.device_reaches({"perDeviceNodeSelection": True}, {"nodeName": "node-2"}, NODE)
    assert [
        nodeselection.slice_node_selection(s)
        for s in ({"nodeName": "n"}, {"allNodes": True}, {"nodeSelector": {}}, {"perDeviceNodeSelection": True}, {})
    ] == ["node n", "all nodes", "a node selector", "per-device node selection", "no node"]


def test_node_reach_agrees_with_device_reaches_node_by_node():
    """NodeReach answers by name, by the whole list or once per selector what device_reaches
    says Node by Node, in the list's order."""
    nodes = [
        {"metadata": {"name": f"node-{i}", "labels": {"zone": "a" if i % 2 else "b", "rack": str(i)}}} for i in range(5)
    ]
    zone_a = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}
    node_3 = {"key": "metadata.name", "operator": "In", "values": ["node-3"]}
    by_field = {"nodeSelectorTerms": [{"matchFields": [node_3]}]}
    cases = [
        ({"nodeName": "node-2"}, {}),
        ({"nodeName": "node-9"}, {}),  # a Node the Pod may not use, or that does not exist
        ({"allNodes": True}, {}),
        ({"nodeSelector": zone_a}, {}),
        ({"nodeSelector": zone_a}, {"nodeName": "node-0"}),  # the device's own fields count only per device
        ({"nodeSelector": {"nodeSelectorTerms": [{}]}}, {}),  # a term without requirements: nothing
        ({"perDeviceNodeSelection": True}, {"nodeName": "node-4"}),
        ({"perDeviceNodeSelection": True}, {"allNodes": True}),
        ({"perDeviceNodeSelection": True}, {"nodeSelector": by_field}),
        ({"perDeviceNodeSelection": True}, {}),
        ({}, {}),
    ]
    reach = nodeselection.NodeReach(nodes)
    for spec, device in cases:
        want = tuple(n["metadata"]["name"] for n in nodes if nodeselection.device_reaches(spec, device, n))
        assert reach.of(spec, device) == want, (spec, device)
        assert reach.of(spec, device) == want  # the selector's cached answer


# -- devicefit: the first rule that rejects a device --------------------------------------------------

DRIVER = "drv"
CLASS = {"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
NODE1 = {"metadata": {"name": "node-1", "labels": {}}}


def slice_(*devices, node="node-1", driver=DRIVER):
    return {
        "metadata": {"name": "s"},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def req(**exactly):
    return Request.exact({"name": "r", "exactly": {"deviceClassName": "c", **exactly}})


def fit(device, request=None, pool=None, state=None, node="node-1", driver=DRIVER, counters=None, device_class=CLASS):
    s = slice_(device, node=node, driver=driver)
    pool = pool or Pool(driver, "p", slices=[s], counter_sets=counters or {})
    return devicefit.device_fit(
        request or req(),
        device_class,
        pool,
        s,
        device,
        nodeselection.NodeReach([NODE1]),
        state or AllocatedState(),
        None,
    )


@pytest.mark.parametrize(
    "name,kwargs,reason,detail",
    [
        ("fits", {"device": {"name": "d"}}, devicefit.FITS, ""),
        (
            "incomplete-pool",
            {"device": {"name": "d"}, "pool": Pool(DRIVER, "p", incomplete=True)},
            devicefit.POOL,
            "being updated",
        ),
        (
            "incomplete-pool-of-another-class",
            {"device": {"name": "d"}, "driver": "other", "pool": Pool("other", "p", incomplete=True)},
            devicefit.CLASS_SELECTOR,
            'device.driver == "drv"',
        ),
        ("other-node", {"device": {"name": "d"}, "node": "node-2"}, devicefit.NODE, "node-2"),
        (
            "class-selector",
            {"device": {"name": "d"}, "driver": "other"},
            devicefit.CLASS_SELECTOR,
            'device.driver == "drv"',
        ),
        (
            "class-selector-error",
            {
                "device": {"name": "d"},
                "device_class": {
                    "metadata": {"name": "c"},
                    "spec": {"selectors": [{"cel": {"expression": "noSuchVar"}}]},
                },
            },
            devicefit.CLASS_SELECTOR_ERROR,
            "noSuchVar",
        ),
        (
            "request-selector",
            {"device": {"name": "d"}, "request": req(selectors=[{"cel": {"expression": "false"}}])},
            devicefit.REQUEST_SELECTOR,
            "false",
        ),
        (
            "held",
            {"device": {"name": "d"}, "state": AllocatedState(devices={(DRIVER, "p", "d"): ["ns/other"]})},
            devicefit.HELD,
            "",
        ),
        (
            "held-but-admin",
            {
                "device": {"name": "d"},
                "request": req(adminAccess=True),
                "state": AllocatedState(devices={(DRIVER, "p", "d"): ["ns/other"]}),
            },
            devicefit.FITS,
            "",
        ),
        (
            "capacity",
            {
                "device": {"name": "d", "capacity": {"mem": {"value": "1"}}},
                "request": req(capacity={"requests": {"mem": "2"}}),
            },
            devicefit.CAPACITY,
            "mem: needs 2",
        ),
        (
            "counters",
            {
                "device": {"name": "d", "consumesCounters": [{"counterSet": "cs", "counters": {"m": {"value": "4"}}}]},
                "counters": {"cs": {"m": Fraction(2)}},
            },
            devicefit.COUNTERS,
            "counter set cs m: needs 4, 2 left",
        ),
        (
            "tainted",
            {"device": {"name": "d", "taints": [{"key": "k", "effect": "NoSchedule"}]}},
            devicefit.TAINTED,
            "k:NoSchedule",
        ),
        (
            "tainted-tolerated",
            {
                "device": {"name": "d", "taints": [{"key": "k", "effect": "NoSchedule"}]},
                "request": req(tolerations=[{"key": "k", "operator": "Exists"}]),
            },
            devicefit.FITS,
            "",
        ),
    ],
)
def test_device_fit(name, kwargs, reason, detail):
    got = fit(**kwargs)
    assert got.reason == reason, got
    assert detail in got.detail
    assert got.stage == devicefit.ORDER.index(reason)


def test_fit_sentences_count_devices():
    one = devicefit.Fit((DRIVER, "p", "d"), ("node-1",), devicefit.TAINTED, "k:NoSchedule")
    assert one.name == "drv/p/d"
    assert one.sentence() == "1 is tainted k:NoSchedule"
    assert one.sentence(3) == "3 are tainted k:NoSchedule"
    held = fit({"name": "d"}, state=AllocatedState(devices={(DRIVER, "p", "d"): [f"ns/c{i}" for i in range(5)]}))
    assert held.note == "ns/c0, ns/c1, ns/c2 and 2 more"
