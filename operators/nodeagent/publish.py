"""Keeping a pool's ResourceSlices equal to the desired ones, as upstream's publishing helper
(k8s.io/dynamic-resource-allocation/resourceslice, v0.37.1 ``syncPool``) does it.

``plan_pool`` is the pure decision; ``PoolPublisher`` carries it out.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from ..core.api.kube import ApiError, Kube
from ..core.api.resources import RESOURCE_SLICES
from ..core.dra.metatime import parse_time
from ..core.dra.quantity import parse_quantity
from ..core.machinery.store import Store

INDEX_MIN_LENGTH = 5
_QUANTITY_KEYS = {"value", "default", "min", "max", "step"}


def index_length(slice_count: int) -> int:
    return max(INDEX_MIN_LENGTH, len(format(max(slice_count - 1, 0), "x")))


def decode_index(name: str, length: int) -> int | None:
    prefix, sep, _ = name.partition("-")
    if not sep or len(prefix) != length:
        return None
    try:
        return int(prefix, 16)
    except ValueError:
        return None


def generate_name(index: int, length: int, driver: str, owner_name: str) -> str:
    return f"{index:0{length}x}-{driver}-{owner_name}-"


def _normalise(value: Any, key: str = "") -> Any:
    """Quantities as exact numbers (the API server may rewrite their spelling), taints without
    their timeAdded (compared separately, with a second of tolerance)."""
    if isinstance(value, dict):
        return {k: _normalise(v, k) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        if key == "taints":
            return [{k: v for k, v in t.items() if k != "timeAdded"} for t in value]
        if key == "validValues":
            return [parse_quantity(v) for v in value]
        return [_normalise(v) for v in value]
    if key in _QUANTITY_KEYS and isinstance(value, (str, int)):
        try:
            return parse_quantity(value)
        except ValueError:
            return value
    return value


def _taint_times_match(a: list[dict], b: list[dict]) -> bool:
    for x, y in zip(a, b, strict=True):
        tx, ty = parse_time(x.get("timeAdded")), parse_time(y.get("timeAdded"))
        if tx and ty and abs((tx - ty).total_seconds()) > 1:
            return False
    return True


def devices_equal(a: list[dict] | None, b: list[dict] | None) -> bool:
    a, b = a or [], b or []
    if _normalise(a) != _normalise(b):
        return False
    return all(_taint_times_match(x.get("taints") or [], y.get("taints") or []) for x, y in zip(a, b, strict=True))


def copy_taint_time_added(current: list[dict], desired: list[dict]) -> list[dict]:
    """Desired devices, with ``timeAdded`` taken from the published taint with the same key,
    value and effect where the desired one has none (stable across re-publishing)."""
    by_name = {d["name"]: d for d in current or []}
    out = copy.deepcopy(desired)
    for device in out:
        published = by_name.get(device["name"])
        if not published:
            continue
        for taint in device.get("taints") or []:
            if taint.get("timeAdded"):
                continue
            for old in published.get("taints") or []:
                if (old.get("key"), old.get("value"), old.get("effect")) == (
                    taint.get("key"),
                    taint.get("value"),
                    taint.get("effect"),
                ) and old.get("timeAdded"):
                    taint["timeAdded"] = old["timeAdded"]
                    break
    return out


@dataclass
class PoolPlan:
    generation: int
    obsolete: list[dict] = field(default_factory=list)
    updates: list[dict] = field(default_factory=list)
    creates: list[dict] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.obsolete or self.updates or self.creates)


def plan_pool(
    existing: list[dict],
    desired: list[dict],
    *,
    driver: str,
    pool: str,
    node_name: str,
    owner: dict[str, str],
    new_generation: bool = False,
) -> PoolPlan:
    """What to delete, update and create so that the pool's slices equal ``desired``.

    ``desired`` holds slice specs with ``devices`` or ``sharedCounters``; ``owner`` is the Node
    ({name, uid}). Generation: the highest existing one, bumped by one when more than one slice
    changes or any slice is added, so consumers never see a half-updated pool as complete, and
    always when ``new_generation`` asks for it (the node's hardware changed: devices went or came).
    """
    generation = max((s["spec"]["pool"].get("generation", 0) for s in existing), default=0)
    length = index_length(len(desired))
    matched: dict[int, dict] = {}
    obsolete: list[dict] = []
    for current in sorted(existing, key=lambda s: s["metadata"]["name"]):
        if current["spec"]["pool"].get("generation", 0) < generation:
            obsolete.append(current)
            continue
        index = decode_index(current["metadata"]["name"], length)
        if index is not None and 0 <= index < len(desired) and index not in matched:
            matched[index] = current
        else:
            obsolete.append(current)

    desired_pool = {"name": pool, "generation": generation, "resourceSliceCount": len(desired)}
    changed = set()
    for index, current in matched.items():
        spec, want = current["spec"], desired[index]
        if (
            spec.get("pool") != desired_pool
            or spec.get("nodeSelector")
            or spec.get("allNodes")
            or not devices_equal(spec.get("devices"), want.get("devices"))
            or _normalise(spec.get("sharedCounters") or []) != _normalise(want.get("sharedCounters") or [])
            or bool(spec.get("perDeviceNodeSelection")) != bool(want.get("perDeviceNodeSelection"))
        ):
            changed.add(index)

    new_slices = len(desired) - len(matched)
    bumped = not (new_slices == 0 and len(changed) <= 1) or (new_generation and bool(changed or new_slices))
    if bumped:
        generation += 1
    desired_pool["generation"] = generation
    plan = PoolPlan(generation=generation, obsolete=obsolete)

    for index, current in sorted(matched.items()):
        if index not in changed and not bumped:
            continue
        body = copy.deepcopy(current)
        spec = body["spec"]
        spec["pool"] = dict(desired_pool)
        spec.pop("nodeSelector", None)
        spec.pop("allNodes", None)
        for key in ("sharedCounters", "perDeviceNodeSelection"):
            if desired[index].get(key):
                spec[key] = copy.deepcopy(desired[index][key])
            else:
                spec.pop(key, None)
        if "devices" in desired[index]:
            spec["devices"] = copy_taint_time_added(spec.get("devices") or [], desired[index]["devices"])
        else:
            spec.pop("devices", None)
        plan.updates.append(body)

    for index in range(len(desired)):
        if index in matched:
            continue
        spec = {"driver": driver, "pool": dict(desired_pool), "nodeName": node_name}
        spec.update(copy.deepcopy(desired[index]))
        plan.creates.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {
                    "generateName": generate_name(index, length, driver, owner["name"]),
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Node",
                            "name": owner["name"],
                            "uid": owner["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": spec,
            }
        )
    return plan


@dataclass
class PublishResult:
    generation: int
    deleted: int
    updated: int
    created: int


class PoolPublisher:
    """Carries out plans for one driver's pool on one node, keeping ``store`` (the agent's
    cache of its own slices) current with every write, so that the next plan never repeats one."""

    def __init__(self, kube: Kube, store: Store, driver: str, node_name: str):
        self.kube = kube
        self.store = store
        self.driver = driver
        self.node_name = node_name

    def existing(self) -> list[dict]:
        return [
            s
            for s in self.store.values()
            if s["spec"].get("driver") == self.driver and s["spec"].get("pool", {}).get("name") == self.node_name
        ]

    async def publish(self, desired: list[dict], owner: dict[str, str], new_generation: bool = False) -> PublishResult:
        plan = plan_pool(
            self.existing(),
            desired,
            driver=self.driver,
            pool=self.node_name,
            node_name=self.node_name,
            owner=owner,
            new_generation=new_generation,
        )
        # Obsolete slices go first, and only the version we judged (uid and resourceVersion).
        for old in plan.obsolete:
            meta = old["metadata"]
            try:
                await self.kube.delete(
                    RESOURCE_SLICES, meta["name"], uid=meta["uid"], resource_version=meta["resourceVersion"]
                )
            except ApiError as e:
                if not e.not_found:
                    raise
            self.store.delete(old)
        for body in plan.updates:
            self.store.upsert(await self.kube.replace(RESOURCE_SLICES, body))
        for body in plan.creates:
            self.store.upsert(await self.kube.create(RESOURCE_SLICES, body))
        return PublishResult(plan.generation, len(plan.obsolete), len(plan.updates), len(plan.creates))
