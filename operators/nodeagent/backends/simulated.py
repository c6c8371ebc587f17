"""Simulated devices from a YAML inventory, for kind, the lab and demos.

Inventory format (one file for every node, optionally with per-node overrides)::

    gpus:                       # groups of identical GPUs, named gpu-0, gpu-1, ...
    - model: LabGPU-80G         # productName
      memory: 80Gi              # capacity "memory"
      count: 4
      architecture: Hopper      # optional
      partitions: 2             # optional: also gpu-<i>-part-<j>, sharing the GPU's counters
      allowMultipleAllocations: true   # optional, with memoryPolicy: {default, min, step}
      memoryPolicy: {default: 1Gi, min: 1Gi, step: 1Gi}
      bindingConditions: [attached]            # optional, with bindingFailureConditions
      bindingFailureConditions: [attach-failed]
      bindsToNode: true
      numaNode: 0               # optional: resource.kubernetes.io/numaNode of every GPU of the group,
                                # or a list with one per GPU; -1 is no NUMA affinity (no attribute).
                                # Default: the GPU's index modulo 2 (two NUMA nodes)
      pcieRoot: pci0000:00      # optional: resource.kubernetes.io/pcieRoot, one or a list; default
                                # pci<numaNode as 4 hex digits>:00 (one root complex per NUMA node)
    nics:                       # optional: groups of NIC-like devices, named nic-0, nic-1, ...
    - model: SimNIC-200G        # productName; type is "nic"
      count: 2
      numaNode: [0, 1]          # and pcieRoot, attributes: as for gpus (same defaults)
    devices:                    # optional extra devices, published as written (after validation)
    - name: fpga-0
      attributes: {type: {string: fpga}}
    nodes:                      # optional: a whole inventory per node name, replacing the above
      node-a: {gpus: [...]}
    nvidiaContainerToolkit: true   # optional: prepared GPUs also get the NVIDIA Container Toolkit's
                                # CDI device named by their uuid (or index), as on a node with
                                # real GPUs (tests the runtime's injection of a stand-in spec)

Health is injected through the agent's own Node: the annotation
``nodeagent.dra-operators.dev/simulated-health: "gpu-0=xid:79,gpu-3=lost,gpu-5=ecc:double-bit"``
lists the devices failing now. A device that leaves the list passes its health check again and
loses its taint after the quiet period.

Prepare failures are injected the same way: while the annotation
``nodeagent.dra-operators.dev/simulated-prepare-failure: "gpu-0,gpu-2"`` lists a device,
NodePrepareResources of a claim with that device fails for that claim (kubelet retries it).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import yaml

from ...core.dra.quantity import format_binary, parse_quantity
from ..health import ECC, LOST, XID, HealthEvent
from ..plugin.cdi import env_key
from . import deviceattribute
from .base import BackendError, Inventory

HEALTH_ANNOTATION = "nodeagent.dra-operators.dev/simulated-health"
PREPARE_FAILURE_ANNOTATION = "nodeagent.dra-operators.dev/simulated-prepare-failure"
_GROUP_KEYS = {
    "model",
    "memory",
    "count",
    "architecture",
    "partitions",
    "allowMultipleAllocations",
    "memoryPolicy",
    "bindingConditions",
    "bindingFailureConditions",
    "bindsToNode",
    "attributes",
    "numaNode",
    "pcieRoot",
}
_NIC_KEYS = {"model", "count", "attributes", "numaNode", "pcieRoot"}
NUMA_NODES = 2  # the default topology: devices alternate between NUMA nodes 0 and 1
_LIMITS = {"count": 4096, "partitions": 64}  # GPUs per group, partitions per GPU


def parse_health_annotation(text: str) -> dict[str, tuple[str, str]]:
    """``gpu-0=xid:79,gpu-3=lost`` -> {"gpu-0": ("xid", "79"), "gpu-3": ("gpu-lost", "")}."""
    failing: dict[str, tuple[str, str]] = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        device, _, fault = item.partition("=")
        kind, _, value = fault.partition(":")
        kind = {"lost": LOST, "xid": XID, "ecc": ECC}.get(kind.strip(), "")
        if device and kind:
            failing[device.strip()] = (kind, value.strip())
    return failing


def _count(group: dict[str, Any], key: str, default: int, where: str) -> tuple[int, str | None]:
    """A whole number from 0 to the field's limit, and the problem when it is not one."""
    value = group.get(key, default)
    if value is None:
        return default, None
    try:
        number = int(value) if not isinstance(value, (bool, float)) else None
    except (TypeError, ValueError):
        number = None
    if number is None or not 0 <= number <= _LIMITS[key]:
        return 0, f"{where}.{key}: {value!r} is not a whole number from 0 to {_LIMITS[key]}"
    return number, None


