"""Standard attributes from sysfs, on real directory trees laid out as the kernel lays out
/sys (cases after upstream's deviceattribute pci_linux_test.go and numa_linux_test.go), and the
nvml backend publishing them for the strict NVML model's GPUs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operators.nodeagent.backends.deviceattribute import (
    NUMA_NODE,
    PCI_BUS_ID,
    PCIE_ROOT,
    numa_node,
    pci_attributes,
    pcie_root,
)
from operators.nodeagent.backends.nvml import NvmlBackend
from tests.nvmlmodel import eight_gpu_machine

BUS_ID = "0000:02:00.0"


def pci_device(sysfs: Path, bus_id: str, under: str = "pci0000:00/0000:00:01.0", numa: str | None = None) -> None:
    """``devices/<under>/<bus id>`` and the kernel's relative link to it from bus/pci/devices."""
    device = sysfs / "devices" / under / bus_id
    device.mkdir(parents=True)
    if numa is not None:
        (device / "numa_node").write_text(numa)
    links = sysfs / "bus" / "pci" / "devices"
    links.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.join("..", "..", "..", "devices", under, bus_id), links / bus_id)


def test_pcie_root_is_the_first_directory_under_devices(tmp_path):
    pci_device(tmp_path, BUS_ID, under="pci0000:00/0000:00:01.0/0000:01:00.0")
    assert pcie_root(BUS_ID, str(tmp_path)) == "pci0000:00"
    pci_device(tmp_path, "0001:81:00.0", under="pci0001:80")
    assert pcie_root("0001:81:00.0", str(tmp_path)) == "pci0001:80"


@pytest.mark.parametrize(
    "bus_id, under, link",
    [
        ("", None, None),  # upstream: "PCI Bus ID cannot be empty"
        ("invalid-pci-id", None, None),  # "invalid PCI Bus ID format"
        ("000A:02:00.0", None, None),  # upstream's format: lower-case hex, as sysfs spells it
        (BUS_ID, None, None),  # no such device
        (BUS_ID, "invalid-pci-root/0000:01:00.0", None),  # "it must start with devices/pci"
        (
            BUS_ID,
            "pci0000:00/0000:01:00.0",
            "../../../devices/pci0000:00/0000:01:00.0/0000:00:13.1",
        ),  # must end with it
        (BUS_ID, "pci0000:00", "/sys/devices/pci0000:00/0000:02:00.0"),  # absolute: upstream refuses it
    ],
)
def test_pcie_root_is_none_where_upstream_returns_an_error(tmp_path, bus_id, under, link):
    if under:
        (tmp_path / "devices" / under / BUS_ID).mkdir(parents=True)
        (tmp_path / "devices" / under / "0000:00:13.1").mkdir(parents=True)
        links = tmp_path / "bus" / "pci" / "devices"
        links.mkdir(parents=True)
        os.symlink(link or os.path.join("..", "..", "..", "devices", under, BUS_ID), links / BUS_ID)
    assert pcie_root(bus_id, str(tmp_path)) is None


@pytest.mark.parametrize(
    "content, expected",
    [("4\n", 4), ("0\n", 0), ("+2\n", 2), ("-1\n", None), ("", None), ("x\n", None), ("1_0\n", None), (None, None)],
)
def test_numa_node_from_sysfs(tmp_path, content, expected):
    """-1 is "no NUMA affinity" (upstream refuses to publish it); a missing or unreadable file
    gives no attribute either."""
    pci_device(tmp_path, BUS_ID, numa=content)
    assert numa_node(BUS_ID, str(tmp_path)) == expected


def test_pci_attributes_have_upstreams_names_and_types(tmp_path):
    pci_device(tmp_path, BUS_ID, numa="1\n")
    assert pci_attributes(BUS_ID, str(tmp_path)) == {
        "resource.kubernetes.io/pciBusID": {"string": BUS_ID},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        "resource.kubernetes.io/numaNode": {"int": 1},
    }
    pci_device(tmp_path, "0000:03:00.0", numa="-1\n")
    assert pci_attributes("0000:03:00.0", str(tmp_path)) == {
        PCI_BUS_ID: {"string": "0000:03:00.0"},
        PCIE_ROOT: {"string": "pci0000:00"},
    }
    assert pci_attributes("0000:04:00.0", str(tmp_path)) == {PCI_BUS_ID: {"string": "0000:04:00.0"}}
    assert pci_attributes("not-a-bus-id", str(tmp_path)) == {}


def test_nvml_gpus_and_their_mig_devices_carry_the_sysfs_attributes(tmp_path):
    """NVML's bus id ("00000000:18:00.0") names the device in sysfs as "0000:18:00.0"; GPUs
    0-3 on NUMA node 0, 4-6 on 1, GPU 7 (with MIG) without NUMA affinity."""
    model = eight_gpu_machine()
    for minor in range(8):
        bus_id = model.gpu(minor).bus_id.lower()[-12:]
        numa = "-1" if minor == 7 else str(minor // 4)
        pci_device(tmp_path, bus_id, under=f"pci0000:{minor * 16:02x}", numa=numa + "\n")
    devices = {
        d["name"]: d["attributes"]
        for d in NvmlBackend("gpu.nvidia.com", nvml=model, sysfs_root=str(tmp_path)).discover().devices
    }
    assert devices["gpu-0"][NUMA_NODE] == {"int": 0} and devices["gpu-5"][NUMA_NODE] == {"int": 1}
    assert devices["gpu-5"][PCIE_ROOT] == {"string": "pci0000:50"}
    mig = devices["gpu-7-mig-19-6-1"]
    assert NUMA_NODE not in mig and mig[PCIE_ROOT] == {"string": "pci0000:70"}


def test_nvml_without_sysfs_publishes_the_bus_id_only(tmp_path):
    devices = NvmlBackend("gpu.nvidia.com", nvml=eight_gpu_machine(), sysfs_root=str(tmp_path)).discover().devices
    assert all(PCI_BUS_ID in d["attributes"] for d in devices)
    assert not any(NUMA_NODE in d["attributes"] or PCIE_ROOT in d["attributes"] for d in devices)
