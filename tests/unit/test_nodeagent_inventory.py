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
    assert inv.devices[1]["consumesCounters"] == [{"counterSet": "gpu-0-counters",
                                                   "counters": {"memory": {"value": "40Gi"}}}]
    shared = inv.devices[-1]
    assert inv.devices[1]["capacity"]["memory"]["value"] == "40Gi"
    assert shared["allowMultipleAllocations"] and shared["bindsToNode"]
    assert shared["capacity"]["memory"]["requestPolicy"] == {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}}
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
        "gpu-0": ("xid", "79"), "gpu-3": ("gpu-lost", ""), "gpu-5": ("ecc", "double-bit")}