def _group_problems(group: dict[str, Any], where: str) -> list[str]:
    """Fields of a ``gpus`` entry whose type is wrong: such a group is not published at all,
    since what it meant cannot be known."""
    problems = []
    for key, kind, words in (
        ("attributes", dict, "a mapping of attribute names to values"),
        ("memoryPolicy", dict, "a mapping with default, min, max and step"),
        ("bindingConditions", list, "a list of condition names"),
        ("bindingFailureConditions", list, "a list of condition names"),
        ("allowMultipleAllocations", bool, "true or false"),
        ("bindsToNode", bool, "true or false"),
    ):
        if group.get(key) is not None and not isinstance(group[key], kind):
            problems.append(f"{where}.{key}: {group[key]!r} is not {words}")
    try:
        parse_quantity(str(group.get("memory", "16Gi")))
    except ValueError:
        problems.append(f"{where}.memory: {group.get('memory')!r} is not a quantity like 80Gi")
    return problems


def _per_device(group: dict[str, Any], key: str, count: int, where: str, valid, words: str) -> tuple[list, str | None]:
    """``key`` of a group for each of its ``count`` devices (None where unset): one value for all
    of them or a list with one per device; and the problem when it is neither."""
    value = group.get(key)
    values = value if isinstance(value, list) else [value] * count
    if isinstance(value, list) and len(value) != count:
        return [], f"{where}.{key}: {len(value)} values for {count} devices; give one value or one per device"
    if not all(v is None or valid(v) for v in values):
        return [], f"{where}.{key}: {value!r} is not {words}, or a list of them with one per device"
    return values, None


def _valid_numa(value: Any) -> bool:
    return type(value) is int and -1 <= value < deviceattribute.MAX_NUMA_NODES


def _valid_root(value: Any) -> bool:
    return isinstance(value, str) and bool(deviceattribute.PCIE_ROOT_FORMAT.fullmatch(value))


def _topologies(group: dict[str, Any], start: int, count: int, where: str) -> tuple[list[dict], list[str]]:
    """resource.kubernetes.io/numaNode and pcieRoot of each device of a group (upstream's names
    and types: deviceattribute/attribute.go), and the problems of the group's fields.

    Unset, a device's NUMA node is its index modulo 2, and its root complex one per NUMA node;
    -1 (sysfs' "no NUMA affinity") publishes no numaNode, as upstream's helper refuses to."""
    nodes, problem = _per_device(
        group, "numaNode", count, where, _valid_numa, f"a NUMA node from -1 to {deviceattribute.MAX_NUMA_NODES - 1}"
    )
    roots, problem2 = _per_device(group, "pcieRoot", count, where, _valid_root, "a PCIe root like pci0000:00")
    problems = [p for p in (problem, problem2) if p]
    if problems:
        return [], problems
    topologies = []
    for offset, (node, root) in enumerate(zip(nodes, roots, strict=True)):
        node = (start + offset) % NUMA_NODES if node is None else node
        if root is None and node >= 0:
            root = f"pci{node:04x}:00"
        topology: dict[str, Any] = {}
        if node >= 0:
            topology[deviceattribute.NUMA_NODE] = deviceattribute.numa_node_attribute(node)
        if root:
            topology[deviceattribute.PCIE_ROOT] = {"string": root}
        topologies.append(topology)
    return topologies, []


