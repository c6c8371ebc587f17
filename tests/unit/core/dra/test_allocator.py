"""operators.core.dra.allocator against upstream's structured allocator cases, as data.

Each row ports one case of k8s.io/dynamic-resource-allocation v0.37.1
structured/internal/allocatortesting/allocator_testing.go (``TestAllocator``), with its name;
the builders below mirror upstream's (``claimWithRequest``, ``sliceWithOneDevice``, ``device``,
``class``, ...) so that a row reads as the Go case does. Compared: the devices each claim gets
(request, driver, pool, device; admin access; for a share of a shared device, the capacity it
consumes), order ignored as upstream's ``ConsistOf``; None where upstream expects no result; the
error's text where upstream expects an error, except "invalid resource pools were encountered"
(ErrFailedAllocationOnNode, which the scheduler takes as unschedulable): None. Node selectors
and configs of the result are not modelled (``allocate`` returns device results).

Skipped, as the allocator does not model them (see its docstring): compatibility-groups-*,
derived-attributes-*, list-attributes-*, numanode-*, *-device-config / *-class-config /
claim-config-* (configs), binding-conditions / *-with-binding-conditions-* (node selector of the
result), optional-node-operations (the result's skipNodeOperations), node-restriction,
multi-host-resource-pool-* (result node selectors), the feature-gate-off variants (*-disabled,
*-without-feature-gate: every feature is on here), consumable-capacity-fractional-*,
*-overflow*, *-above-int64-* and exact-count-* (int64 limits of Go quantities),
expectNumAllocateOneInvocations (the number of search steps). Every partitionable-*,
consumable-capacity-*, distinct-constraint-* and with-distinct-constraints-* row in scope is
ported.
"""

from __future__ import annotations

import copy

import pytest

from operators.core.dra.allocator import AllocationError, allocate
from operators.core.dra.pools import AllocatedState
from operators.core.dra.quantity import parse_quantity

REGION1, REGION2 = "region-1", "region-2"
NODE1, NODE2 = "node-1", "node-2"
CLASS_A, CLASS_B = "class-a", "class-b"
DRIVER_A, DRIVER_B = "driver-a", "driver-b"
POOL1, POOL2, POOL3 = "pool-1", "pool-2", "pool-3"
REQ0, REQ1, REQ2, REQ3 = "req-0", "req-1", "req-2", "req-3"
SUB0, SUB1 = "subReq-0", "subReq-1"
CLAIM0, CLAIM1 = "claim-0", "claim-1"
SLICE1, SLICE2, SLICE3, SLICE4 = "slice-1", "slice-2", "slice-3", "slice-4"
CS1, CS2, CAP0 = "counter-set-1", "counter-set-2", "capacity-0"
DEVICE0, DEVICE1, DEVICE2, DEVICE3, DEVICE4 = "device-0", "device-1", "device-2", "device-3", "device-4"
ALL_NODES, PER_DEVICE = "nodeSelectionAll", "nodeSelectionPerDevice"


# -- upstream's builders -------------------------------------------------------------------------


def node(name, region, *, optional_node_operations=False):
    n = {"metadata": {"name": name, "labels": {"region": region, "planet": "earth"}}, "status": {}}
    if optional_node_operations:
        n["status"]["declaredFeatures"] = ["DRAOptionalNodeOperations"]
    return n


def cel(expression):
    return {"cel": {"expression": expression}}


def class_(name, driver):
    return {"metadata": {"name": name}, "spec": {"selectors": [cel(f'device.driver == "{driver}"')]}}


def request(name, class_name, count=1, *selectors, mode="ExactCount", admin=False, tolerations=(), capacity=None):
    exactly = {"deviceClassName": class_name, "allocationMode": mode}
    if mode == "ExactCount":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = list(selectors)
    if admin:
        exactly["adminAccess"] = True
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    if capacity is not None:
        exactly["capacity"] = {"requests": {"capacity-0": capacity}}
    return {"name": name, "exactly": exactly}


def all_request(name, class_name, *selectors, **kw):
    return request(name, class_name, 0, *selectors, mode="All", **kw)


def sub_request(name, class_name, count=1, *selectors, tolerations=(), mode="ExactCount", capacity=None):
    sub = {"name": name, "deviceClassName": class_name, "allocationMode": mode}
    if mode == "ExactCount":
        sub["count"] = count
    if selectors:
        sub["selectors"] = list(selectors)
    if tolerations:
        sub["tolerations"] = list(tolerations)
    if capacity is not None:
        sub["capacity"] = {"requests": {"capacity-0": capacity}}
    return sub


def prioritized(name, *subs):
    return {"name": name, "firstAvailable": list(subs)}


def class_multi(name, driver, multialloc):
    """``classWithAllowMultipleAllocations``."""
    expression = f'device.driver == "{driver}" && device.allowMultipleAllocations == {str(multialloc).lower()}'
    return {"metadata": {"name": name}, "spec": {"selectors": [cel(expression)]}}


def claim(name, *requests, constraints=()):
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": list(requests), "constraints": list(constraints)}},
    }


def claim_with_request(name, req, class_name, *constraints):
    return claim(name, request(req, class_name), constraints=constraints)


def device(name, capacity=None, attributes=None, **extra):
    d = {"name": name}
    if capacity:
        d["capacity"] = {k: v if isinstance(v, dict) else {"value": v} for k, v in capacity.items()}
    if attributes:
        d["attributes"] = attributes
    d.update(extra)
    return d


def tainted(d, *taints):
    d = copy.deepcopy(d)
    d["taints"] = list(taints)
    return d


def slice_(name, node_selection, pool, driver, *devices, count=1, generation=1):
    spec = {
        "driver": driver,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "devices": list(devices),
    }
    if isinstance(node_selection, dict):
        spec["nodeSelector"] = node_selection
    elif node_selection == ALL_NODES:
        spec["allNodes"] = True
    elif node_selection == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = node_selection
    return {"metadata": {"name": name}, "spec": spec}


def slice_with_one_device(name, node_selection, pool, driver, **kw):
    return slice_(name, node_selection, pool, driver, device(DEVICE1), **kw)


def slice_with_devices(name, node_selection, pool, driver, n, **kw):
    return slice_(name, node_selection, pool, driver, *[device(f"device-{i}") for i in range(n)], **kw)


def counter_slice(name, node_selection, pool, driver, *counter_sets, count=1):
    s = slice_(name, node_selection, pool, driver, count=count)
    del s["spec"]["devices"]
    s["spec"]["sharedCounters"] = list(counter_sets)
    return s


def counter_set(name, **counters):
    return {"name": name, "counters": {k: {"value": v} for k, v in counters.items()}}


def consumes(counter_set_name, **counters):
    return {"counterSet": counter_set_name, "counters": {k: {"value": v} for k, v in counters.items()}}


def node_label_selector(key, *values):
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}


def result(req, driver, pool, dev, admin=False):
    r = (req, driver, pool, dev)
    return r + ("admin",) if admin else r


