"""``explain`` case by case: each reason a claim can be in, each rule that rejects a device,
named in the report (pure: no cluster)."""

from __future__ import annotations

import copy

import pytest

from operators.core.dra.allocator import AllocationError, allocate
from operators.core.dra.pools import allocated_state
from operators.explain.render import render_claim, render_pod
from operators.explain.story import World, explain_claim, explain_pod

D = "gpu.example.com"


def device(name, model="a", memory="16Gi", **extra):
    return {
        "name": name,
        "attributes": {
            "model": {"string": model},
            "numa": {"int": int(name[-1]) % 2},
            "uuid": {"string": f"GPU-{name}"},
        },
        "capacity": {"memory": {"value": memory}},
        **extra,
    }


def node_slice(node, devices, pool=None, count=1, generation=1, name=None, **spec):
    body = {
        "driver": D,
        "nodeName": node,
        "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
        **spec,
    }
    if devices is not None:
        body["devices"] = devices
    return {"metadata": {"name": name or f"{node}-{pool or 'gpus'}-{generation}"}, "spec": body}


def device_class(name="gpu", extra=None):
    expression = f'device.driver == "{D}"' + (f" && {extra}" if extra else "")
    return {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def claim(name="c", requests=None, ns="ns", status=None, constraints=None, **exactly):
    requests = requests or [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1, **exactly}}]
    devices = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"devices": devices}, "status": status or {}}


def held(name, *devices, ns="other", **result):
    return claim(
        name,
        ns=ns,
        status={
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": D, "pool": "n1", "device": d, **result} for d in devices]
                }
            }
        },
    )


def pod(claims=("c",), ns="ns", name="p", **spec):
    return {
        "metadata": {"name": name, "namespace": ns, "uid": "u1"},
        "spec": {
            "resourceClaims": [{"name": c, "resourceClaimName": c} if isinstance(c, str) else c for c in claims],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def node(name, labels=None, taints=None):
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints} if taints else {},
    }


def world(slices, claims, classes=None, nodes=None, **more):
    return World(
        claims=claims,
        classes=[device_class()] if classes is None else classes,
        slices=slices,
        nodes=nodes or [node("n1"), node("n2")],
        **more,
    )


def report(w, p=None):
    p = p or pod()
    w.pods.append(p)
    return explain_pod(w, p)


def reasons(r, claim_index=0, request=0, alternative=0):
    a = r["claims"][claim_index]["requests"][request]["alternatives"][alternative]
    return {x["reason"]: x for x in a["reasons"]}, a


# -- claims that are not there yet ----------------------------------------------------------


def test_template_missing_with_the_event():
    p = pod([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}])
    event = {
        "metadata": {"namespace": "ns"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "type": "Warning",
        "reason": "FailedResourceClaimCreation",
        "message": 'resource claim template "tmpl" not found',
    }
    r = report(world([], [], events=[event]), p)
    [story] = r["claims"]
    assert story["state"] == "template-missing" and "tmpl does not exist" in story["summary"]
    assert story["events"][0]["reason"] == "FailedResourceClaimCreation"
    assert r["verdict"]["allocatable"] is False and "template-missing" in r["verdict"]["summary"]


def test_claim_not_created_asks_about_the_claims_controller():
    p = pod([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}])
    template = {"metadata": {"name": "tmpl", "namespace": "ns"}, "spec": {"spec": {"devices": {"requests": []}}}}
    r = report(world([], [], templates=[template]), p)
    assert r["claims"][0]["state"] == "not-created"
    assert "claims controller running" in r["claims"][0]["summary"]


def test_template_with_admin_access_in_an_unlabelled_namespace():
    p = pod([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}])
    template = {
        "metadata": {"name": "tmpl", "namespace": "ns"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "adminAccess": True}}]}
            }
        },
    }
    r = report(world([], [], templates=[template], namespaces=[{"metadata": {"name": "ns"}}]), p)
    assert "resource.kubernetes.io/admin-access=true" in r["claims"][0]["summary"]


def test_claim_missing():
    r = report(world([], []))
    assert r["claims"][0]["state"] == "claim-missing" and "ResourceClaim c does not exist" in r["claims"][0]["summary"]