def _gpu_devices(group: dict[str, Any], start: int, node: str, driver: str, where: str) -> tuple[list, list, list]:
    devices, counter_sets, errors = [], [], []
    unknown = set(group) - _GROUP_KEYS
    if unknown:
        errors.append(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    count, problem = _count(group, "count", 1, where)
    partitions, problem2 = _count(group, "partitions", 0, where)
    topologies, topology_problems = _topologies(group, start, count, where) if not problem else ([], [])
    problems = [p for p in (problem, problem2) if p] + _group_problems(group, where) + topology_problems
    memory = str(group.get("memory", "16Gi"))
    if not problems and partitions and parse_quantity(memory) % partitions:
        # Counters must add up: every partition's share of the GPU's memory counter is whole bytes.
        problems.append(
            f"{where}.partitions: {memory} of memory does not split into {partitions} equal "
            f"partitions of whole bytes; choose a partition count that divides it"
        )
    if problems:
        return [], [], errors + [f"{p} (its GPUs are not published)" for p in problems]
    for i in range(start, start + count):
        name = f"gpu-{i}"
        attributes: dict[str, Any] = {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{driver}/{name}"))},
            "productName": {"string": str(group.get("model", "Simulated GPU"))},
            "index": {"int": i},
            "driverVersion": {"version": "1.0.0"},
        }
        if group.get("architecture"):
            attributes["architecture"] = {"string": str(group["architecture"])}
        attributes.update(topologies[i - start])  # its partitions share it
        for key, value in (group.get("attributes") or {}).items():
            attributes[key] = value
        capacity: dict[str, Any] = {"memory": {"value": memory}}
        device: dict[str, Any] = {"name": name, "attributes": attributes, "capacity": capacity}
        if group.get("allowMultipleAllocations"):
            device["allowMultipleAllocations"] = True
            policy = group.get("memoryPolicy") or {}
            if policy:
                capacity["memory"]["requestPolicy"] = {
                    "default": str(policy.get("default", policy.get("min", "1Gi"))),
                    "validRange": {k: str(policy[k]) for k in ("min", "max", "step") if k in policy},
                }
        for key in ("bindingConditions", "bindingFailureConditions"):
            if group.get(key):
                device[key] = list(group[key])
        if group.get("bindsToNode"):
            device["bindsToNode"] = True
        if partitions:
            counter_set = f"{name}-counters"
            counter_sets.append({"name": counter_set, "counters": {"memory": {"value": memory}}})
            device["consumesCounters"] = [{"counterSet": counter_set, "counters": {"memory": {"value": memory}}}]
        devices.append(device)
        if partitions:
            share_text = format_binary(parse_quantity(memory) / partitions)
            for j in range(partitions):
                devices.append(
                    {
                        "name": f"{name}-part-{j}",
                        "attributes": {
                            **attributes,
                            "type": {"string": "partition"},
                            "partition": {"int": j},
                            "parentUUID": attributes["uuid"],
                            "uuid": {
                                "string": "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{driver}/{name}/{j}"))
                            },
                        },
                        "capacity": {"memory": {"value": share_text}},
                        "consumesCounters": [
                            {"counterSet": counter_set, "counters": {"memory": {"value": share_text}}}
                        ],
                    }
                )
    return devices, counter_sets, errors


