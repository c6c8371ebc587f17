"""Kubernetes' standard device attributes (``resource.kubernetes.io/...``) of a PCI device, read
from sysfs exactly as upstream's helpers compute them (k8s.io/dynamic-resource-allocation@v0.37.1
``deviceattribute``: attribute.go, pci_linux.go, numa_linux.go), so a claim written against any
driver that publishes them matches our devices too.

``sysfs`` is the directory mounted at /sys; tests point it at a tree of their own.
"""

from __future__ import annotations

import os
import re
from typing import Any

PREFIX = "resource.kubernetes.io/"
PCIE_ROOT = PREFIX + "pcieRoot"  # string "pci<domain>:<bus>", the device's PCIe root complex
PCI_BUS_ID = PREFIX + "pciBusID"  # string, extended BDF "0000:3b:00.0"
NUMA_NODE = PREFIX + "numaNode"  # int, the kernel's numa_node; absent without NUMA affinity

# numa_linux.go maxNUMANodes: Linux's MAX_NUMNODES with CONFIG_NODES_SHIFT at most 10 (upstream
# checks it for nodes a driver gives, GetNUMANodeAttribute: here the simulated inventory's).
MAX_NUMA_NODES = 1024

# pci_linux.go verifyPCIBDFFormat: lower-case hex only, as sysfs names the devices.
_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
# attribute.go: the documented form of a pcieRoot value.
PCIE_ROOT_FORMAT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")
_INT = re.compile(r"[+-]?[0-9]+")


def valid_bus_id(bus_id: str) -> bool:
    return bool(_BDF.fullmatch(bus_id))


def pcie_root(bus_id: str, sysfs: str = "/sys") -> str | None:
    """pci_linux.go resolvePCIeRoot: read the link ``bus/pci/devices/<bus id>`` (one readlink,
    relative to its directory), which must lead to ``devices/pci.../<bus id>``; the root complex
    is the first directory under ``devices``. None where upstream returns an error (the
    attribute is then not published)."""
    if not valid_bus_id(bus_id):
        return None
    link = os.path.join("bus", "pci", "devices", bus_id)
    try:
        target = os.readlink(os.path.join(sysfs, link))
    except OSError:
        return None
    if os.path.isabs(target):
        # Upstream keeps an absolute target as it is, and then its "devices/pci" prefix check
        # refuses it; the kernel's links are relative.
        return None
    target = os.path.normpath(os.path.join(os.path.dirname(link), target))
    if not target.startswith(os.path.join("devices", "pci")) or os.path.basename(target) != bus_id:
        return None
    return target.split(os.sep)[1]


def numa_node(bus_id: str, sysfs: str = "/sys") -> int | None:
    """numa_linux.go readNUMANode: the integer in ``bus/pci/devices/<bus id>/numa_node``; None
    when it is missing or unreadable, and for -1 (no NUMA affinity: upstream refuses to publish
    it, since -1 would match every other NUMA-less device under matchAttribute)."""
    if not valid_bus_id(bus_id):
        return None
    try:
        with open(os.path.join(sysfs, "bus", "pci", "devices", bus_id, "numa_node")) as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not _INT.fullmatch(text):  # what Go's strconv.Atoi takes (Python's int() also takes "1_0")
        return None
    node = int(text)
    return node if node >= 0 else None


def numa_node_attribute(node: int) -> dict[str, Any]:
    """The scalar form (numa_linux.go makeNUMANodeScalarAttribute), which needs no feature gate;
    the list form of DRAListTypeAttributes is not published."""
    return {"int": node}


def pci_attributes(bus_id: str, sysfs: str = "/sys") -> dict[str, dict[str, Any]]:
    """pciBusID, pcieRoot and numaNode of a PCI device, each only where upstream's helper
    would succeed."""
    if not valid_bus_id(bus_id):
        return {}
    attributes: dict[str, dict[str, Any]] = {PCI_BUS_ID: {"string": bus_id}}
    if root := pcie_root(bus_id, sysfs):
        attributes[PCIE_ROOT] = {"string": root}
    node = numa_node(bus_id, sysfs)
    if node is not None:
        attributes[NUMA_NODE] = numa_node_attribute(node)
    return attributes