# -- allocated, binding ---------------------------------------------------------------------


def test_allocated_names_device_subrequest_and_time():
    c = claim(
        requests=[
            {
                "name": "gpu",
                "firstAvailable": [
                    {"name": "big", "deviceClassName": "gpu"},
                    {"name": "small", "deviceClassName": "gpu"},
                ],
            }
        ],
        status={
            "allocation": {
                "allocationTimestamp": "2026-11-23T10:00:00Z",
                "devices": {"results": [{"request": "gpu/small", "driver": D, "pool": "n1", "device": "gpu-1"}]},
            },
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
        },
    )
    r = report(world([node_slice("n1", [device("gpu-1")])], [c]))
    [story] = r["claims"]
    assert story["state"] == "reserved"
    assert story["summary"] == f"allocated {D}/n1/gpu-1 (subrequest gpu/small won) at 2026-11-23T10:00:00Z"
    assert r["verdict"]["allocatable"] is True


def test_binding_conditions_pending_and_failed():
    result = {
        "request": "gpu",
        "driver": D,
        "pool": "n1",
        "device": "gpu-0",
        "bindingConditions": ["Attached"],
        "bindingFailureConditions": ["AttachFailed"],
    }
    status = {
        "allocation": {"allocationTimestamp": "2026-11-23T10:00:00Z", "devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
        "devices": [
            {
                "driver": D,
                "pool": "n1",
                "device": "gpu-0",
                "conditions": [{"type": "Attached", "status": "False", "message": "fabric busy"}],
            }
        ],
    }
    c = claim(status=status)
    r = report(world([node_slice("n1", [device("gpu-0")])], [c]))
    story = r["claims"][0]
    assert story["state"] == "binding"
    assert (
        "waits for binding conditions: Attached on gpu.example.com/n1/gpu-0 (since 2026-11-23T10:00:00Z)"
        in story["summary"]
    )
    failed = copy.deepcopy(c)
    failed["status"]["devices"][0]["conditions"].append(
        {"type": "AttachFailed", "status": "True", "message": "no link"}
    )
    story = report(world([node_slice("n1", [device("gpu-0")])], [failed]))["claims"][0]
    assert (
        story["state"] == "binding-failed" and "AttachFailed on gpu.example.com/n1/gpu-0: no link" in story["summary"]
    )


# -- not allocated: the rules, one by one ---------------------------------------------------


def test_counts_by_reason_class_selector_held_and_tainted():
    devices = [device(f"gpu-{i}", model="b") for i in range(8)]
    devices += [
        device("gpu-8"),
        device("gpu-9"),
        device("gpu-10"),
        device("gpu-11", taints=[{"key": "xid", "value": "79", "effect": "NoSchedule"}]),
    ]
    cls = device_class("gpu", f'device.attributes["{D}"].model == "a"')
    w = world([node_slice("n1", devices)], [claim(), held("h1", "gpu-8", "gpu-9"), held("h2", "gpu-10")], [cls])
    r = report(w)
    found, a = reasons(r)
    assert a["summary"].startswith("wants 1 device of class gpu; 12 devices: 0 fit, 8 fail the class selector")
    assert found["held"]["devices"] == 3 and found["tainted"]["detail"] == "xid=79:NoSchedule"
    assert found["class-selector"]["devices"] == 8
    assert r["verdict"]["allocatable"] is False
    assert [c["reason"] for c in a["closest"]] == ["tainted", "held", "held"]
    assert "1 is tainted xid=79:NoSchedule" in render_pod(r)


def test_tolerated_taint_and_effect_none_fit():
    devices = [
        device("gpu-0", taints=[{"key": "xid", "value": "79", "effect": "NoSchedule"}]),
        device("gpu-1", taints=[{"key": "note", "effect": "None"}]),
    ]
    r = report(world([node_slice("n1", devices)], [claim(count=2, tolerations=[{"key": "xid", "operator": "Exists"}])]))
    assert r["verdict"]["allocatable"] is True


def test_class_selector_runtime_error_is_an_error_with_the_expression():
    cls = device_class("gpu", f'device.attributes["{D}"].nosuch == "x"')
    r = report(world([node_slice("n1", [device("gpu-0")])], [claim()], [cls]))
    found, _ = reasons(r)
    assert "class-selector-error" in found
    assert "nosuch" in found["class-selector-error"]["detail"]
    assert r["verdict"]["allocatable"] is False and "stops with an error" in r["verdict"]["summary"]
    assert "CEL runtime error" in r["verdict"]["error"]


def test_request_selector_false_and_error():
    r = report(
        world(
            [node_slice("n1", [device("gpu-0"), device("gpu-1", model="b")])],
            [claim(selectors=[{"cel": {"expression": f'device.attributes["{D}"].model == "c"'}}])],
        )
    )
    found, _ = reasons(r)
    assert found["request-selector"]["devices"] == 2 and r["verdict"]["allocatable"] is False
    r = report(
        world(
            [node_slice("n1", [device("gpu-0")])],
            [claim(selectors=[{"cel": {"expression": f'device.attributes["{D}"].missing > 1'}}])],
        )
    )
    found, _ = reasons(r)
    assert "request-selector-error" in found and r["verdict"]["error"]


def test_node_filters_rule_out_the_only_node_with_devices():
    slices = [node_slice("n1", [device("gpu-0")])]
    r = report(
        world(slices, [claim()], nodes=[node("n1", taints=[{"key": "maint", "effect": "NoSchedule"}]), node("n2")])
    )
    found, _ = reasons(r)
    assert found["node"]["devices"] == 1
    assert r["nodes"]["rejected"]["n1"] == "node n1 has the taint maint:NoSchedule that the Pod does not tolerate"
    assert r["verdict"]["allocatable"] is False
    # tolerated, or by node selector / affinity
    tolerant = pod(tolerations=[{"key": "maint", "operator": "Exists"}])
    assert (
        report(
            world(slices, [claim()], nodes=[node("n1", taints=[{"key": "maint", "effect": "NoSchedule"}])]), tolerant
        )["verdict"]["allocatable"]
        is True
    )
    assert (
        report(
            world(slices, [claim()], nodes=[node("n1", {"zone": "a"}), node("n2", {"zone": "b"})]),
            pod(nodeSelector={"zone": "b"}),
        )["verdict"]["allocatable"]
        is False
    )
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
            }
        }
    }
    assert (
        report(
            world(slices, [claim()], nodes=[node("n1", {"zone": "a"}), node("n2", {"zone": "b"})]),
            pod(affinity=affinity),
        )["verdict"]["allocatable"]
        is True
    )