def _nic_devices(group: dict[str, Any], start: int, where: str) -> tuple[list, list]:
    """NIC-like devices ``nic-<i>``: something to align GPUs with (matchAttribute on
    resource.kubernetes.io/numaNode or pcieRoot); they have nothing to hand over but the
    environment variables every simulated device gets."""
    errors = []
    unknown = set(group) - _NIC_KEYS
    if unknown:
        errors.append(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    count, problem = _count(group, "count", 1, where)
    topologies, problems = _topologies(group, start, count, where) if not problem else ([], [problem])
    if group.get("attributes") is not None and not isinstance(group["attributes"], dict):
        problems.append(f"{where}.attributes: {group['attributes']!r} is not a mapping of attribute names to values")
    if problems:
        return [], errors + [f"{p} (its NICs are not published)" for p in problems]
    devices = []
    for i in range(start, start + count):
        attributes: dict[str, Any] = {
            "type": {"string": "nic"},
            "productName": {"string": str(group.get("model", "Simulated NIC"))},
            "index": {"int": i},
            **topologies[i - start],
        }
        attributes.update(group.get("attributes") or {})
        devices.append({"name": f"nic-{i}", "attributes": attributes})
    return devices, errors


def build_inventory(document: Any, node: str, driver: str) -> Inventory:
    """The inventory for ``node`` from a parsed YAML document (pure). Whatever the document
    holds, the answer is an inventory: what cannot be used is an error naming where it is."""
    if not isinstance(document, dict):
        return Inventory(errors=["inventory: the top level must be a mapping with 'gpus', 'nics' and/or 'devices'"])
    nodes = document.get("nodes") or {}
    if not isinstance(nodes, dict):
        return Inventory(errors=["inventory: nodes must map node names to inventories"])
    if node in nodes:
        document = nodes[node] or {}
        if not isinstance(document, dict):
            return Inventory(
                errors=[f"inventory: nodes[{node}] must be a mapping with 'gpus', 'nics' and/or 'devices'"]
            )
    inventory = Inventory()
    for key in ("gpus", "nics", "devices"):
        if not isinstance(document.get(key) or [], list):
            inventory.errors.append(f"inventory: {key} must be a list, not {type(document[key]).__name__}")
    index = 0
    for g, group in enumerate(document.get("gpus") or [] if isinstance(document.get("gpus") or [], list) else []):
        if not isinstance(group, dict):
            inventory.errors.append(f"gpus[{g}]: must be a mapping")
            continue
        devices, counter_sets, errors = _gpu_devices(group, index, node, driver, f"gpus[{g}]")
        index += _count(group, "count", 1, "")[0]  # a group left out keeps the next groups' names
        inventory.devices += devices
        inventory.counter_sets += counter_sets
        inventory.errors += errors
    index = 0
    for g, group in enumerate(document.get("nics") or [] if isinstance(document.get("nics") or [], list) else []):
        if not isinstance(group, dict):
            inventory.errors.append(f"nics[{g}]: must be a mapping")
            continue
        devices, errors = _nic_devices(group, index, f"nics[{g}]")
        index += _count(group, "count", 1, "")[0]
        inventory.devices += devices
        inventory.errors += errors
    for d, device in enumerate(
        document.get("devices") or [] if isinstance(document.get("devices") or [], list) else []
    ):
        if not isinstance(device, dict) or "name" not in device:
            inventory.errors.append(f"devices[{d}]: must be a mapping with a name")
            continue
        inventory.devices.append(device)
    return inventory


def _toolkit_names(device: dict[str, Any]) -> list[str]:
    attributes = device["attributes"]
    names = [str(attributes["uuid"].get("string"))]
    if "index" in attributes and "partition" not in attributes:  # a partition is no GPU of its own
        names.append(str(attributes["index"].get("int")))
    return names


class SimulatedBackend:
    name = "simulated"

    def __init__(self, path: str, node_name: str, driver: str, poll_interval: float = 1.0):
        self.path = path
        self.node_name = node_name
        self.driver = driver
        self.poll_interval = poll_interval
        self._failing: dict[str, tuple[str, str]] = {}
        self._prepare_failures: set[str] = set()
        self._events: asyncio.Queue[HealthEvent] | None = None
        self._mtime = self._stat()
        self._toolkit_names: dict[str, list[str]] | None = None

    def _stat(self) -> float | None:
        try:
            return os.stat(self.path).st_mtime
        except OSError:
            return None

    def discover(self) -> Inventory:
        try:
            with open(self.path) as f:
                document = yaml.safe_load(f)
        except OSError as e:
            raise BackendError(f"cannot read the inventory {self.path}: {e.strerror}") from e
        except yaml.YAMLError as e:
            raise BackendError(f"inventory {self.path} does not parse: {e}") from e
        except UnicodeDecodeError as e:
            raise BackendError(f"inventory {self.path} is not UTF-8 text: {e}") from e
        except RecursionError:  # PyYAML composes recursively: nesting past the stack
            raise BackendError(f"inventory {self.path} is nested too deeply to be an inventory") from None
        inventory = build_inventory(document, self.node_name, self.driver)
        toolkit = isinstance(document, dict) and document.get("nvidiaContainerToolkit") is True
        self._toolkit_names = (
            {d["name"]: _toolkit_names(d) for d in inventory.devices if "uuid" in (d.get("attributes") or {})}
            if toolkit
            else None
        )
        return inventory

    def toolkit_names(self, device: str) -> list[str] | None:
        """With ``nvidiaContainerToolkit: true``: the names the toolkit's CDI spec may give the
        device, its uuid, then its index (as ``nvidia-ctk cdi generate`` names GPUs)."""
        if self._toolkit_names is None:
            return None
        return self._toolkit_names.get(device)

    def healthy(self, device: str) -> bool:
        return device not in self._failing

    def container_edits(
        self,
        device: str,
        claim: dict[str, str],
        share_id: str | None,
        admin_access: bool,
        config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Simulated devices have nothing to hand over: environment variables say which device
        and claim the container got, so a workload (and a test) can print them; a configuration
        shows as its own variables plus ``<key>_SHARING_STRATEGY`` and ``<key>_TIMESLICE_INTERVAL``
        (the example driver's names)."""
        if device in self._prepare_failures:
            raise BackendError(
                f"simulated prepare failure of device {device} (Node annotation {PREPARE_FAILURE_ANNOTATION})"
            )
        key = "DRA_DEVICE_" + env_key(device)
        env = [
            f"{key}={device}",
            f"{key}_RESOURCE_CLAIM={claim['uid']}",
            f"{key}_CLAIM={claim['namespace']}/{claim['name']}",
            f"{key}_ADMIN_ACCESS={'true' if admin_access else 'false'}",
        ]
        if share_id:
            env.append(f"{key}_SHARE_ID={share_id}")
        sharing = (config or {}).get("sharing")
        if sharing:
            env.append(f"{key}_SHARING_STRATEGY={sharing['strategy']}")
            if sharing.get("timeSlicingConfig"):
                env.append(f"{key}_TIMESLICE_INTERVAL={sharing['timeSlicingConfig']['interval']}")
        env += [f"{name}={value}" for name, value in sorted(((config or {}).get("env") or {}).items())]
        return {"env": env}

    def common_edits(self) -> dict[str, Any] | None:
        return {"env": [f"DRA_DRIVER_NAME={self.driver}", f"KUBERNETES_NODE_NAME={self.node_name}"]}

    def observe_node(self, node: dict[str, Any]) -> None:
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        self._prepare_failures = {
            d.strip() for d in annotations.get(PREPARE_FAILURE_ANNOTATION, "").split(",") if d.strip()
        }
        annotation = annotations.get(HEALTH_ANNOTATION, "")
        failing = parse_health_annotation(annotation)
        for device, (kind, value) in failing.items():
            if self._failing.get(device) != (kind, value) and self._events is not None:
                self._events.put_nowait(HealthEvent(device, kind, value))
        self._failing = failing

    async def watch(self, events: asyncio.Queue[HealthEvent], changed: asyncio.Event) -> None:
        self._events = events
        while True:
            await asyncio.sleep(self.poll_interval)
            mtime = self._stat()
            if mtime != self._mtime:
                self._mtime = mtime
                changed.set()

    def close(self) -> None:
        pass
