"""The 1.37 allocator features explain does not model: each field that brings one in makes the
verdict "unknown", naming the feature and the field; features out of the claims' reach do not
(pure: no cluster)."""

from __future__ import annotations

import copy

from operators.explain import unmodelled
from operators.explain.render import render_claim, render_pod
from operators.explain.story import explain_claim

from .test_explain import D, claim, device, device_class, node_slice, partitioned, pod, report, world

DERIVED = [{"name": "derived/numa", "expression": f'device.attributes["{D}"].numa'}]
MATCH_DERIVED = [{"matchAttribute": "derived/numa"}]


def features(r):
    return [(f["feature"], f["featureGate"], f["field"]) for f in r["verdict"].get("notModelled") or []]


def test_derived_attributes_in_a_request():
    r = report(
        world([node_slice("n1", [device("gpu-0")])], [claim(derivedAttributes=DERIVED, constraints=MATCH_DERIVED)])
    )
    assert r["verdict"]["allocatable"] is None
    assert features(r) == [
        (
            "derived attributes",
            "DRADerivedAttributes",
            "ResourceClaim c: spec.devices.requests[0].exactly.derivedAttributes",
        )
    ]
    assert r["verdict"]["summary"].startswith(
        "not modelled: derived attributes (ResourceClaim c: spec.devices.requests[0].exactly.derivedAttributes)"
    )
    assert "unknown to explain" in r["verdict"]["summary"]
    text = render_pod(r)
    assert "Verdict: UNKNOWN: not modelled: derived attributes" in text
    assert "feature gate DRADerivedAttributes" in text


def test_derived_attributes_in_a_subrequest():
    requests = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "big", "deviceClassName": "gpu"},
                {"name": "small", "deviceClassName": "gpu", "derivedAttributes": DERIVED},
            ],
        }
    ]
    r = report(world([node_slice("n1", [device("gpu-0")])], [claim(requests=requests, constraints=MATCH_DERIVED)]))
    assert features(r) == [
        (
            "derived attributes",
            "DRADerivedAttributes",
            "ResourceClaim c: spec.devices.requests[0].firstAvailable[1].derivedAttributes",
        )
    ]


def with_groups(slices, *groups):
    slices = copy.deepcopy(slices)
    for d, g in zip(slices[1]["spec"]["devices"], groups, strict=False):
        if g:
            d["consumesCounters"][0]["compatibilityGroups"] = g
    return slices


def test_compatibility_groups_on_a_device_of_the_pool():
    # Groups on one partition only: the whole pool's co-allocation changes (a device without
    # groups is no longer co-allocatable with it), so the verdict is unknown for any of them.
    r = report(world(with_groups(partitioned(), None, None, ["a"]), [claim()]))
    assert r["verdict"]["allocatable"] is None
    assert features(r) == [
        (
            "compatibility groups",
            "DRADeviceCompatibilityGroups",
            "ResourceSlice n1-devices: device part-1 consumesCounters[0].compatibilityGroups",
        )
    ]
    # Without groups (or with an empty list, which means none) the model answers.
    assert report(world(partitioned(), [claim()]))["verdict"]["allocatable"] is True
    assert report(world(with_groups(partitioned(), [], [], []), [claim()]))["verdict"]["allocatable"] is True


def test_list_type_attributes_on_a_candidate_pool():
    for kind, values in (("strings", ["a", "b"]), ("ints", [1, 2]), ("bools", [True]), ("versions", ["1.0.0"])):
        gpu = device("gpu-0")
        gpu["attributes"]["models"] = {kind: values}
        r = report(world([node_slice("n1", [gpu])], [claim()]))
        assert r["verdict"]["allocatable"] is None, kind
        assert features(r) == [
            (
                "list-type attributes",
                "DRAListTypeAttributes",
                "ResourceSlice n1-gpus-1: device gpu-0 attributes[models]",
            )
        ]


def test_node_allocatable_resources_on_a_candidate_pool():
    gpu = device("gpu-0", nodeAllocatableResources={"memory": {"overhead": {"perPod": "1Gi"}}})
    r = report(world([node_slice("n1", [gpu, device("gpu-1")])], [claim()]))
    assert r["verdict"]["allocatable"] is None
    assert features(r) == [
        (
            "node-allocatable resources",
            "DRANodeAllocatableResources",
            "ResourceSlice n1-gpus-1: device gpu-0 nodeAllocatableResources",
        )
    ]