def test_node_selector_slices_and_per_device_selection():
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}
    network = {
        "metadata": {"name": "net"},
        "spec": {
            "driver": D,
            "nodeSelector": selector,
            "pool": {"name": "net", "generation": 1, "resourceSliceCount": 1},
            "devices": [device("net-0")],
        },
    }
    nodes = [node("n1", {"rack": "r0"}), node("n2", {"rack": "r1"})]
    r = report(world([network], [claim()], nodes=nodes), pod(nodeSelector={"rack": "r0"}))
    assert reasons(r)[0]["node"]["devices"] == 1 and r["verdict"]["allocatable"] is False
    per_device = {
        "metadata": {"name": "pd"},
        "spec": {
            "driver": D,
            "perDeviceNodeSelection": True,
            "pool": {"name": "pd", "generation": 1, "resourceSliceCount": 1},
            "devices": [device("pd-0", nodeName="n2")],
        },
    }
    assert report(world([per_device], [claim()], nodes=nodes), pod(nodeSelector={"rack": "r1"}))["verdict"][
        "allocatable"
    ]
    assert not report(world([per_device], [claim()], nodes=nodes), pod(nodeSelector={"rack": "r0"}))["verdict"][
        "allocatable"
    ]


def partitioned():
    def consumes(amount):
        return [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]

    counters = node_slice(
        "n1",
        None,
        count=2,
        name="n1-counters",
        sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}],
    )
    devices = node_slice(
        "n1",
        [
            device("gpu-0", memory="80Gi", consumesCounters=consumes("80Gi")),
            device("part-0", memory="40Gi", consumesCounters=consumes("40Gi")),
            device("part-1", memory="40Gi", consumesCounters=consumes("40Gi")),
        ],
        count=2,
        name="n1-devices",
    )
    return [counters, devices]


