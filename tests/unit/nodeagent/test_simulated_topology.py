"""The simulated inventory's NUMA nodes and PCIe roots (resource.kubernetes.io/numaNode and
pcieRoot), its NIC-like devices, and what reaches the ResourceSlices."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from operators.core.dra.allocator import allocate
from operators.core.dra.pools import AllocatedState
from operators.nodeagent.backends.deviceattribute import NUMA_NODE, PCIE_ROOT
from operators.nodeagent.backends.simulated import build_inventory
from operators.nodeagent.slices import split_into_slices
from operators.nodeagent.validation import split_valid

ROOT = Path(__file__).resolve().parents[3]


def topology(inventory) -> dict[str, tuple]:
    return {
        d["name"]: (d["attributes"].get(NUMA_NODE), d["attributes"].get(PCIE_ROOT, {}).get("string"))
        for d in inventory.devices
    }


def test_by_default_devices_alternate_between_two_numa_nodes():
    inventory = build_inventory(
        {"gpus": [{"count": 2, "partitions": 2}, {"count": 1}], "nics": [{"count": 2}]}, "n", "d"
    )
    assert not inventory.errors
    assert topology(inventory) == {
        "gpu-0": ({"int": 0}, "pci0000:00"),
        "gpu-0-part-0": ({"int": 0}, "pci0000:00"),  # a partition is where its GPU is
        "gpu-0-part-1": ({"int": 0}, "pci0000:00"),
        "gpu-1": ({"int": 1}, "pci0001:00"),
        "gpu-1-part-0": ({"int": 1}, "pci0001:00"),
        "gpu-1-part-1": ({"int": 1}, "pci0001:00"),
        "gpu-2": ({"int": 0}, "pci0000:00"),
        "nic-0": ({"int": 0}, "pci0000:00"),
        "nic-1": ({"int": 1}, "pci0001:00"),
    }


def test_numa_node_and_pcie_root_per_group_or_per_device():
    doc = yaml.safe_load("""
gpus:
- {count: 3, numaNode: [1, -1, 0], pcieRoot: [pci0000:80, pci0000:00, pci0000:40]}
- {count: 2, numaNode: 3}
nics:
- {model: SimNIC-200G, count: 1, numaNode: 1, pcieRoot: pci0000:80, attributes: {speed: {string: 200G}}}
""")
    inventory = build_inventory(doc, "n", "d")
    assert not inventory.errors
    assert topology(inventory) == {
        "gpu-0": ({"int": 1}, "pci0000:80"),
        "gpu-1": (None, "pci0000:00"),  # -1: no NUMA affinity, so no numaNode (as upstream)
        "gpu-2": ({"int": 0}, "pci0000:40"),
        "gpu-3": ({"int": 3}, "pci0003:00"),
        "gpu-4": ({"int": 3}, "pci0003:00"),
        "nic-0": ({"int": 1}, "pci0000:80"),
    }
    nic = inventory.devices[-1]
    assert nic == {
        "name": "nic-0",
        "attributes": {
            "type": {"string": "nic"},
            "productName": {"string": "SimNIC-200G"},
            "index": {"int": 0},
            NUMA_NODE: {"int": 1},
            PCIE_ROOT: {"string": "pci0000:80"},
            "speed": {"string": "200G"},
        },
    }
    # Without NUMA affinity and without a root given, neither attribute.
    assert topology(build_inventory({"gpus": [{"numaNode": -1}]}, "n", "d")) == {"gpu-0": (None, None)}


@pytest.mark.parametrize(
    "document, error",
    [
        ({"gpus": [{"numaNode": "0"}]}, "gpus[0].numaNode: '0' is not a NUMA node from -1 to 1023"),
        ({"gpus": [{"numaNode": 1024}]}, "gpus[0].numaNode: 1024 is not a NUMA node from -1 to 1023"),
        ({"gpus": [{"numaNode": True}]}, "gpus[0].numaNode: True is not a NUMA node"),
        ({"gpus": [{"count": 2, "numaNode": [0]}]}, "gpus[0].numaNode: 1 values for 2 devices"),
        ({"gpus": [{"pcieRoot": "0000:00"}]}, "gpus[0].pcieRoot: '0000:00' is not a PCIe root like pci0000:00"),
        ({"nics": [{"numaNode": -2}]}, "nics[0].numaNode: -2 is not a NUMA node"),
        ({"nics": [{"count": "x"}]}, "nics[0].count: 'x' is not a whole number"),
        ({"nics": [{"attributes": []}]}, "nics[0].attributes: [] is not a mapping"),
        ({"nics": ["x"]}, "nics[0]: must be a mapping"),
        ({"nics": 2}, "inventory: nics must be a list, not int"),
    ],
)
def test_wrong_topology_leaves_the_group_out_and_says_where(document, error):
    inventory = build_inventory(document, "n", "d")
    assert inventory.devices == [] and any(error in e for e in inventory.errors), inventory.errors


def test_unknown_nic_fields_are_reported_and_the_nics_published():
    inventory = build_inventory({"nics": [{"count": 1, "colour": "red"}]}, "n", "d")
    assert [d["name"] for d in inventory.devices] == ["nic-0"]
    assert inventory.errors == ["nics[0]: unknown field(s) colour"]


def test_slices_carry_the_attributes_with_upstreams_types():
    """numaNode an int, pcieRoot a string, both under resource.kubernetes.io, in the kind
    inventory the examples run on; the API server's limits hold for every device."""
    document = yaml.safe_load((ROOT / "kustomize" / "overlays" / "simulated-devices" / "inventory.yaml").read_text())
    inventory = build_inventory(document, "lab-node-0", "gpu.sim.dra-operators.dev")
    valid, errors = split_valid(inventory.devices, inventory.counter_sets)
    assert not inventory.errors and not errors and len(valid) == len(inventory.devices)
    published = [d for spec in split_into_slices(valid, inventory.counter_sets) for d in spec.get("devices", [])]
    nics = [d for d in published if d["attributes"]["type"] == {"string": "nic"}]
    assert nics, "the kind inventory has a NIC to align GPUs with"
    for device in published:
        numa = device["attributes"][NUMA_NODE]
        assert list(numa) == ["int"] and type(numa["int"]) is int
        assert list(device["attributes"][PCIE_ROOT]) == ["string"]
    gpus_by_numa = {
        d["attributes"][NUMA_NODE]["int"] for d in published if d["attributes"]["type"] == {"string": "gpu"}
    }
    assert gpus_by_numa == {0, 1}, "whole GPUs on both NUMA nodes: the constraint has a choice to make"


