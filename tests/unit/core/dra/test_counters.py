"""Shared counters (KEP-4815): the one arithmetic the allocator's view (pools, allocator,
devicefit) and the pool status controller's (poolstatus) share, after views.go's
availableCounters / deductCounters / deviceFits and allocator_experimental.go's
checkAvailableCounters at v1.37.1."""

from fractions import Fraction

import pytest

from operators.core.dra import counters as c
from operators.core.dra.allocator import allocate
from operators.core.dra.devicefit import counters_problem
from operators.core.dra.pools import all_pools, allocated_state, available_counters

GI = 2**30


def consumes(amount, counter_set="gpu-0", counter="memory"):
    return [{"counterSet": counter_set, "counters": {counter: {"value": amount}}}]


SHARED = [
    {"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}, "sms": {"value": "132"}}},
    {"name": "gpu-1", "counters": {"memory": {"value": "80Gi"}}},
]


def test_amounts_and_capacities():
    assert c.amounts({"memory": {"value": "1Gi"}, "sms": {"value": 7}, "none": {}}) == {
        "memory": GI,
        "sms": 7,
        "none": 0,
    }
    assert c.amounts(None) == {}
    assert c.capacities(SHARED) == {"gpu-0": {"memory": 80 * GI, "sms": 132}, "gpu-1": {"memory": 80 * GI}}
    # A set named twice merges, the later counter winning (views.go availableCounters).
    twice = [
        {"name": "s", "counters": {"a": {"value": "1"}, "b": {"value": "2"}}},
        {"name": "s", "counters": {"a": {"value": "3"}}},
    ]
    assert c.capacities(twice) == {"s": {"a": 3, "b": 2}}


def test_deduct_skips_unknown_sets_and_counters_and_may_go_negative():
    available = c.capacities(SHARED)
    c.deduct(available, consumes("50Gi") + consumes("1", "gpu-9") + consumes("1", counter="nope"))
    assert available["gpu-0"] == {"memory": 30 * GI, "sms": 132}
    assert "gpu-9" not in available and "nope" not in available["gpu-0"]
    c.deduct(available, consumes("50Gi"))
    assert available["gpu-0"]["memory"] == -20 * GI
    c.deduct(available, consumes("50Gi"), sign=-1)
    assert available["gpu-0"]["memory"] == 30 * GI
    c.deduct(available, None)
    c.deduct(available, [])


def test_counters_left_copies():
    capacity = c.capacities(SHARED)
    left = c.counters_left(capacity, [consumes("40Gi"), None, consumes("40Gi", "gpu-1")])
    assert left == {"gpu-0": {"memory": 40 * GI, "sms": 132}, "gpu-1": {"memory": 40 * GI}}
    assert capacity["gpu-0"]["memory"] == 80 * GI
    copy = c.copy_counters(capacity)
    copy["gpu-0"]["memory"] = 0
    assert capacity["gpu-0"]["memory"] == 80 * GI


@pytest.mark.parametrize(
    ("cost", "expected"),
    [
        (consumes("80Gi"), None),  # exactly what is left
        ([], None),
        (None, None),
        (consumes("81Gi"), c.Shortfall("gpu-0", "memory", 81 * GI, 80 * GI)),
        (consumes("1", counter="nope"), c.Shortfall("gpu-0", "nope", 1, None)),
        (consumes("0", counter="nope"), c.Shortfall("gpu-0", "nope", 0, None)),  # deviceFits: missing never fits
        (consumes("1", "gpu-9"), c.Shortfall("gpu-9", "memory", 1, None)),
        # The first counter that does not fit, in the order the device names them.
        (
            consumes("1Gi") + consumes("100Gi", "gpu-1") + consumes("1000", counter="sms"),
            c.Shortfall("gpu-1", "memory", 100 * GI, 80 * GI),
        ),
    ],
)
def test_shortfall(cost, expected):
    assert c.shortfall(cost, c.capacities(SHARED)) == expected


def test_add_consumption_keeps_every_counter():
    total: c.Counters = {}
    c.add_consumption(total, consumes("40Gi") + consumes("1", "gpu-9"))
    c.add_consumption(total, consumes("40Gi"))
    assert total == {"gpu-0": {"memory": 80 * GI}, "gpu-9": {"memory": 1}}
    c.add_consumption(total, consumes("40Gi"), -1)
    assert total["gpu-0"]["memory"] == 40 * GI


# -- the allocator's view uses the same arithmetic ------------------------------------------------


def partitioned():
    """One 80Gi GPU offered whole or as two halves, as the node agent publishes it."""
    pool = {"name": "n1", "generation": 1, "resourceSliceCount": 2}
    counters = {
        "metadata": {"name": "n1-counters"},
        "spec": {
            "driver": "d",
            "pool": pool,
            "nodeName": "n1",
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
        },
    }
    devices = {
        "metadata": {"name": "n1-devices"},
        "spec": {
            "driver": "d",
            "pool": pool,
            "nodeName": "n1",
            "devices": [
                {"name": "gpu-0", "consumesCounters": consumes("80Gi")},
                {"name": "gpu-0-part-0", "consumesCounters": consumes("40Gi")},
                {"name": "gpu-0-part-1", "consumesCounters": consumes("40Gi")},
            ],
        },
    }
    return [counters, devices]


def allocated(*devices):
    return [
        {
            "metadata": {"namespace": "ns", "name": f"c-{d}"},
            "status": {
                "allocation": {"devices": {"results": [{"request": "r", "driver": "d", "pool": "n1", "device": d}]}}
            },
        }
        for d in devices
    ]


def test_pool_view_matches_the_plain_arithmetic():
    slices = partitioned()
    [pool] = all_pools(slices)
    assert pool.counter_sets == c.capacities(slices[0]["spec"]["sharedCounters"])
    left = available_counters(pool, allocated_state(allocated("gpu-0-part-0")))
    assert left == c.counters_left(pool.counter_sets, [consumes("40Gi")]) == {"gpu-0": {"memory": 40 * GI}}
    whole = {"name": "gpu-0", "consumesCounters": consumes("80Gi")}
    assert counters_problem(pool, whole, left) == "counter set gpu-0 memory: needs 80Gi, 40Gi left"
    assert counters_problem(pool, {"name": "x", "consumesCounters": consumes("40Gi")}, left) is None
    assert (
        counters_problem(pool, {"name": "x", "consumesCounters": consumes("1", counter="sms")}, left)
        == "counter set gpu-0 has no counter sms"
    )
    over = available_counters(pool, allocated_state(allocated("gpu-0", "gpu-0-part-0")))
    assert over == {"gpu-0": {"memory": Fraction(-40 * GI)}}
    assert counters_problem(pool, whole, over) == "counter set gpu-0 memory: needs 80Gi, 0 left"


def test_allocator_reserves_counters_of_devices_it_tries():
    slices = partitioned()
    node = {"metadata": {"name": "n1", "labels": {}}}
    classes = {"gpu": {"metadata": {"name": "gpu"}, "spec": {}}}

    def claim(count):
        return {
            "metadata": {"namespace": "ns", "name": "new", "uid": "u"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu", "count": count}}]}},
        }

    # Two devices: both halves (the whole GPU's counters would leave nothing for a second).
    [results] = allocate(node, [claim(2)], slices, classes, allocated_state([]))
    assert sorted(r["device"] for r in results) == ["gpu-0-part-0", "gpu-0-part-1"]
    # Three cannot fit in 80Gi of counters.
    assert allocate(node, [claim(3)], slices, classes, allocated_state([])) is None
    # One half held elsewhere: the other half fits, the whole GPU does not.
    [results] = allocate(node, [claim(1)], slices, classes, allocated_state(allocated("gpu-0-part-0")))
    assert [r["device"] for r in results] == ["gpu-0-part-1"]