def test_shared_counters_used_up_by_a_partition():
    r = report(
        world(
            partitioned(),
            [
                claim(
                    selectors=[
                        {"cel": {"expression": f'device.capacity["{D}"].memory.compareTo(quantity("80Gi")) == 0'}}
                    ]
                ),
                held("h", "part-0"),
            ],
        )
    )
    found, _ = reasons(r)
    assert found["counters"]["detail"] == "counter set gpu-0-counters memory: needs 80Gi, 40Gi left"
    assert r["verdict"]["allocatable"] is False
    # two halves fit together, three do not
    assert report(
        world(
            partitioned(),
            [
                claim(
                    count=2,
                    selectors=[
                        {"cel": {"expression": f'device.capacity["{D}"].memory.compareTo(quantity("40Gi")) == 0'}}
                    ],
                )
            ],
        )
    )["verdict"]["allocatable"]
    assert not report(world(partitioned(), [claim(count=3)]))["verdict"]["allocatable"]


def shared_device(policy=None):
    memory = {"value": "48Gi"}
    if policy:
        memory["requestPolicy"] = policy
    return node_slice("n1", [{"name": "shared-0", "allowMultipleAllocations": True, "capacity": {"memory": memory}}])


def test_consumable_capacity_left_and_request_policy():
    share = {"shareID": "5c0e9d1e-0000-4000-8000-000000000001", "consumedCapacity": {"memory": "40Gi"}}
    r = report(
        world([shared_device()], [claim(capacity={"requests": {"memory": "16Gi"}}), held("h", "shared-0", **share)])
    )
    found, _ = reasons(r)
    assert found["capacity"]["detail"] == "memory: needs 16Gi, 8Gi of 48Gi left"
    assert r["verdict"]["allocatable"] is False
    assert report(
        world([shared_device()], [claim(capacity={"requests": {"memory": "8Gi"}}), held("h", "shared-0", **share)])
    )["verdict"]["allocatable"]
    policy = {"default": "4Gi", "validRange": {"min": "2Gi", "max": "20Gi", "step": "2Gi"}}
    r = report(world([shared_device(policy)], [claim(capacity={"requests": {"memory": "30Gi"}})]))
    assert reasons(r)[0]["capacity"]["detail"] == "memory 30Gi is more than the maximum 20Gi"
    r = report(world([shared_device(policy)], [claim(capacity={"requests": {"memory": "3Gi"}})]))  # rounded up to 4Gi
    assert r["verdict"]["allocatable"] is True
    r = report(world([shared_device()], [claim(capacity={"requests": {"cores": "1"}})]))
    assert reasons(r)[0]["capacity"]["detail"] == "has no capacity 'cores'"


def test_admin_access_uses_held_devices():
    w = world([node_slice("n1", [device("gpu-0")])], [claim(adminAccess=True), held("h", "gpu-0")])
    assert report(w)["verdict"]["allocatable"] is True
    w = world([node_slice("n1", [device("gpu-0")])], [claim(), held("h", "gpu-0")])
    assert report(w)["verdict"]["allocatable"] is False
    # an admin-access allocation holds nothing
    w = world([node_slice("n1", [device("gpu-0")])], [claim(), held("h", "gpu-0", adminAccess=True)])
    assert report(w)["verdict"]["allocatable"] is True


def test_allocation_mode_all_and_a_pool_being_updated():
    slices = [
        node_slice("n1", [device("gpu-0"), device("gpu-1")]),
        node_slice("n1", [device("upd-0")], pool="upd", count=2),
    ]
    r = report(world(slices, [claim(allocationMode="All")]))
    assert r["verdict"]["allocatable"] is False and "being updated" in r["verdict"]["error"]
    assert reasons(r)[0]["pool"]["devices"] == 1
    assert report(world(slices[:1], [claim(allocationMode="All")]))["verdict"]["allocatable"] is True
    assert not report(world(slices[:1], [claim(allocationMode="All"), held("h", "gpu-1")]))["verdict"]["allocatable"]


