import pytest
import yaml

from operators.nodeagent.backends.simulated import build_inventory, parse_health_annotation
from operators.nodeagent.slices import split_into_slices
from operators.nodeagent.validation import split_valid


def test_gpus_partitions_and_policies():
    doc = yaml.safe_load("""
gpus:
- {model: M, memory: 80Gi, count: 2, partitions: 2}
- {model: S, memory: 10Gi, count: 1, allowMultipleAllocations: true,
   memoryPolicy: {default: 1Gi, min: 1Gi, step: 1Gi},
   bindingConditions: [attached], bindingFailureConditions: [failed], bindsToNode: true}
""")
    inv = build_inventory(doc, "n1", "d")
    names = [d["name"] for d in inv.devices]
    assert names == ["gpu-0", "gpu-0-part-0", "gpu-0-part-1", "gpu-1", "gpu-1-part-0", "gpu-1-part-1", "gpu-2"]
    assert [c["name"] for c in inv.counter_sets] == ["gpu-0-counters", "gpu-1-counters"]
    assert inv.devices[1]["consumesCounters"] == [
        {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}
    ]
    shared = inv.devices[-1]
    assert inv.devices[1]["capacity"]["memory"]["value"] == "40Gi"
    assert shared["allowMultipleAllocations"] and shared["bindsToNode"]
    assert shared["capacity"]["memory"]["requestPolicy"] == {
        "default": "1Gi",
        "validRange": {"min": "1Gi", "step": "1Gi"},
    }
    assert not inv.errors
    # uuids are stable per node and differ between nodes
    assert build_inventory(doc, "n1", "d").devices[0] == inv.devices[0]
    assert build_inventory(doc, "n2", "d").devices[0]["attributes"]["uuid"] != inv.devices[0]["attributes"]["uuid"]


def test_per_node_override_and_unknown_fields():
    doc = {"gpus": [{"count": 1}], "nodes": {"big": {"gpus": [{"count": 3, "colour": "red"}]}}}
    assert len(build_inventory(doc, "small", "d").devices) == 1
    big = build_inventory(doc, "big", "d")
    assert len(big.devices) == 3 and big.errors == ["gpus[0]: unknown field(s) colour"]
    assert build_inventory(["not", "a", "mapping"], "n", "d").errors


def test_validation_names_device_and_field():
    devices = [
        {"name": "ok"},
        {"name": "long", "attributes": {"model": {"string": "x" * 65}}},
        {"name": "many", "attributes": {f"a{i}": {"int": i} for i in range(33)}},
        {"name": "Bad_Name"},
        {"name": "ver", "attributes": {"v": {"version": "1.2"}}},
        {"name": "cap", "capacity": {"memory": {"value": "lots"}}},
        {"name": "ok"},
    ]
    valid, errors = split_valid(devices)
    assert [d["name"] for d in valid] == ["ok"]
    text = "\n".join(errors)
    assert "device 'long': attributes[model]: 65 bytes, at most 64" in text
    assert "device 'many': attributes and capacity: 33 entries, at most 32" in text
    assert "device 'Bad_Name': name 'Bad_Name': must be a DNS label" in text
    assert "device 'ver': attributes[v]: '1.2' is not a semantic version" in text
    assert "device 'cap': capacity[memory].value" in text
    assert "device 'ok': name: duplicate device name" in text