def taint(key, effect, value=None):
    t = {"key": key, "effect": effect}
    if value:
        t["value"] = value
    return t


def attr_int(v):
    return {"int": v}


def attr_str(v):
    return {"string": v}


def attr_bool(v):
    return {"bool": v}


def attr_version(v):
    return {"version": v}


def match(attribute, *requests):
    c = {"matchAttribute": attribute}
    if requests:
        c["requests"] = list(requests)
    return c


def distinct(attribute, *requests):
    c = {"distinctAttribute": attribute}
    if requests:
        c["requests"] = list(requests)
    return c


def memory_at_least(q):
    return cel(f'device.capacity["{DRIVER_A}"].memory.compareTo(quantity("{q}")) >= 0')


def attr_is(name, value):
    return cel(f'device.attributes["{DRIVER_A}"].{name} == "{value}"')


def counter_device(name, *consumptions, from_counters=False, attributes=None, **extra):
    """``device(name, nil or fromCounters, attributes).withDeviceCounterConsumption(...)``: with
    ``fromCounters`` the device's capacity is what it consumes."""
    d = device(name, attributes=attributes, consumesCounters=list(consumptions), **extra)
    if from_counters:
        d["capacity"] = {k: dict(v) for c in consumptions for k, v in c["counters"].items()}
    return d


def range_capacity(value):
    """``withCapacityRequestPolicyRange``: default 2, min 2, step 2, max 4."""
    return {"value": value, "requestPolicy": {"default": "2", "validRange": {"min": "2", "step": "2", "max": "4"}}}


def valid_values_capacity(default, value, *additional):
    """``withCapacityRequestPolicyValidValues``: the default is the first valid value."""
    return {"value": value, "requestPolicy": {"default": default, "validValues": [default, *additional]}}


def multi(d):
    """``withAllowMultipleAllocations``."""
    return dict(copy.deepcopy(d), allowMultipleAllocations=True)


def shared_result(req, driver, pool, dev, consumed=None):
    """``deviceRequestAllocationResult(...).withConsumedCapacity(&fixedShareID, consumed)``."""
    return (
        req,
        driver,
        pool,
        dev,
        "shared",
        tuple(sorted((k, parse_quantity(v)) for k, v in (consumed or {}).items())),
    )


def allocated_state(devices=(), shared=(), capacity=None):
    """``allocatedDevices``, ``allocatedSharedDeviceIDs`` (the share IDs do not matter here) and
    ``allocatedCapacityDevices``."""
    return AllocatedState(
        devices={d: ["default/other"] for d in devices},
        shared={d: ["default/other"] for d in shared},
        capacity={d: {k: parse_quantity(v) for k, v in c.items()} for d, c in (capacity or {}).items()},
    )


# -- the rows --------------------------------------------------------------------------------------

N1 = node(NODE1, REGION1)
CA = {CLASS_A: class_(CLASS_A, DRIVER_A)}
ONE = [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)]
TAINT_NS = taint("taint-key", "NoSchedule", "taint-value")
TAINT_NE = taint("taint-key", "NoExecute", "taint-value")
TOLERATE_NS = {"key": "taint-key", "operator": "Equal", "value": "taint-value", "effect": "NoSchedule"}
TOLERATE_NE = {"key": "taint-key", "operator": "Equal", "value": "taint-value", "effect": "NoExecute"}
SMALL = device(DEVICE1, {"memory": "1Gi"})
LARGE = device(DEVICE2, {"memory": "2Gi"})
ATTR = "driver-a/numa"
STRING_ATTR = "driver-a/stringAttribute"
BOOL_ATTR = "driver-a/boolAttribute"
VERSION_ATTR = "driver-a/driverVersion"
CAB = {**CA, CLASS_B: class_(CLASS_B, DRIVER_B)}
CAM = {CLASS_A: class_multi(CLASS_A, DRIVER_A, True)}

