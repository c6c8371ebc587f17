"""A seeded generator of DRA scenarios for the explain-vs-kube-scheduler differential test.

Each scenario is self-contained: its own driver, kwok Nodes, slices, DeviceClasses, namespace,
claims already holding devices (allocations written through the status subresource, as the
scheduler would), and one gated Pod whose claims ``explain`` judges before the scheduler gets
to see it. The shapes cover what the allocator decides on: class and request CEL selectors
(one that fails at runtime now and then), node-local, node-selector, all-nodes and per-device
node selection, pools being updated, device taints and tolerations, Node taints and Pod node
affinity, devices held by other claims, consumable capacity with request policies, shared
counters (partitions), allocationMode All, admin access, matchAttribute/distinctAttribute
constraints, prioritized lists; and the config/examples shapes (templates turned into claims).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

from operators.lab.components import build_node

Obj = dict[str, Any]
LABEL = "dra-explain"  # on the scenario's Nodes and Pod
ADMIN_LABEL = "resource.kubernetes.io/admin-access"


@dataclass
class Scenario:
    token: str
    shape: str
    driver: str
    namespace: str
    nodes: list[Obj] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    classes: list[Obj] = field(default_factory=list)
    claims: list[Obj] = field(default_factory=list)  # the Pod's
    held: list[tuple[Obj, list[Obj]]] = field(default_factory=list)  # (claim, allocation results)
    pod: Obj = field(default_factory=dict)

    def describe(self) -> str:
        import yaml

        docs = self.nodes + self.slices + self.classes + [c for c, _ in self.held] + self.claims + [self.pod]
        held = {c["metadata"]["name"]: r for c, r in self.held}
        return f"--- scenario {self.token} ({self.shape}) held={held}\n" + yaml.safe_dump_all(
            docs, sort_keys=False, width=160
        )


class Generator:
    def __init__(self, seed: int, run: str):
        self.rng = random.Random(seed)
        self.run = run
        self.count = 0

    # -- building blocks ----------------------------------------------------------------------

    def _names(self) -> tuple[str, str, str]:
        self.count += 1
        token = f"{self.run}{self.count:02d}"
        return token, f"{token}.x.dra-operators.dev", f"x-{token}"

    def _nodes(self, token: str, taint: bool) -> list[Obj]:
        nodes = []
        for i in range(2):
            node = build_node(f"x-{token}-{i}", {LABEL: token, "rack": f"r{i}"})
            if i == 1 and taint:
                node["spec"] = {"taints": [{"key": "maintenance", "value": "yes", "effect": "NoSchedule"}]}
            nodes.append(node)
        return nodes

    def _device(self, driver: str, name: str, index: int, **extra: Any) -> Obj:
        r = self.rng
        attributes = {
            "model": {"string": r.choice(["a", "a", "b"])},
            "numa": {"int": r.choice([0, 1])},
            "index": {"int": index},
            "uuid": {"string": f"GPU-{uuid.UUID(int=r.getrandbits(128))}"},
            "type": {"string": "gpu"},
        }
        device: Obj = {
            "name": name,
            "attributes": attributes,
            "capacity": {"memory": {"value": r.choice(["16Gi", "32Gi"])}},
        }
        if r.random() < 0.2:
            device["taints"] = [
                {"key": "xid", "value": r.choice(["79", "48"]), "effect": r.choice(["NoSchedule", "NoExecute", "None"])}
            ]
        device.update(extra)
        return device

    @staticmethod
    def _slice(
        name: str, driver: str, pool: str, devices: list[Obj] | None, count: int = 1, generation: int = 1, **spec: Any
    ) -> Obj:
        body: Obj = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
            **spec,
        }
        if devices is not None:
            body["devices"] = devices
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name}, "spec": body}

    @staticmethod
    def _class(name: str, driver: str, extra: str | None = None) -> Obj:
        expression = f'device.driver == "{driver}"' + (f" && {extra}" if extra else "")
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }

    # -- slice shapes ---------------------------------------------------------------------------

    def _node_local(self, s: Scenario) -> None:
        for node in s.nodes:
            name = node["metadata"]["name"]
            devices = [self._device(s.driver, f"gpu-{i}", i) for i in range(self.rng.randint(2, 4))]
            if self.rng.random() < 0.3:  # an XID on every GPU of the node
                taint = {"key": "xid", "value": "79", "effect": self.rng.choice(["NoSchedule", "NoExecute"])}
                for device in devices:
                    device["taints"] = [dict(taint)]
            s.slices.append(self._slice(f"{name}-gpus", s.driver, name, devices, nodeName=name))

    def _partitions(self, s: Scenario) -> None:
        """As the node agent publishes partitions: a counter slice and a device slice per node."""
        for node in s.nodes:
            name = node["metadata"]["name"]

            def consumes(amount: str) -> list[Obj]:
                return [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]

            whole = self._device(s.driver, "gpu-0", 0, consumesCounters=consumes("80Gi"))
            whole["capacity"] = {"memory": {"value": "80Gi"}}
            parts = []
            for p in range(2):
                part = self._device(s.driver, f"gpu-0-part-{p}", 0, consumesCounters=consumes("40Gi"))
                part["attributes"]["type"] = {"string": "partition"}
                part["capacity"] = {"memory": {"value": "40Gi"}}
                parts.append(part)
            s.slices.append(
                self._slice(
                    f"{name}-counters",
                    s.driver,
                    f"{name}-parts",
                    None,
                    count=2,
                    nodeName=name,
                    sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}],
                )
            )
            s.slices.append(
                self._slice(f"{name}-devices", s.driver, f"{name}-parts", [whole, *parts], count=2, nodeName=name)
            )

    def _shared(self, s: Scenario) -> None:
        """A device several claims share by memory (consumable capacity, a request policy)."""
        for node in s.nodes:
            name = node["metadata"]["name"]
            policy = self.rng.choice(
                [
                    {"default": "4Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
                    {"default": "8Gi", "validValues": ["8Gi", "16Gi", "24Gi"]},
                    {"default": "4Gi", "validRange": {"min": "2Gi", "max": "20Gi", "step": "2Gi"}},
                ]
            )
            device = self._device(s.driver, "shared-0", 0, allowMultipleAllocations=True)
            device["attributes"]["type"] = {"string": "shared-gpu"}
            device["capacity"] = {"memory": {"value": "48Gi", "requestPolicy": policy}}
            s.slices.append(self._slice(f"{name}-shared", s.driver, f"{name}-shared", [device], nodeName=name))

    def _network(self, s: Scenario) -> None:
        """Devices not local to one node: a node selector (rack r0), or all nodes."""
        devices = [self._device(s.driver, f"net-{i}", i) for i in range(self.rng.randint(1, 3))]
        if self.rng.random() < 0.5:
            selector = {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "rack", "operator": "In", "values": ["r0"]},
                            {"key": LABEL, "operator": "In", "values": [s.token]},
                        ]
                    }
                ]
            }
            s.slices.append(self._slice(f"net-{s.token}", s.driver, f"net-{s.token}", devices, nodeSelector=selector))
        else:
            s.slices.append(self._slice(f"net-{s.token}", s.driver, f"net-{s.token}", devices, allNodes=True))

    def _per_device(self, s: Scenario) -> None:
        devices = []
        for i, node in enumerate(s.nodes):
            devices.append(self._device(s.driver, f"pd-{i}", i, nodeName=node["metadata"]["name"]))
        s.slices.append(self._slice(f"pd-{s.token}", s.driver, f"pd-{s.token}", devices, perDeviceNodeSelection=True))

    def _updating(self, s: Scenario) -> None:
        """A pool whose newest generation is half published (its devices cannot be used)."""
        name = s.nodes[0]["metadata"]["name"]
        devices = [self._device(s.driver, f"upd-{i}", i) for i in range(2)]
        s.slices.append(self._slice(f"{name}-upd", s.driver, f"upd-{s.token}", devices, count=2, nodeName=name))

    # -- requests ---------------------------------------------------------------------------------

    def _exact(self, s: Scenario, name: str, classes: list[str], shared: bool) -> Obj:
        r = self.rng
        shared_classes = [c for c in classes if c.startswith("shared-")]
        exactly: Obj = {
            "deviceClassName": r.choice(shared_classes if shared and shared_classes and r.random() < 0.6 else classes)
        }
        if r.random() < 0.1:
            exactly["allocationMode"] = "All"
        else:
            exactly["allocationMode"] = "ExactCount"
            exactly["count"] = r.choice([1, 1, 1, 1, 2, 2, 3])
        if r.random() < 0.25:
            exactly["selectors"] = [
                {
                    "cel": {
                        "expression": r.choice(
                            [
                                f'device.attributes["{s.driver}"].numa == 0',
                                f'device.attributes["{s.driver}"].model == "b"',
                                f'device.capacity["{s.driver}"].memory.compareTo(quantity("20Gi")) > 0',
                            ]
                        )
                    }
                }
            ]
        if r.random() < 0.35:
            exactly["tolerations"] = [
                r.choice(
                    [
                        {"key": "xid", "operator": "Exists"},
                        {"key": "xid", "value": "79", "effect": "NoSchedule"},
                        {"operator": "Exists", "effect": "NoExecute"},
                    ]
                )
            ]
        if shared and exactly["deviceClassName"].endswith("shared") and r.random() < 0.8:
            exactly["capacity"] = {"requests": {"memory": r.choice(["3Gi", "8Gi", "16Gi", "30Gi", "50Gi"])}}
        if r.random() < 0.15 and exactly["allocationMode"] == "ExactCount":
            exactly["adminAccess"] = True
        return {"name": name, "exactly": exactly}

    def _first_available(self, s: Scenario, name: str, classes: list[str]) -> Obj:
        subs = []
        for i in range(self.rng.randint(2, 3)):
            sub = self._exact(s, f"s{i}", classes, False)["exactly"]
            sub.pop("adminAccess", None)
            subs.append({"name": f"s{i}", **sub})
        return {"name": name, "firstAvailable": subs}

    def _claim(self, s: Scenario, name: str, classes: list[str], shared: bool) -> Obj:
        r = self.rng
        requests = []
        for i in range(r.choice([1, 1, 2])):
            requests.append(
                self._first_available(s, f"r{i}", classes)
                if r.random() < 0.2
                else self._exact(s, f"r{i}", classes, shared)
            )
        devices: Obj = {"requests": requests}
        if r.random() < 0.4:
            key = r.choice(["matchAttribute", "distinctAttribute"])
            devices["constraints"] = [{key: f"{s.driver}/{r.choice(['numa', 'numa', 'model'])}"}]
            for request in requests:  # a constraint matters between two devices or more
                if "exactly" in request and request["exactly"].get("count") == 1 and r.random() < 0.5:
                    request["exactly"]["count"] = 2
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": s.namespace},
            "spec": {"devices": devices},
        }

    def _hold(self, s: Scenario, index: int) -> None:
        """A claim that already holds one or two devices (written as the scheduler would)."""
        candidates = [
            (sl, d)
            for sl in s.slices
            for d in sl["spec"].get("devices") or []
            if sl["spec"]["pool"]["resourceSliceCount"] == 1 or sl["metadata"]["name"].endswith("-devices")
        ]
        if not candidates:
            return
        picks = self.rng.sample(candidates, min(len(candidates), self.rng.choice([1, 1, 2])))
        admin = self.rng.random() < 0.15
        results = []
        for sl, d in picks:
            result = {"request": "gpu", "driver": s.driver, "pool": sl["spec"]["pool"]["name"], "device": d["name"]}
            if d.get("allowMultipleAllocations"):
                result["shareID"] = str(uuid.UUID(int=self.rng.getrandbits(128)))
                result["consumedCapacity"] = {"memory": self.rng.choice(["8Gi", "20Gi", "40Gi"])}
            elif admin:
                result["adminAccess"] = True
            results.append(result)
        exactly: Obj = {"deviceClassName": f"any-{s.token}", "count": len(results)}
        if admin:
            exactly["adminAccess"] = True
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": f"held-{index}", "namespace": s.namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
        }
        s.held.append((claim, results))

    def _pod(self, s: Scenario) -> None:
        r = self.rng
        spec: Obj = {
            "schedulingGates": [{"name": "dra-operators.dev/explain-first"}],
            "nodeSelector": {LABEL: s.token},
            "resourceClaims": [
                {"name": c["metadata"]["name"], "resourceClaimName": c["metadata"]["name"]} for c in s.claims
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"claims": [{"name": c["metadata"]["name"]} for c in s.claims]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        }
        if r.random() < 0.5:
            spec["tolerations"] = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
        if r.random() < 0.2:
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
                        ]
                    }
                }
            }
        s.pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "pod", "namespace": s.namespace, "labels": {LABEL: self.run}},
            "spec": spec,
        }

    # -- scenarios --------------------------------------------------------------------------------

    SHAPES = ("node-local", "partitions", "shared", "network", "per-device", "mixed", "example")

    def scenario(self) -> Scenario:
        token, driver, namespace = self._names()
        shape = self.SHAPES[(self.count - 1) % len(self.SHAPES)]
        s = Scenario(token, shape, driver, namespace)
        s.nodes = self._nodes(token, taint=self.rng.random() < 0.3)
        if shape == "example":
            return self._example(s)
        builders = {
            "node-local": [self._node_local],
            "partitions": [self._partitions],
            "shared": [self._shared],
            "network": [self._network, self._node_local],
            "per-device": [self._per_device],
            "mixed": [self._node_local, self._partitions, self._shared],
        }[shape]
        for build in builders:
            build(s)
        if self.rng.random() < 0.15:
            self._updating(s)
        classes = [f"any-{token}"]
        s.classes.append(self._class(f"any-{token}", driver))
        s.classes.append(self._class(f"a-{token}", driver, f'device.attributes["{driver}"].model == "a"'))
        classes.append(f"a-{token}")
        if shape in ("partitions", "mixed"):
            s.classes.append(self._class(f"part-{token}", driver, f'device.attributes["{driver}"].type == "partition"'))
            classes.append(f"part-{token}")
        if shape in ("shared", "mixed"):
            s.classes.append(self._class(f"shared-{token}", driver, "device.allowMultipleAllocations"))
            classes.append(f"shared-{token}")
        if self.rng.random() < 0.07:
            # fails at runtime on every device of the driver: no such key
            s.classes.append(self._class(f"broken-{token}", driver, f'device.attributes["{driver}"].nosuch == "x"'))
            classes.append(f"broken-{token}")
        for i in range(self.rng.choice([0, 1, 1, 2, 2])):
            self._hold(s, i)
        s.claims = [
            self._claim(s, f"c{i}", classes, shape in ("shared", "mixed")) for i in range(self.rng.choice([1, 1, 1, 2]))
        ]
        self._pod(s)
        return s

    def _example(self, s: Scenario) -> Scenario:
        """config/examples on a node agent's slices (whole GPUs, one partitioned, one shared)."""
        d = s.driver
        for node in s.nodes:
            name = node["metadata"]["name"]

            def gpu(n: str, kind: str, memory: str, **extra: Any) -> Obj:
                device = self._device(d, n, 0, **extra)
                device["attributes"].update({"type": {"string": kind}, "productName": {"string": "LabGPU-80G"}})
                device["capacity"] = {"memory": {"value": memory}}
                return device

            def consumes(amount: str) -> list[Obj]:
                return [{"counterSet": "gpu-4-counters", "counters": {"memory": {"value": amount}}}]

            devices = [gpu(f"gpu-{i}", "gpu", "80Gi") for i in range(4)]
            devices.append(gpu("gpu-4", "gpu", "80Gi", consumesCounters=consumes("80Gi")))
            devices += [
                gpu(f"gpu-4-part-{p}", "partition", "40Gi", consumesCounters=consumes("40Gi")) for p in range(2)
            ]
            shared = gpu("gpu-5", "shared-gpu", "48Gi", allowMultipleAllocations=True)
            shared["capacity"]["memory"]["requestPolicy"] = {
                "default": "4Gi",
                "validRange": {"min": "1Gi", "step": "1Gi"},
            }
            devices.append(shared)
            s.slices.append(
                self._slice(
                    f"{name}-counters",
                    d,
                    name,
                    None,
                    count=2,
                    nodeName=name,
                    sharedCounters=[{"name": "gpu-4-counters", "counters": {"memory": {"value": "80Gi"}}}],
                )
            )
            s.slices.append(self._slice(f"{name}-devices", d, name, devices, count=2, nodeName=name))
        for kind in ("gpu", "partition", "shared-gpu"):
            s.classes.append(self._class(f"{kind}-{s.token}", d, f"device.attributes['{d}'].type == '{kind}'"))
        examples = (
            "admin-access",
            "taints-tolerations",
            "prioritized-list",
            "consumable-capacity",
            "basic",
            "cel-selector",
        )
        example = examples[(self.count // len(self.SHAPES)) % len(examples)]
        s.shape = f"example {example}"
        gpu_class = f"gpu-{s.token}"
        requests: list[Obj]
        if example == "basic":
            requests = [{"name": "gpu", "exactly": {"deviceClassName": gpu_class, "count": self.rng.choice([1, 5, 9])}}]
        elif example == "cel-selector":
            requests = [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": gpu_class,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": f"device.attributes['{d}'].productName == "
                                    f"'{self.rng.choice(['LabGPU-80G', 'NoSuchGPU'])}'"
                                    f" && device.attributes['{d}'].index == 0"
                                }
                            }
                        ],
                    },
                }
            ]
        elif example == "prioritized-list":
            requests = [
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {
                            "name": "dream",
                            "deviceClassName": gpu_class,
                            "selectors": [
                                {"cel": {"expression": f"device.attributes['{d}'].productName == 'NoSuchGPU-1T'"}}
                            ],
                        },
                        {"name": "half", "deviceClassName": f"partition-{s.token}"},
                        {"name": "any", "deviceClassName": gpu_class},
                    ],
                }
            ]
        elif example == "consumable-capacity":
            requests = [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": f"shared-gpu-{s.token}",
                        "capacity": {"requests": {"memory": self.rng.choice(["8Gi", "16Gi", "60Gi"])}},
                    },
                }
            ]
        elif example == "admin-access":
            # gpu-0 of both nodes held by another claim: only admin access gets at them
            requests = [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": gpu_class,
                        "adminAccess": self.rng.random() < 0.6,
                        "selectors": [{"cel": {"expression": f"device.attributes['{d}'].index == 0"}}],
                    },
                }
            ]
            for device in [dv for sl in s.slices for dv in sl["spec"].get("devices") or []]:
                device["attributes"]["index"] = {"int": int(device["name"].split("-")[1])}
            if self.rng.random() < 0.7:
                results = [
                    {"request": "gpu", "driver": d, "pool": n["metadata"]["name"], "device": "gpu-0"} for n in s.nodes
                ]
                s.held.append(
                    (
                        {
                            "apiVersion": "resource.k8s.io/v1",
                            "kind": "ResourceClaim",
                            "metadata": {"name": "held-gpu-0", "namespace": s.namespace},
                            "spec": {
                                "devices": {
                                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": gpu_class, "count": 2}}]
                                }
                            },
                        },
                        results,
                    )
                )
        else:
            for _node in s.nodes:
                for sl in s.slices:
                    for device in sl["spec"].get("devices") or []:
                        if device["name"] == "gpu-3":
                            device["taints"] = [
                                {
                                    "key": "example.dra-operators.dev/maintenance",
                                    "value": "planned",
                                    "effect": "NoExecute",
                                }
                            ]
            requests = [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": gpu_class,
                        "count": self.rng.choice([1, 4]),
                        "tolerations": [{"key": "example.dra-operators.dev/maintenance", "operator": "Exists"}]
                        if self.rng.random() < 0.5
                        else [],
                    },
                }
            ]
        s.claims = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c0", "namespace": s.namespace},
                "spec": {"devices": {"requests": requests}},
            }
        ]
        for i in range(self.rng.choice([0, 1, 2])):
            self._hold(s, i)
        self._pod(s)
        return s

    # -- 1.37 allocator features explain does not model -----------------------------------------

    UNMODELLED = ("derived attributes", "compatibility groups", "list-type attributes", "node-allocatable resources")

    def unmodelled(self, feature: str) -> Scenario:
        """One Pod with one claim for one device, on slices or a claim that use ``feature``."""
        token, driver, namespace = self._names()
        s = Scenario(token, feature, driver, namespace)
        s.nodes = self._nodes(token, taint=False)
        if feature == "compatibility groups":
            self._partitions(s)
            for body in s.slices:
                for i, device in enumerate(body["spec"].get("devices") or []):
                    # the whole GPU and its first partition share no group with the second
                    device["consumesCounters"][0]["compatibilityGroups"] = ["g0" if i < 2 else "g1"]
        else:
            self._node_local(s)
        for body in s.slices:
            for device in body["spec"].get("devices") or []:
                device.pop("taints", None)
                if feature == "list-type attributes":
                    device["attributes"]["models"] = {"strings": ["a", "b"]}
                if feature == "node-allocatable resources":
                    device["nodeAllocatableResources"] = {"memory": {"overhead": {"perPod": "1Mi"}}}
        s.classes.append(self._class(f"any-{token}", driver))
        exactly: Obj = {"deviceClassName": f"any-{token}", "allocationMode": "ExactCount", "count": 1}
        devices: Obj = {"requests": [{"name": "gpu", "exactly": exactly}]}
        if feature == "derived attributes":
            exactly["derivedAttributes"] = [
                {"name": "derived/numa", "expression": f'device.attributes["{driver}"].numa'}
            ]
            devices["constraints"] = [{"matchAttribute": "derived/numa"}]
        s.claims = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c0", "namespace": namespace},
                "spec": {"devices": devices},
            }
        ]
        self._pod(s)
        s.pod["spec"].pop("affinity", None)
        return s