def test_slices_of_128_or_64_and_counter_sets_first():
    devices = [{"name": f"d{i}"} for i in range(300)]
    assert [len(s["devices"]) for s in split_into_slices(devices)] == [128, 128, 44]
    devices[5]["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert [len(s["devices"]) for s in split_into_slices(devices)] == [64] * 4 + [44]
    specs = split_into_slices([{"name": "x"}], [{"name": f"c{i}"} for i in range(9)])
    assert [list(s) for s in specs] == [["sharedCounters"], ["sharedCounters"], ["devices"]]
    assert len(specs[0]["sharedCounters"]) == 8


def test_health_annotation():
    assert parse_health_annotation("gpu-0=xid:79, gpu-3=lost,gpu-5=ecc:double-bit,junk") == {
        "gpu-0": ("xid", "79"),
        "gpu-3": ("gpu-lost", ""),
        "gpu-5": ("ecc", "double-bit"),
    }


@pytest.mark.parametrize(
    "document, error",
    [
        ({"gpus": 3}, "inventory: gpus must be a list, not int"),
        ({"devices": {"a": 1}}, "inventory: devices must be a list, not dict"),
        ({"nodes": "n1"}, "inventory: nodes must map node names to inventories"),
        ({"nodes": {"n1": ["x"]}}, "inventory: nodes[n1] must be a mapping"),
        ({"gpus": [{"count": "four"}]}, "gpus[0].count: 'four' is not a whole number from 0 to 4096"),
        ({"gpus": [{"count": 10**9}]}, "gpus[0].count: 1000000000 is not a whole number from 0 to 4096"),
        ({"gpus": [{"partitions": "two"}]}, "gpus[0].partitions: 'two' is not a whole number from 0 to 64"),
        ({"gpus": [{"memory": "lots", "partitions": 2}]}, "gpus[0].memory: 'lots' is not a quantity like 80Gi"),
        ({"gpus": [{"attributes": ["a"]}]}, "gpus[0].attributes: ['a'] is not a mapping"),
        (
            {"gpus": [{"memoryPolicy": "x", "allowMultipleAllocations": True}]},
            "gpus[0].memoryPolicy: 'x' is not a mapping",
        ),
        ({"gpus": [{"bindingConditions": "attached"}]}, "gpus[0].bindingConditions: 'attached' is not a list"),
        ({"gpus": [{"bindsToNode": "yes"}]}, "gpus[0].bindsToNode: 'yes' is not true or false"),
        ({"gpus": [{"memory": "16Gi", "partitions": 3}]}, "16Gi of memory does not split into 3 equal partitions"),
    ],
)
def test_wrong_types_are_errors_never_exceptions(document, error):
    inventory = build_inventory(document, "n1", "d")
    assert inventory.devices == [] and any(error in e for e in inventory.errors), inventory.errors


def test_a_group_left_out_keeps_the_names_of_the_next_groups():
    inventory = build_inventory({"gpus": [{"count": 2, "partitions": "x"}, {"count": 1}]}, "n1", "d")
    assert [d["name"] for d in inventory.devices] == ["gpu-2"]


def test_devices_of_any_shape_are_problems_never_exceptions():
    devices = [
        "gpu-9",
        {"name": "attrs", "attributes": ["a"]},
        {"name": "value", "attributes": {"a": "string-ish"}},
        {"name": "cap", "capacity": {"mem": "1Gi"}},
        {"name": "int", "attributes": {"a": {"int": "5"}}},
        {"name": "shared", "allowMultipleAllocations": "yes"},
        {"name": "taint", "taints": [{"key": "k", "effect": "Evict"}]},
        {"name": "bind", "bindingConditions": ["attached"]},
        {"name": "extra", "colour": "blue"},
        {"name": "node", "nodeName": "n1"},
        {"name": "ok"},
    ]
    valid, errors = split_valid(devices)
    assert [d["name"] for d in valid] == ["ok"]
    text = "\n".join(errors)
    for expected in (
        "'gpu-9' is not a mapping",
        "device 'attrs': attributes: ['a'] is not a mapping",
        "device 'value': attributes[a]: 'string-ish' must be a mapping with exactly one of",
        "device 'cap': capacity[mem]: '1Gi' must be a mapping like {value: 16Gi}",
        "device 'int': attributes[a]: int value '5' is not an integer",
        "device 'shared': allowMultipleAllocations: 'yes' is not true or false",
        "device 'taint': taints[0]: needs a key and an effect",
        "device 'bind': bindingConditions: bindingFailureConditions are required",
        "device 'extra': unknown field(s) colour",
        "device 'node': unknown field(s) nodeName",
    ):
        assert expected in text, expected


def test_counters_must_exist_and_hold_what_a_device_consumes():
    inventory = build_inventory(
        {
            "gpus": [{"count": 1, "memory": "16Gi", "partitions": 2}],
            "devices": [
                {
                    "name": "nowhere",
                    "consumesCounters": [{"counterSet": "nope", "counters": {"memory": {"value": "1Gi"}}}],
                },
                {
                    "name": "greedy",
                    "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "32Gi"}}}],
                },
                {
                    "name": "odd",
                    "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"cores": {"value": "1"}}}],
                },
                {
                    "name": "half",
                    "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "8Gi"}}}],
                },
            ],
        },
        "n1",
        "d",
    )
    valid, errors = split_valid(inventory.devices, inventory.counter_sets)
    assert [d["name"] for d in valid] == ["gpu-0", "gpu-0-part-0", "gpu-0-part-1", "half"]
    text = "\n".join(errors)
    assert "device 'nowhere': consumesCounters[0]: counter set 'nope' does not exist in this pool" in text
    assert (
        "device 'greedy': consumesCounters[0].counters[memory]: consumes 32Gi, more than counter set "
        "'gpu-0-counters' holds (16Gi)" in text
    )
    assert "device 'odd': consumesCounters[0]: counter 'cores' is not in counter set 'gpu-0-counters'" in text


def test_a_request_policy_the_api_server_would_refuse_leaves_the_device_out():
    inventory = build_inventory(
        {
            "gpus": [
                {
                    "count": 1,
                    "memory": "16Gi",
                    "allowMultipleAllocations": True,
                    "memoryPolicy": {"default": "1Gi", "min": "2Gi"},
                }
            ]
        },
        "n1",
        "d",
    )
    valid, errors = split_valid(inventory.devices, inventory.counter_sets)
    assert valid == [] and errors == [
        "device 'gpu-0': capacity[memory].requestPolicy: default 1Gi is less than min 2Gi"
    ]