def test_constraints_match_and_distinct_attribute():
    devices = [device("gpu-0"), device("gpu-1"), device("gpu-3")]  # numa 0, 1, 1
    match = [{"matchAttribute": f"{D}/numa"}]
    assert report(world([node_slice("n1", devices)], [claim(count=2, constraints=match)]))["verdict"]["allocatable"]
    r = report(world([node_slice("n1", devices)], [claim(count=3, constraints=match)]))
    assert r["verdict"]["allocatable"] is False
    assert r["claims"][0]["constraints"] == [f"matchAttribute {D}/numa: fitting devices have 1: 2, 0: 1"]
    distinct = [{"distinctAttribute": f"{D}/numa"}]
    assert report(world([node_slice("n1", devices)], [claim(count=2, constraints=distinct)]))["verdict"]["allocatable"]
    assert not report(world([node_slice("n1", devices)], [claim(count=3, constraints=distinct)]))["verdict"][
        "allocatable"
    ]


def test_prioritized_list_falls_through_to_a_fitting_subrequest():
    requests = [
        {
            "name": "gpu",
            "firstAvailable": [
                {
                    "name": "big",
                    "deviceClassName": "gpu",
                    "selectors": [{"cel": {"expression": f'device.attributes["{D}"].model == "z"'}}],
                },
                {"name": "any", "deviceClassName": "gpu"},
            ],
        }
    ]
    r = report(world([node_slice("n1", [device("gpu-0")])], [claim(requests=requests)]))
    request = r["claims"][0]["requests"][0]
    assert [a["enough"] for a in request["alternatives"]] == [False, True]
    assert request["verdict"] == "enough devices fit" and r["verdict"]["allocatable"] is True
    assert "first available of 2" in render_pod(r)


def test_missing_class_and_pod_with_node_name():
    r = report(world([node_slice("n1", [device("gpu-0")])], [claim()], classes=[]))
    assert r["verdict"]["summary"] == "request gpu of claim c: device class gpu does not exist"
    r = report(world([node_slice("n1", [device("gpu-0")])], [claim()]), pod(nodeName="n1"))
    assert "without the scheduler" in r["verdict"]["summary"]
    done = claim(
        status={
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": D, "pool": "n1", "device": "gpu-0"}]}}
        }
    )
    r = report(world([node_slice("n1", [device("gpu-0")])], [done]), pod(nodeName="n1"))
    assert r["verdict"] == {"allocatable": True, "summary": "on node n1, every claim allocated"}


def test_newest_pool_generation_only():
    slices = [node_slice("n1", [device("gpu-0")], generation=1), node_slice("n1", [device("gpu-1")], generation=2)]
    found, a = reasons(report(world(slices, [claim()])))
    assert a["fit"] == [f"{D}/n1/gpu-1"] and a["devices"] == 1


def test_explain_claim_alone():
    w = world([node_slice("n1", [device("gpu-0")])], [claim(count=2)])
    r = explain_claim(w, w.claims[0])
    assert r["claim"]["verdict"]["allocatable"] is False
    assert "wants 2 devices of class gpu; 1 devices: 1 fit" in render_claim(r)


def test_allocator_raises_what_the_scheduler_aborts_on():
    cls = {"gpu": device_class("gpu", f'device.attributes["{D}"].nosuch == 1')}
    n1 = node("n1")
    with pytest.raises(AllocationError, match="CEL runtime error"):
        allocate(n1, [claim()], [node_slice("n1", [device("gpu-0")])], cls, allocated_state([]))
    # a constraint that cannot hold for all devices of allocationMode All
    c = claim(allocationMode="All", constraints=[{"matchAttribute": f"{D}/numa"}])
    with pytest.raises(AllocationError, match="constraint"):
        allocate(
            n1,
            [c],
            [node_slice("n1", [device("gpu-0"), device("gpu-1")])],
            {"gpu": device_class()},
            allocated_state([]),
        )