def test_the_numa_aligned_example_needs_its_constraint():
    """Our port of the scheduler's allocator over the kind inventory: the example's claim gets
    nic-0 and a GPU on its NUMA node (gpu-1); without the constraint, the first GPU (gpu-0, on
    the other node) would do. The lab test shows kube-scheduler doing the same."""
    node = "lab-node-0"
    driver = "gpu.sim.dra-operators.dev"
    document = yaml.safe_load((ROOT / "kustomize" / "overlays" / "simulated-devices" / "inventory.yaml").read_text())
    inventory = build_inventory(document, node, driver)
    specs = split_into_slices(inventory.devices, inventory.counter_sets)
    pool = {"name": node, "generation": 1, "resourceSliceCount": len(specs)}
    slices = [
        {"metadata": {"name": f"slice-{i}"}, "spec": {"driver": driver, "nodeName": node, "pool": pool, **spec}}
        for i, spec in enumerate(specs)
    ]
    classes = {
        c["metadata"]["name"]: c
        for c in yaml.safe_load_all((ROOT / "config" / "deviceclasses" / "gpu.sim.dra-operators.dev.yaml").read_text())
    }
    [template] = [
        d
        for d in yaml.safe_load_all((ROOT / "config" / "examples" / "numa-aligned" / "example.yaml").read_text())
        if d["kind"] == "ResourceClaimTemplate"
    ]
    claim = {"metadata": {"name": "c", "namespace": "ns", "uid": "u"}, "spec": template["spec"]["spec"]}
    node_object = {"metadata": {"name": node, "labels": {}}, "status": {}}

    def devices(claim):
        [results] = allocate(node_object, [claim], copy.deepcopy(slices), classes, AllocatedState())
        return {r["request"]: r["device"] for r in results}

    assert devices(claim) == {"gpu": "gpu-1", "nic": "nic-0"}
    unconstrained = copy.deepcopy(claim)
    del unconstrained["spec"]["devices"]["constraints"]
    assert devices(unconstrained) == {"gpu": "gpu-0", "nic": "nic-0"}