def other_driver_slice(**extra):
    other = device("nic-0", **extra)
    body = node_slice("n2", [other], name="nics")
    body["spec"]["driver"] = "nic.example.com"
    return body


def test_device_features_out_of_the_claims_reach_leave_the_model_to_answer():
    listed = device("nic-0")
    listed["attributes"]["models"] = {"strings": ["x"]}
    nics = other_driver_slice(nodeAllocatableResources={"cpu": {"mapping": {"deviceMultiplier": "1"}}})
    nics["spec"]["devices"][0]["attributes"]["models"] = {"strings": ["x"]}
    r = report(world([node_slice("n1", [device("gpu-0")]), nics], [claim()]))
    assert r["verdict"]["allocatable"] is True and not features(r)


def test_a_list_type_attribute_named_by_a_selector_counts_even_out_of_reach():
    # The class selects gpu.example.com devices only, but the request's selector asks for the
    # name that the other driver publishes as a list: this model cannot tell what CEL makes of it.
    nics = other_driver_slice()
    nics["spec"]["devices"][0]["attributes"]["models"] = {"strings": ["x"]}
    selectors = [{"cel": {"expression": f'!("models" in device.attributes["{D}"])'}}]
    r = report(world([node_slice("n1", [device("gpu-0")]), nics], [claim(selectors=selectors)]))
    assert [f[0] for f in features(r)] == ["list-type attributes"]


def test_a_selector_error_keeps_the_pool_in_reach():
    gpu = device("gpu-0", nodeAllocatableResources={"memory": {"overhead": {"perPod": "1Gi"}}})
    classes = [device_class(extra=f'device.attributes["{D}"].missing == "x"')]
    r = report(world([node_slice("n1", [gpu])], [claim()], classes=classes))
    assert r["verdict"]["allocatable"] is None


def test_node_filters_still_decide_first():
    r = report(
        world([node_slice("n1", [device("gpu-0")])], [claim(derivedAttributes=DERIVED, constraints=MATCH_DERIVED)]),
        pod(nodeSelector={"no": "such"}),
    )
    assert r["verdict"]["allocatable"] is False


def test_explain_claim_alone_names_the_feature():
    c = claim(derivedAttributes=DERIVED, constraints=MATCH_DERIVED)
    r = explain_claim(world([node_slice("n1", [device("gpu-0")])], [c]), c)
    assert r["claim"]["verdict"]["allocatable"] is None
    assert "not modelled: derived attributes" in r["claim"]["summary"]
    assert "Verdict: UNKNOWN" in render_claim(r)


def test_each_use_once_and_the_summary_bounded():
    gpus = [device(f"gpu-{i}") for i in range(5)]
    for g in gpus:
        g["attributes"]["models"] = {"strings": ["a"]}
    found = unmodelled.features([claim(), claim("d")], {"gpu": device_class()}, [node_slice("n1", gpus)])
    assert len(found) == 5
    assert unmodelled.summary(found).count("not modelled:") == 3 and "and 2 more" in unmodelled.summary(found)


def test_cel_leaves_list_type_attributes_out():
    from operators.core.dra import cel

    gpu = device("gpu-0")
    gpu["attributes"]["models"] = {"strings": ["a"]}
    assert cel.matches(f'device.attributes["{D}"].model == "a"', D, gpu)
    assert not cel.matches(f'"models" in device.attributes["{D}"]', D, gpu)


def test_kubectl_outcome_unknown_is_neither_yes_nor_no():
    from operators.kubectl import _outcome

    c = claim(derivedAttributes=DERIVED, constraints=MATCH_DERIVED)
    assert _outcome(report(world([node_slice("n1", [device("gpu-0")])], [c]))) is None
    assert _outcome(explain_claim(world([node_slice("n1", [device("gpu-0")])], [c]), c)) is None
    assert _outcome(report(world([node_slice("n1", [device("gpu-0")])], [claim()]))) is True