# (upstream name, node, claims, slices, classes, allocated devices, expected per claim | None | error text)
CASES = [
    ("empty", N1, [], [], {}, [], None),
    (
        "simple",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        ONE,
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "optional-node-operations-missing-feature",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [dict(ONE[0], spec=dict(ONE[0]["spec"], skipNodeOperations=["All"]))],
        CA,
        [],
        None,
    ),
    (
        "other-node",
        node(NODE2, REGION2),
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B), slice_with_one_device(SLICE2, NODE2, POOL2, DRIVER_A)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL2, DEVICE1)]],
    ),
    (
        "small-and-large",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("1Gi")),
                request(REQ1, CLASS_A, 1, memory_at_least("2Gi")),
            )
        ],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, SMALL, LARGE)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ1, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "small-and-large-backtrack-requests",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, memory_at_least("1Gi")),
                request(REQ1, CLASS_A, 1, memory_at_least("2Gi")),
            )
        ],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, LARGE, SMALL)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ1, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "small-and-large-backtrack-claims",
        N1,
        [
            claim(CLAIM0, request(REQ0, CLASS_A, 1, memory_at_least("1Gi"))),
            claim(CLAIM1, request(REQ1, CLASS_A, 1, memory_at_least("2Gi"))),
        ],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, LARGE, SMALL)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)], [result(REQ1, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "devices-split-across-different-slices",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 2))],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A), slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_A)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ0, DRIVER_A, POOL2, DEVICE1)]],
    ),
    (
        "obsolete-slice",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [
            slice_("slice-1-obsolete", NODE1, POOL1, DRIVER_A, device(DEVICE1), count=2),
            slice_("slice-1-obsolete", NODE1, POOL1, DRIVER_A, device(DEVICE2), count=2, generation=2),
        ],
        CA,
        [],
        None,
    ),
    ("no-slices", N1, [claim_with_request(CLAIM0, REQ0, CLASS_A)], [], CA, [], None),
    (
        "not-enough-suitable-devices",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A), claim_with_request(CLAIM0, REQ1, CLASS_A)],
        ONE,
        CA,
        [],
        None,
    ),
    (
        "no-classes",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        ONE,
        {},
        [],
        "could not retrieve device class class-a",
    ),
    (
        "unknown-class",
        N1,
        [claim_with_request(CLAIM0, REQ0, "unknown-class")],
        ONE,
        CA,
        [],
        "could not retrieve device class unknown-class",
    ),
    ("no-claims-to-allocate", N1, [], ONE, CA, [], None),
    (
        "all-devices-single",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A))],
        ONE,
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "all-devices-many",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A))],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A), slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ0, DRIVER_A, POOL2, DEVICE1)]],
    ),
    (
        "all-devices-of-the-incomplete-pool",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A))],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A, count=2)],
        CA,
        [],
        "claim default/claim-0, request req-0: asks for all devices, "
        "but resource pool driver-a/pool-1 is currently being updated",
    ),
    (
        "all-devices-plus-another",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_B))],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A), slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        {**CA, CLASS_B: class_(CLASS_B, DRIVER_B)},
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)], [result(REQ0, DRIVER_B, POOL1, DEVICE1)]],
    ),
    (
        "all-devices-no-solution",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, all_request(REQ0, CLASS_A))],
        ONE,
        CA,
        [],
        None,
    ),
    (
        "all-devices-no-solution-reversed",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        ONE,
        CA,
        [],
        None,
    ),
    (
        "all-devices-slice-without-devices",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A)],
        CA,
        [],
        None,
    ),
    ("all-devices-no-slices", N1, [claim(CLAIM0, all_request(REQ0, CLASS_A))], [], CA, [], None),
    (
        "all-devices-some-allocated",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A))],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2)],
        CA,
        [(DRIVER_A, POOL1, DEVICE0)],
        None,
    ),
    (
        "all-devices-some-allocated-admin-access",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, admin=True))],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2)],
        CA,
        [(DRIVER_A, POOL1, DEVICE0)],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE0, admin=True), result(REQ0, DRIVER_A, POOL1, DEVICE1, admin=True)]],
    ),
    (
        "count-devices-some-allocated-admin-access",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 2, admin=True))],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2)],
        CA,
        [(DRIVER_A, POOL1, DEVICE0)],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE0, admin=True), result(REQ0, DRIVER_A, POOL1, DEVICE1, admin=True)]],
    ),
    (
        "network-attached-device",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "unsuccessful-allocation-network-attached-device",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [slice_with_one_device(SLICE1, node_label_selector("region", REGION2), POOL1, DRIVER_A)],
        CA,
        [],
        None,
    ),
    (
        "many-network-attached-devices",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 4))],
        [
            slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A),
            slice_with_one_device(SLICE1, ALL_NODES, POOL2, DRIVER_A),
            slice_with_one_device(SLICE1, node_label_selector("planet", "earth"), POOL3, DRIVER_A),
            slice_with_one_device(SLICE1, NODE1, "pool-4", DRIVER_A),
        ],
        CA,
        [],
        [
            [
                result(REQ0, DRIVER_A, POOL1, DEVICE1),
                result(REQ0, DRIVER_A, POOL2, DEVICE1),
                result(REQ0, DRIVER_A, POOL3, DEVICE1),
                result(REQ0, DRIVER_A, "pool-4", DEVICE1),
            ]
        ],
    ),
    (
        "local-and-network-attached-devices",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 2))],
        [
            slice_with_one_device(SLICE1, node_label_selector("region", REGION1), POOL1, DRIVER_A),
            slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ0, DRIVER_A, POOL2, DEVICE1)]],
    ),
    (
        "several-different-drivers",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A), claim_with_request(CLAIM0, REQ0, CLASS_B)],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A), slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        {**CA, CLASS_B: class_(CLASS_B, DRIVER_B)},
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)], [result(REQ0, DRIVER_B, POOL1, DEVICE1)]],
    ),
    (
        "already-allocated-devices",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        ONE,
        CA,
        [(DRIVER_A, POOL1, DEVICE1)],
        None,
    ),
    (
        "admin-access-enabled",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, admin=True)), claim(CLAIM1, request(REQ0, CLASS_A, admin=True))],
        ONE,
        CA,
        [(DRIVER_A, POOL1, DEVICE1)],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1, admin=True)], [result(REQ0, DRIVER_A, POOL1, DEVICE1, admin=True)]],
    ),
    (
        "with-constraint",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), constraints=[match(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_int(1)}),
                device(DEVICE2, attributes={"numa": attr_int(2)}),
                device(DEVICE3, attributes={"numa": attr_int(1)}),
            )
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ1, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "with-constraint-non-existent-attribute",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), constraints=[match("missing-attribute")])],
        ONE,
        CA,
        [],
        None,
    ),
    (
        "with-constraint-not-matching-int-attribute",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), constraints=[match(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_int(1)}),
                device(DEVICE2, attributes={"numa": attr_int(2)}),
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "with-constraint-not-matching-string-attribute",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), constraints=[match(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_str("a")}),
                device(DEVICE2, attributes={"numa": attr_str("b")}),
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "with-constraint-not-matching-bool-attribute",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), constraints=[match(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_bool(True)}),
                device(DEVICE2, attributes={"numa": attr_bool(False)}),
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "with-constraint-not-matching-version-attribute",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), constraints=[match(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_version("1.0.0")}),
                device(DEVICE2, attributes={"numa": attr_version("2.0.0")}),
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "with-constraint-for-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A), constraints=[match(ATTR, REQ0)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_int(1)}),
                device(DEVICE2, attributes={"numa": attr_int(2)}),
            )
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ1, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "with-distinct-constraints",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                request(REQ1, CLASS_A),
                request(REQ2, CLASS_A),
                request(REQ3, CLASS_A),
                constraints=[
                    distinct(BOOL_ATTR, REQ0, REQ1),
                    distinct(VERSION_ATTR, REQ0, REQ1, REQ2),
                    distinct(ATTR, REQ0, REQ1, REQ2, REQ3),
                ],
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                *[
                    multi(
                        device(
                            d,
                            attributes={
                                "driverVersion": attr_version(version),
                                "numa": attr_int(numa),
                                "boolAttribute": attr_bool(flag),
                            },
                        )
                    )
                    for d, version, numa, flag in (
                        (DEVICE1, "1.0.0", 0, True),
                        (DEVICE2, "1.0.1", 1, False),
                        (DEVICE3, "1.0.2", 2, True),
                        (DEVICE4, "1.0.0", 3, True),
                    )
                ],
            )
        ],
        CA,
        [],
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1),
                shared_result(REQ1, DRIVER_A, POOL1, DEVICE2),
                shared_result(REQ2, DRIVER_A, POOL1, DEVICE3),
                shared_result(REQ3, DRIVER_A, POOL1, DEVICE4),
            ]
        ],
    ),
    (
        "with-distinct-constraints-attribute-not-set",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), constraints=[distinct(BOOL_ATTR, REQ0)])],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1)))],
        CA,
        [],
        None,
    ),
    (
        "with-distinct-constraints-unknown-type-attribute",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), constraints=[distinct(BOOL_ATTR, REQ0)])],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, attributes={"boolAttribute": {}})))],
        CA,
        [],
        "unsupported attribute value",
    ),
    (
        "with-distinct-constraints-with-subrequests",
        N1,
        [
            claim(
                CLAIM0,
                *[
                    prioritized(
                        r,
                        sub_request(SUB0, CLASS_A, 1, cel(f'device.attributes["{DRIVER_A}"].boolAttribute')),
                        sub_request(SUB1, CLASS_A),
                    )
                    for r in (REQ0, REQ1, REQ2)
                ],
                constraints=[distinct(BOOL_ATTR, REQ0, REQ1)],
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(device(DEVICE1, attributes={"boolAttribute": attr_bool(True)})),
                multi(device(DEVICE2, attributes={"boolAttribute": attr_bool(False)})),
            )
        ],
        CA,
        [],
        [
            [
                shared_result("req-0/subReq-0", DRIVER_A, POOL1, DEVICE1),
                shared_result("req-1/subReq-1", DRIVER_A, POOL1, DEVICE2),
                shared_result("req-2/subReq-0", DRIVER_A, POOL1, DEVICE1),
            ]
        ],
    ),
    (
        "unknown-allocation-mode",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, mode="future-mode"))],
        ONE,
        CA,
        [],
        "claim default/claim-0, request req-0: unsupported count mode future-mode",
    ),
    (
        "invalid-CEL-one-device",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 1, cel("noSuchVar")))],
        ONE,
        CA,
        [],
        "undeclared reference",
    ),
    (
        "invalid-CEL-one-device-class",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        ONE,
        {CLASS_A: {"metadata": {"name": CLASS_A}, "spec": {"selectors": [cel("noSuchVar")]}}},
        [],
        "undeclared reference",
    ),
    (
        "invalid-CEL-all-devices",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, cel("noSuchVar")))],
        ONE,
        CA,
        [],
        "undeclared reference",
    ),
    (
        "too-many-devices-single-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 500))],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 500)],
        CA,
        [],
        None,
    ),
    (
        "many-devices-okay",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 32))],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 32)],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, f"device-{i}") for i in range(32)]],
    ),
    (
        "too-many-devices-total",
        N1,
        [claim(CLAIM0, *[request(f"req-{i}", CLASS_A, 1) for i in range(33)])],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 33)],
        CA,
        [],
        None,
    ),
    (
        "prioritized-list-first-unavailable",
        N1,
        [claim(CLAIM0, prioritized(REQ0, sub_request(SUB0, CLASS_B), sub_request(SUB1, CLASS_A)))],
        ONE,
        {**CA, CLASS_B: class_(CLASS_B, DRIVER_B)},
        [],
        [[result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "prioritized-list-non-available",
        N1,
        [claim(CLAIM0, prioritized(REQ0, sub_request(SUB0, CLASS_B, 2), sub_request(SUB1, CLASS_A, 2)))],
        ONE,
        {**CA, CLASS_B: class_(CLASS_B, DRIVER_B)},
        [],
        None,
    ),
    (
        "prioritized-list-subrequests-with-allocation-mode-all",
        N1,
        [claim(CLAIM0, prioritized(REQ0, sub_request(SUB0, CLASS_A, mode="All"), sub_request(SUB1, CLASS_A)))],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2)],
        CA,
        [(DRIVER_A, POOL1, DEVICE0)],
        [[result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "prioritized-list-with-backtracking",
        N1,
        [
            claim(
                CLAIM0,
                prioritized(REQ0, sub_request(SUB0, CLASS_A, 2), sub_request(SUB1, CLASS_A, 1)),
                request(REQ1, CLASS_A, 1),
            )
        ],
        [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2)],
        CA,
        [],
        [[result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE0), result(REQ1, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "tainted-two-devices",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NS), tainted(device(DEVICE2), TAINT_NE)
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "tainted-one-device-two-taints",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NS, TAINT_NE))],
        CA,
        [],
        None,
    ),
    (
        "tainted-two-devices-tolerated",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, tolerations=[TOLERATE_NE]))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NS), tainted(device(DEVICE2), TAINT_NE)
            )
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "tainted-two-devices-prioritized-list-tolerated",
        N1,
        [claim(CLAIM0, prioritized(REQ0, sub_request(SUB0, CLASS_A, tolerations=[TOLERATE_NS])))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NE), tainted(device(DEVICE2), TAINT_NS)
            )
        ],
        CA,
        [],
        [[result("req-0/subReq-0", DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "tainted-no-effect",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), taint("taint-key", "None", "taint-value")))],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "tainted-one-device-two-taints-both-tolerated",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, tolerations=[TOLERATE_NS, TOLERATE_NE]))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NS, TAINT_NE))],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "tainted-admin-access",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, admin=True))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NS))],
        CA,
        [],
        None,
    ),
    (
        "tainted-all-devices-single",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, tainted(device(DEVICE1), TAINT_NS))],
        CA,
        [],
        None,
    ),
    (
        "partitionable-devices-single-device",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, counter_device(DEVICE1, consumes(CS1, memory="4Gi")), count=2),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "partitionable-devices-no-capacity-available",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="4Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, memory="16Gi"), from_counters=True),
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="18Gi")),
        ],
        CA,
        [(DRIVER_A, POOL1, DEVICE2)],
        None,
    ),
    (
        "partitionable-devices-multiple-devices",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="4Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, memory="6Gi"), from_counters=True),
                counter_device(DEVICE3, consumes(CS1, memory="4Gi"), from_counters=True),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ1, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-devices-device-counter-consumption-references-unknown-counter-set",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, counter_device(DEVICE1, consumes(CS2)), count=2),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1), count=2),
        ],
        CA,
        [],
        None,
    ),
    (
        "partitionable-devices-per-device-node-selection-nodename",
        N1,
        [
            claim(
                CLAIM0,
                prioritized(
                    REQ0,
                    sub_request(SUB0, CLASS_A, 1, memory_at_least("6Gi")),
                    sub_request(SUB1, CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        [
            slice_(
                SLICE1,
                PER_DEVICE,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="4Gi"), from_counters=True, nodeName=NODE1),
                counter_device(DEVICE2, consumes(CS1, memory="6Gi"), from_counters=True, nodeName=NODE2),
                count=2,
            ),
            counter_slice(SLICE2, PER_DEVICE, POOL1, DRIVER_A, counter_set(CS1, memory="18Gi"), count=2),
        ],
        CA,
        [],
        [[result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "no-allocation-from-incomplete-pools",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A, count=2)],
        CA,
        [],
        None,
    ),
    (
        "invalid-pool-is-ok-if-devices-can-be-allocated-from-other",
        N1,
        [claim_with_request(CLAIM0, REQ0, CLASS_A)],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE1)),
            slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL2, DEVICE1)]],
    ),
    (
        "check-combinations-within-single-request-single-pool-single-slice",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 2, cel('device.attributes["driver-a"].numa == 1')))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE0, attributes={"numa": attr_int(0)}),
                device(DEVICE1, attributes={"numa": attr_int(1)}),
                device(DEVICE2, attributes={"numa": attr_int(1)}),
            )
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result(REQ0, DRIVER_A, POOL1, DEVICE2)]],
    ),
    # -- partitionable devices (counters) --
    (
        "partitionable-all-mode-constraint-must-error-with-reserved-counter",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A), constraints=[match(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"numa": attr_int(1)}),
                counter_device(DEVICE2, consumes(CS1, c="1"), attributes={"numa": attr_int(2)}),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
        ],
        CA,
        [],
        "claim default/claim-0, request req-0: cannot add device driver-a/pool-1/device-2 "
        "because a claim constraint would not be satisfied",
    ),
    (
        "partitionable-devices-counter-quantities-are-not-modified",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, c="9000000000000000000")),
                counter_device(DEVICE2, consumes(CS1, c="1")),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="10000000000000000000"), count=2),
        ],
        CA,
        [(DRIVER_A, POOL1, DEVICE1)],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "partitionable-devices-counter-cache-scoped-by-pool-ID",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ1, CLASS_B))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, counter_device(DEVICE1, consumes(CS1, c="1")), count=2),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
            slice_(SLICE3, NODE1, POOL1, DRIVER_B, counter_device(DEVICE2, consumes(CS1, c="2")), count=2),
            counter_slice(SLICE4, NODE1, POOL1, DRIVER_B, counter_set(CS1, c="2"), count=2),
        ],
        CAB,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)], [result(REQ1, DRIVER_B, POOL1, DEVICE2)]],
    ),
    (
        "partitionable-devices-counter-cache-not-crossed-between-driver-schemas",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ1, CLASS_B))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, counter_device(DEVICE1, consumes(CS1, c="1")), count=2),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
            slice_(SLICE3, NODE1, POOL1, DRIVER_B, counter_device(DEVICE2, consumes(CS2, d="2")), count=2),
            counter_slice(SLICE4, NODE1, POOL1, DRIVER_B, counter_set(CS2, d="1"), count=2),
        ],
        CAB,
        [],
        None,
    ),
    (
        "partitionable-devices-taint-releases-counter",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                tainted(counter_device(DEVICE1, consumes(CS1, c="1")), TAINT_NS),
                counter_device(DEVICE2, consumes(CS1, c="1")),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "partitionable-devices-constraint-releases-counter",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 2), constraints=[match(STRING_ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, c="1"), attributes={"stringAttribute": attr_str("red")}),
                counter_device(DEVICE2, consumes(CS1, c="1"), attributes={"stringAttribute": attr_str("blue")}),
                counter_device(DEVICE3, consumes(CS1, c="1"), attributes={"stringAttribute": attr_str("blue")}),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="2"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2), result(REQ0, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-consumable-capacity-backtrack-releases-counter",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 1, attr_is("kind", "shared")),
                request(REQ1, CLASS_A, 1, attr_is("kind", "counteronly")),
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(counter_device(DEVICE1, consumes(CS1, c="1"), attributes={"kind": attr_str("shared")})),
                device(DEVICE2, attributes={"kind": attr_str("shared")}),
                counter_device(DEVICE3, consumes(CS1, c="1"), attributes={"kind": attr_str("counteronly")}),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2), result(REQ1, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-empty-capacity-multiple-share-backtrack-keeps-counter-ownership",
        N1,
        [
            claim(CLAIM0, request(REQ0, CLASS_A, 1, attr_is("kind", "shared"))),
            claim(
                CLAIM1,
                request(
                    REQ1,
                    CLASS_A,
                    1,
                    cel(
                        f'device.attributes["{DRIVER_A}"].kind == "shared" || '
                        f'device.attributes["{DRIVER_A}"].kind == "fallback"'
                    ),
                ),
                request(REQ2, CLASS_A, 1, attr_is("kind", "gate")),
                request(REQ3, CLASS_A, 1, attr_is("kind", "shared")),
                constraints=[match(STRING_ATTR, REQ1, REQ2)],
            ),
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    counter_device(
                        DEVICE1,
                        consumes(CS1, c="1"),
                        attributes={"kind": attr_str("shared"), "stringAttribute": attr_str("red")},
                    )
                ),
                device(DEVICE2, attributes={"kind": attr_str("fallback"), "stringAttribute": attr_str("blue")}),
                device(DEVICE3, attributes={"kind": attr_str("gate"), "stringAttribute": attr_str("blue")}),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
        ],
        CA,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1)],
            [
                result(REQ1, DRIVER_A, POOL1, DEVICE2),
                result(REQ2, DRIVER_A, POOL1, DEVICE3),
                shared_result(REQ3, DRIVER_A, POOL1, DEVICE1),
            ],
        ],
    ),
    (
        "partitionable-devices-prioritized-list",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                prioritized(
                    REQ1,
                    sub_request(SUB0, CLASS_A, 1, memory_at_least("6Gi")),
                    sub_request(SUB1, CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="4Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, memory="6Gi"), from_counters=True),
                counter_device(DEVICE3, consumes(CS1, memory="4Gi"), from_counters=True),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result("req-1/subReq-1", DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-devices-multiple-capacity-pools",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A),
                prioritized(
                    REQ1,
                    sub_request(SUB0, CLASS_A, 1, memory_at_least("6Gi")),
                    sub_request(SUB1, CLASS_A, 1, memory_at_least("4Gi")),
                ),
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="4Gi"), consumes(CS2, cpus="4"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, memory="6Gi"), consumes(CS2, cpus="6"), from_counters=True),
                counter_device(DEVICE3, consumes(CS1, memory="4Gi"), consumes(CS2, cpus="4"), from_counters=True),
                count=2,
            ),
            counter_slice(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_set(CS1, memory="18Gi"),
                counter_set(CS2, cpus="8"),
                count=2,
            ),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1), result("req-1/subReq-1", DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-devices-multiple-counters",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(
                    DEVICE1,
                    consumes(CS1, memory="4Gi", cpus="6"),
                    consumes(CS2, cpus="4", memory="2Gi"),
                    from_counters=True,
                ),
                counter_device(
                    DEVICE2,
                    consumes(CS1, memory="6Gi", cpus="4"),
                    consumes(CS2, cpus="6", memory="6Gi"),
                    from_counters=True,
                ),
                counter_device(
                    DEVICE3,
                    consumes(CS1, memory="4Gi", cpus="4"),
                    consumes(CS2, cpus="4", memory="4Gi"),
                    from_counters=True,
                ),
                count=2,
            ),
            counter_slice(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_set(CS1, cpus="8", memory="18Gi"),
                counter_set(CS2, cpus="12", memory="18Gi"),
                count=2,
            ),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2), result(REQ1, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-devices-multiple-pools",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A), request(REQ1, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, cpus="6", memory="4Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, cpus="4", memory="6Gi"), from_counters=True),
                counter_device(DEVICE3, consumes(CS1, cpus="4", memory="4Gi"), from_counters=True),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, cpus="8", memory="18Gi"), count=2),
            slice_(
                SLICE3,
                NODE1,
                POOL2,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, cpus="6", memory="4Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, cpus="1", memory="7Gi"), from_counters=True),
                counter_device(DEVICE3, consumes(CS1, cpus="1", memory="7Gi"), from_counters=True),
                count=2,
            ),
            counter_slice(SLICE4, NODE1, POOL2, DRIVER_A, counter_set(CS1, cpus="8", memory="18Gi"), count=2),
        ],
        CA,
        [(DRIVER_A, POOL1, DEVICE2), (DRIVER_A, POOL1, DEVICE3), (DRIVER_A, POOL2, DEVICE1)],
        [[result(REQ0, DRIVER_A, POOL2, DEVICE2), result(REQ1, DRIVER_A, POOL2, DEVICE3)]],
    ),
    (
        "partitionable-devices-unused-counters-in-counter-set",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 2))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="5Gi")),
                counter_device(DEVICE2, consumes(CS1, memory="4Gi")),
                counter_device(DEVICE3, consumes(CS1, memory="4Gi")),
                count=2,
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi", unused="1Gi"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE2), result(REQ0, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-devices-overallocated-capacity-pool",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="4Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, memory="20Gi"), from_counters=True),
            ),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="18Gi")),
        ],
        CA,
        [(DRIVER_A, POOL1, DEVICE2)],
        None,
    ),
    (
        "partitionable-devices-per-device-node-selection-node-selector",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(
                SLICE1,
                PER_DEVICE,
                POOL1,
                DRIVER_A,
                counter_device(
                    DEVICE1,
                    consumes(CS1, memory="4Gi"),
                    from_counters=True,
                    nodeSelector=node_label_selector("region", REGION1),
                ),
                count=2,
            ),
            counter_slice(SLICE2, PER_DEVICE, POOL1, DRIVER_A, counter_set(CS1, memory="18Gi"), count=2),
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "partitionable-devices-per-device-node-selection-node-selector-multiple-devices",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 3), request(REQ1, CLASS_B, 3))],
        [
            slice_(
                SLICE1,
                PER_DEVICE,
                POOL1,
                DRIVER_A,
                counter_device(
                    DEVICE1,
                    consumes(CS1, memory="4Gi"),
                    from_counters=True,
                    nodeSelector=node_label_selector("region", REGION1),
                ),
                counter_device(DEVICE2, consumes(CS1, memory="4Gi"), from_counters=True, nodeName=NODE1),
                counter_device(DEVICE3, consumes(CS1, memory="4Gi"), from_counters=True, allNodes=True),
                count=2,
            ),
            counter_slice(SLICE2, PER_DEVICE, POOL1, DRIVER_A, counter_set(CS1, memory="18Gi"), count=2),
            slice_(
                SLICE3,
                NODE1,
                POOL2,
                DRIVER_B,
                *[
                    counter_device(d, consumes(CS2, memory="4Gi"), from_counters=True)
                    for d in (DEVICE1, DEVICE2, DEVICE3)
                ],
                count=2,
            ),
            counter_slice(SLICE4, NODE1, POOL2, DRIVER_B, counter_set(CS2, memory="12Gi"), count=2),
        ],
        CAB,
        [],
        [
            [result(REQ0, DRIVER_A, POOL1, d) for d in (DEVICE1, DEVICE2, DEVICE3)]
            + [result(REQ1, DRIVER_B, POOL2, d) for d in (DEVICE1, DEVICE2, DEVICE3)]
        ],
    ),
    (
        "partitionable-devices-with-attribute-selector",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 2),
                request(REQ1, CLASS_A, 1, cel(f'device.attributes["{DRIVER_A}"].special')),
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(
                    DEVICE1, consumes(CS1, cpu1="1"), consumes(CS2, mem="10Gi"), attributes={"special": attr_bool(True)}
                ),
                counter_device(
                    DEVICE2,
                    consumes(CS1, cpu2="1"),
                    consumes(CS2, mem="10Gi"),
                    attributes={"special": attr_bool(False)},
                ),
                counter_device(
                    DEVICE3,
                    consumes(CS1, cpu3="1"),
                    consumes(CS2, mem="10Gi"),
                    attributes={"special": attr_bool(False)},
                ),
                count=2,
            ),
            counter_slice(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_set(CS1, cpu1="1", cpu2="1", cpu3="1"),
                counter_set(CS2, mem="30Gi"),
                count=2,
            ),
        ],
        CA,
        [],
        [
            [
                result(REQ0, DRIVER_A, POOL1, DEVICE2),
                result(REQ0, DRIVER_A, POOL1, DEVICE3),
                result(REQ1, DRIVER_A, POOL1, DEVICE1),
            ]
        ],
    ),
    (
        "partitionable-consumable-capacity-shared-device-counter-not-recharged",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(counter_device(DEVICE1, consumes(CS1, c="1"))), count=2),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, c="1"), count=2),
        ],
        CA,
        allocated_state(shared=[(DRIVER_A, POOL1, DEVICE1)]),
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    # "invalid resource pools were encountered" wraps ErrFailedAllocationOnNode, which the
    # scheduler takes as "unschedulable on this node": None here.
    (
        "partitionable-devices-same-counter-set-name-in-different-resource-slices",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), count=4),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1), count=4),
            slice_(SLICE3, NODE1, POOL1, DRIVER_A, device(DEVICE2), count=4),
            counter_slice(SLICE4, NODE1, POOL1, DRIVER_A, counter_set(CS1), count=4),
        ],
        CA,
        [],
        None,
    ),
    (
        "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, counter_device(DEVICE1, consumes(CS1, memory="8Gi")), count=2),
            counter_slice(SLICE2, NODE1, POOL1, DRIVER_A, counter_set(CS1, **{"other-memory": "8Gi"}), count=2),
        ],
        CA,
        [],
        None,
    ),
    (
        "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            slice_(SLICE1, NODE1, POOL1, DRIVER_A, counter_device(DEVICE1, consumes(CS1, memory="8Gi"))),
            counter_slice(SLICE2, NODE1, POOL2, DRIVER_A, counter_set(CS1, memory="8Gi")),
        ],
        CA,
        [],
        None,
    ),
    (
        "partitionable-devices-devices-on-different-nodes-consume-same-counter-set",
        N1,
        [
            claim(
                CLAIM0,
                prioritized(
                    REQ0,
                    sub_request(SUB0, CLASS_A, 1, memory_at_least("6Gi")),
                    sub_request(SUB1, CLASS_A, 1, memory_at_least("2Gi")),
                ),
            )
        ],
        [
            counter_slice(SLICE1, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi"), count=3),
            slice_(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="6Gi"), from_counters=True),
                counter_device(DEVICE2, consumes(CS1, memory="2Gi"), from_counters=True),
                count=3,
            ),
            slice_(SLICE3, NODE2, POOL1, DRIVER_A, counter_device(DEVICE3, consumes(CS1, memory="6Gi")), count=3),
        ],
        CA,
        [(DRIVER_A, POOL1, DEVICE3)],
        [[result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE2)]],
    ),
    (
        "partitionable-devices-devices-consume-counter-set-in-different-nodes",
        node(NODE2, REGION1),
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            counter_slice(SLICE1, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi"), count=3),
            slice_(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="6Gi"), from_counters=True),
                count=3,
            ),
            slice_(
                SLICE3,
                NODE2,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE2, consumes(CS1, memory="6Gi"), from_counters=True),
                counter_device(DEVICE3, consumes(CS1, memory="2Gi"), from_counters=True),
                count=3,
            ),
        ],
        CA,
        [(DRIVER_A, POOL1, DEVICE1)],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE3)]],
    ),
    (
        "partitionable-devices-validation-error-on-non-targeting-slice",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A))],
        [
            counter_slice(SLICE1, NODE1, POOL1, DRIVER_A, counter_set(CS1, memory="8Gi"), count=3),
            slice_(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_device(DEVICE1, consumes(CS1, memory="6Gi"), from_counters=True),
                count=3,
            ),
            slice_(SLICE3, NODE2, POOL1, DRIVER_A, counter_device(DEVICE3, consumes(CS2, memory="6Gi")), count=3),
        ],
        CA,
        [],
        None,
    ),
    # -- consumable capacity (allowMultipleAllocations) --
    (
        "consumable-capacity-rejection-rolls-back-constraints",
        N1,
        [
            claim(CLAIM0, request(REQ0, CLASS_A, 1, attr_is("stringAttribute", "cap"), capacity="2")),
            claim(
                CLAIM1,
                prioritized(
                    REQ0,
                    sub_request(SUB0, CLASS_A, 1, attr_is("stringAttribute", "cap"), mode="All", capacity="2"),
                    sub_request(SUB1, CLASS_A, 1, attr_is("stringAttribute", "fb")),
                ),
                constraints=[match(STRING_ATTR)],
            ),
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(device(DEVICE1, {CAP0: "2"}, {"stringAttribute": attr_str("cap")})),
                device(DEVICE2, attributes={"stringAttribute": attr_str("fb")}),
            )
        ],
        CA,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})],
            [result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE2)],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-missing-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {"capacity-1": "1"})))],
        CA,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {"capacity-1": "1"})))],
        CAM,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1)))],
        CAM,
        [],
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1)], [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "1"})), multi(device(DEVICE2, {CAP0: "1"}))
            )
        ],
        CAM,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "1"})],
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE2, {CAP0: "1"})],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "2"})))],
        CAM,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1")), claim(CLAIM1, request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "2"})))],
        CAM,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "1"})],
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "1"})],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("4")})))],
        CAM,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})],
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-zero-request-policy",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A)), claim(CLAIM1, request(REQ0, CLASS_A))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: valid_values_capacity("0", "1")})))],
        CAM,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "0"})],
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "0"})],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-violates-zero-request-policy",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: valid_values_capacity("0", "1")})))],
        CAM,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1")), claim(CLAIM1, request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("4")})))],
        CAM,
        [],
        [
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})],
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-range-policy-step",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="3"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("4")})))],
        CAM,
        [],
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "4"})]],
    ),
    (
        "consumable-capacity-negative-request-aborts",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="-5"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "10"})))],
        CAM,
        [],
        "negative",
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="2"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: valid_values_capacity("1", "4", "2")})))],
        CAM,
        [],
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="2"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: valid_values_capacity("1", "3", "3")})))],
        CAM,
        [],
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "3"})]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1")), claim(CLAIM1, request(REQ0, CLASS_A, capacity="2"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("2")})))],
        CAM,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="6"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("10")})))],
        CAM,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="2"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("4")})))],
        CAM,
        allocated_state(capacity={(DRIVER_A, POOL1, DEVICE1): {CAP0: "2"}}),
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="2"))],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(device(DEVICE1, {CAP0: range_capacity("2")})),
                multi(device(DEVICE2, {CAP0: range_capacity("2")})),
            )
        ],
        CAM,
        allocated_state(capacity={(DRIVER_A, POOL1, DEVICE1): {CAP0: "2"}}),
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE2, {CAP0: "2"})]],
    ),
    (
        "consumable-capacity-with-multi-allocatable-device-backtrack",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, capacity="2"),
                request(REQ1, CLASS_A, capacity="2"),
                constraints=[match(STRING_ATTR)],
            ),
            claim(CLAIM1, request(REQ0, CLASS_A, capacity="2")),
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    device(DEVICE2, {CAP0: range_capacity("2")}, {"stringAttribute": attr_str("stringAttributeValue1")})
                ),
                multi(
                    device(DEVICE1, {CAP0: range_capacity("4")}, {"stringAttribute": attr_str("stringAttributeValue2")})
                ),
            )
        ],
        CA,
        [],
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"}),
                shared_result(REQ1, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"}),
            ],
            [shared_result(REQ0, DRIVER_A, POOL1, DEVICE2, {CAP0: "2"})],
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-subrequest",
        N1,
        [
            claim(
                CLAIM0,
                prioritized(
                    REQ0,
                    sub_request(SUB0, CLASS_A, capacity="4"),
                    sub_request(SUB1, CLASS_A, capacity="2"),
                    sub_request(SUB1, CLASS_A),
                ),
            )
        ],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("2")})))],
        CAM,
        [],
        [[shared_result("req-0/subReq-1", DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="2"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: range_capacity("2")})))],
        CAM,
        allocated_state(capacity={(DRIVER_A, POOL1, DEVICE1): {CAP0: "2"}}),
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, capacity="2"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "2"})), multi(device(DEVICE2)))],
        CAM,
        [],
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, capacity="2"))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "2"})), multi(device(DEVICE2, {CAP0: "1"}))
            )
        ],
        CAM,
        [],
        [[shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"})]],
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1"), all_request(REQ1, CLASS_A, capacity="1"))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "2"})), multi(device(DEVICE2, {CAP0: "1"}))
            )
        ],
        CA,
        [],
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "1"}),
                shared_result(REQ1, DRIVER_A, POOL1, DEVICE1, {CAP0: "1"}),
                shared_result(REQ1, DRIVER_A, POOL1, DEVICE2, {CAP0: "1"}),
            ]
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, capacity="1"))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "2"})), multi(device(DEVICE2, {CAP0: "1"}))
            )
        ],
        CA,
        allocated_state(capacity={(DRIVER_A, POOL1, DEVICE1): {CAP0: "1"}}),
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "1"}),
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE2, {CAP0: "1"}),
            ]
        ],
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1"), all_request(REQ1, CLASS_A, capacity="1"))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "1"})), multi(device(DEVICE2, {CAP0: "1"}))
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient",
        N1,
        [claim(CLAIM0, all_request(REQ0, CLASS_A, capacity="1"))],
        [
            slice_(
                SLICE1, NODE1, POOL1, DRIVER_A, multi(device(DEVICE1, {CAP0: "1"})), multi(device(DEVICE2, {CAP0: "1"}))
            )
        ],
        CA,
        allocated_state(capacity={(DRIVER_A, POOL1, DEVICE1): {CAP0: "1"}}),
        None,
    ),
    (
        "consumable-capacity-dedicated-device-with-consumable-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, {CAP0: "1"}))],
        {CLASS_A: class_multi(CLASS_A, DRIVER_A, False)},
        [],
        [[result(REQ0, DRIVER_A, POOL1, DEVICE1)]],
    ),
    (
        "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, capacity="1")), claim(CLAIM1, request(REQ0, CLASS_A, capacity="1"))],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, {CAP0: range_capacity("2")}))],
        {CLASS_A: class_multi(CLASS_A, DRIVER_A, False)},
        [],
        None,
    ),
    (
        "consumable-capacity-requests-are-not-modified",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, capacity="2"),
                request(REQ1, CLASS_A, capacity="1000000000000000000000"),
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    device(
                        DEVICE1,
                        {
                            CAP0: {
                                "value": "1000000000000000000002",
                                "requestPolicy": {"default": "1000000000000000000000", "validRange": {"min": "2"}},
                            }
                        },
                    )
                ),
            )
        ],
        CA,
        [],
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"}),
                shared_result(REQ1, DRIVER_A, POOL1, DEVICE1, {CAP0: "1000000000000000000000"}),
            ]
        ],
    ),
    (
        "consumable-capacity-with-partitionable-device-multiple-capacity-pools",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, capacity="1"),
                request(REQ2, CLASS_A, capacity="2"),
                prioritized(
                    REQ1,
                    sub_request(
                        SUB0,
                        CLASS_A,
                        1,
                        cel(f'device.capacity["{DRIVER_A}"]["{CAP0}"].compareTo(quantity("4")) >= 0'),
                        capacity="1",
                    ),
                    sub_request(
                        SUB1,
                        CLASS_A,
                        1,
                        cel(f'device.capacity["{DRIVER_A}"]["{CAP0}"].compareTo(quantity("2")) >= 0'),
                        capacity="1",
                    ),
                ),
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                *[
                    multi(
                        dict(
                            counter_device(
                                d, consumes(CS1, **{CAP0: c0}), consumes(CS2, **{"capacity-1": "4"}), from_counters=True
                            ),
                            capacity={CAP0: {"value": c0}, "capacity-1": range_capacity("4")},
                        )
                    )
                    for d, c0 in ((DEVICE1, "2"), (DEVICE2, "4"), (DEVICE3, "2"))
                ],
                count=2,
            ),
            counter_slice(
                SLICE2,
                NODE1,
                POOL1,
                DRIVER_A,
                counter_set(CS1, **{CAP0: "4"}),
                counter_set(CS2, **{"capacity-1": "8"}),
                count=2,
            ),
        ],
        CA,
        [],
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "1", "capacity-1": "2"}),
                shared_result(REQ2, DRIVER_A, POOL1, DEVICE3, {CAP0: "2", "capacity-1": "2"}),
                shared_result("req-1/subReq-1", DRIVER_A, POOL1, DEVICE1, {CAP0: "1", "capacity-1": "2"}),
            ]
        ],
    ),
    # -- distinctAttribute --
    (
        "distinct-constraint-single-request-count-3-not-distinct",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 3), constraints=[distinct(STRING_ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"stringAttribute": attr_str("value1")}),
                device(DEVICE2, attributes={"stringAttribute": attr_str("value2")}),
                device(DEVICE3, attributes={"stringAttribute": attr_str("value1")}),
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "distinct-constraint-single-request-count-3-all-distinct",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 3), constraints=[distinct(STRING_ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"stringAttribute": attr_str("value1")}),
                device(DEVICE2, attributes={"stringAttribute": attr_str("value2")}),
                device(DEVICE3, attributes={"stringAttribute": attr_str("value3")}),
            )
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, d) for d in (DEVICE1, DEVICE2, DEVICE3)]],
    ),
    (
        "distinct-constraint-two-requests-with-count-not-distinct",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, 2),
                request(REQ1, CLASS_A),
                constraints=[distinct(STRING_ATTR, REQ0, REQ1)],
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                device(DEVICE1, attributes={"stringAttribute": attr_str("value1")}),
                device(DEVICE2, attributes={"stringAttribute": attr_str("value2")}),
                device(DEVICE3, attributes={"stringAttribute": attr_str("value1")}),
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "distinct-constraint-single-request-multiple-devices-attribute-not-set",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 3), constraints=[distinct(ATTR)])],
        [slice_(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2), device(DEVICE3))],
        CA,
        [],
        None,
    ),
    (
        "distinct-constraint-single-request-not-enough-distinct-values",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 3), constraints=[distinct(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                *[
                    device(d, attributes={"numa": attr_int(n)})
                    for d, n in ((DEVICE1, 1), (DEVICE2, 2), (DEVICE3, 2), (DEVICE4, 2))
                ],
            )
        ],
        CA,
        [],
        None,
    ),
    (
        "distinct-constraint-single-request-multiple-devices-attribute-set",
        N1,
        [claim(CLAIM0, request(REQ0, CLASS_A, 3), constraints=[distinct(ATTR)])],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                *[
                    device(d, attributes={"numa": attr_int(n)})
                    for d, n in ((DEVICE1, 1), (DEVICE2, 2), (DEVICE3, 1), (DEVICE4, 3))
                ],
            )
        ],
        CA,
        [],
        [[result(REQ0, DRIVER_A, POOL1, d) for d in (DEVICE1, DEVICE2, DEVICE4)]],
    ),
    (
        "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, capacity="1"),
                request(REQ1, CLASS_A, capacity="1"),
                constraints=[distinct(STRING_ATTR)],
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    device(DEVICE1, {CAP0: range_capacity("2")}, {"stringAttribute": attr_str("stringAttributeValue")})
                ),
            )
        ],
        CAM,
        [],
        None,
    ),
    (
        "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint",
        N1,
        [
            claim(
                CLAIM0,
                request(REQ0, CLASS_A, capacity="2"),
                request(REQ1, CLASS_A, capacity="2"),
                constraints=[distinct(STRING_ATTR)],
            )
        ],
        [
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    device(DEVICE1, {CAP0: range_capacity("4")}, {"stringAttribute": attr_str("stringAttributeValue1")})
                ),
                count=2,
            ),
            slice_(
                SLICE1,
                NODE1,
                POOL1,
                DRIVER_A,
                multi(
                    device(DEVICE2, {CAP0: range_capacity("4")}, {"stringAttribute": attr_str("stringAttributeValue2")})
                ),
                count=2,
            ),
        ],
        CAM,
        [],
        [
            [
                shared_result(REQ0, DRIVER_A, POOL1, DEVICE1, {CAP0: "2"}),
                shared_result(REQ1, DRIVER_A, POOL1, DEVICE2, {CAP0: "2"}),
            ]
        ],
    ),
]


def compared(r):
    got = (r["request"], r["driver"], r["pool"], r["device"]) + (("admin",) if r.get("adminAccess") else ())
    if r.get("shared"):
        got += ("shared", tuple(sorted((r.get("consumedCapacity") or {}).items())))
    return got


def normalized(results):
    if not results:
        return None
    return [sorted(compared(r) for r in per_claim) for per_claim in results]


@pytest.mark.parametrize("name,node_,claims,slices,classes,allocated,expected", CASES, ids=[c[0] for c in CASES])
def test_allocator(name, node_, claims, slices, classes, allocated, expected):
    state = copy.deepcopy(allocated) if isinstance(allocated, AllocatedState) else allocated_state(allocated)
    if isinstance(expected, str):
        with pytest.raises(AllocationError) as e:
            allocate(node_, copy.deepcopy(claims), copy.deepcopy(slices), copy.deepcopy(classes), state)
        assert expected in str(e.value)
        return
    got = allocate(node_, copy.deepcopy(claims), copy.deepcopy(slices), copy.deepcopy(classes), state)
    want = None if expected is None else [sorted(per_claim) for per_claim in expected]
    assert normalized(got) == want
