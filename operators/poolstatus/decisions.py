"""The answer to a ResourcePoolStatusRequest, computed from ResourceSlices, ResourceClaims and
DeviceTaintRules (plain dicts in, the request's ``status`` out; no I/O).

A port of kube-controller-manager v1.37.1's resourcepoolstatusrequest-controller:
pkg/controller/resourcepoolstatusrequest/controller.go (``calculatePoolStatus``,
``deviceUnavailable``, ``hasUnavailableTaint``, ``ruleMakesDeviceUnavailable``, ``errorStatus``,
``shouldDeleteRequest``) and views.go (``resolveDevicePartitions``, ``computePoolViews``,
``computePartitionSummary``, ``computeShareableSummary``, ``availableCounters``); types from
k8s.io/api v0.37.1 resource/v1alpha3/types.go. Quantities are summed and printed as
apimachinery's ``resource.Quantity`` does (``Add``, ``Sub``, ``CanonicalizeBytes``), so that a
total reads "80Gi" here exactly when it does upstream.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.dra.counters import Counters, capacities, copy_counters, counters_left, deduct, shortfall
from ..core.dra.quantity import Quantity, non_negative_diff
from ..core.dra.resourceclaim import allocation_results
from ..core.dra.tolerations import FILTERING_EFFECTS, device_selector_matches

Obj = dict[str, Any]

LIMIT_DEFAULT = 100  # ResourcePoolStatusRequestLimitDefault
LIMIT_MAX = 1000  # ResourcePoolStatusRequestLimitMax
MAX_STATUS_LIST_ITEMS = 32  # views.go maxStatusListItems (+k8s:maxItems=32)
MAX_VALIDATION_ERROR_BYTES = 256  # +k8s:maxBytes=256 of validationError

COMPLETE, FAILED = "Complete", "Failed"

# views.go: machine-readable prefixes of a pool's validationError.
PREFIX_POOL_INCOMPLETE = "PoolIncomplete:"  # the only transient one: the request is retried
PREFIX_PARTITION_TYPE_MISSING = "PartitionTypeMissing:"
PREFIX_PARTITION_COST_MISMATCH = "PartitionCostMismatch:"
PREFIX_PARTITION_SUMMARY_OVER_CAP = "PartitionSummaryOverCap:"
PREFIX_SHAREABLE_OVER_CAP = "ShareableSummaryOverCap:"

UNAVAILABLE_EFFECTS = FILTERING_EFFECTS  # NoSchedule, NoExecute


# -- which devices count how ----------------------------------------------------------------------


def has_unavailable_taint(device: Obj) -> bool:
    """controller.go ``hasUnavailableTaint``: an embedded NoSchedule or NoExecute taint."""
    return any(t.get("effect") in UNAVAILABLE_EFFECTS for t in device.get("taints") or [])


def rule_makes_device_unavailable(rule: Obj, driver: str, pool: str, device: str) -> bool:
    """controller.go ``ruleMakesDeviceUnavailable``: a NoSchedule/NoExecute rule whose selector
    names this device (unset fields match anything; no selector matches nothing)."""
    spec = rule.get("spec") or {}
    if (spec.get("taint") or {}).get("effect") not in UNAVAILABLE_EFFECTS:
        return False
    return device_selector_matches(spec.get("deviceSelector"), driver, pool, device)


def device_unavailable(driver: str, pool: str, device: Obj, rules: Iterable[Obj]) -> bool:
    """controller.go ``deviceUnavailable``."""
    return has_unavailable_taint(device) or any(
        rule_makes_device_unavailable(r, driver, pool, device.get("name", "")) for r in rules
    )


# -- the partition and shareable views (views.go) ------------------------------------------------


@dataclass
class DeviceRecord:
    """views.go ``deviceRecord``."""

    name: str
    partition_attr: str = ""
    partition_type: str = ""
    has_partition_type: bool = False
    consumes_counters: list[Obj] = field(default_factory=list)
    allow_multiple: bool = False
    capacity: dict[str, Obj] = field(default_factory=dict)
    attributes: dict[str, Obj] = field(default_factory=dict)


def slice_device_records(slice_: Obj) -> list[DeviceRecord]:
    """views.go ``sliceDeviceRecords``: each device seeded with its slice's partitionTypeAttribute."""
    spec = slice_.get("spec") or {}
    attr = spec.get("partitionTypeAttribute") or ""
    return [
        DeviceRecord(
            name=d.get("name", ""),
            partition_attr=attr,
            consumes_counters=list(d.get("consumesCounters") or []),
            allow_multiple=bool(d.get("allowMultipleAllocations")),
            capacity=dict(d.get("capacity") or {}),
            attributes=dict(d.get("attributes") or {}),
        )
        for d in spec.get("devices") or []
    ]


def resolve_partition_type(driver: str, attributes: dict[str, Obj], fqn: str) -> tuple[str, bool]:
    """views.go ``resolvePartitionType``: the attribute's string value; a name in the driver's
    own domain also matches the bare attribute (the explicit one wins)."""
    attr = attributes.get(fqn)
    if attr is None and fqn.startswith(driver + "/"):
        attr = attributes.get(fqn[len(driver) + 1 :])
    if attr is None or attr.get("string") is None:
        return "", False
    return attr["string"], True


def resolve_device_partitions(request_attr: str | None, devices: list[DeviceRecord], driver: str) -> None:
    """views.go ``resolveDevicePartitions``: a slice's own attribute first; the request's default
    only when no slice of the pool declares one."""
    pool_declares = any(d.partition_attr for d in devices)
    for d in devices:
        if not d.partition_attr:
            if pool_declares or request_attr is None:
                continue
            d.partition_attr = request_attr
        d.partition_type, d.has_partition_type = resolve_partition_type(driver, d.attributes, d.partition_attr)


def _go_quote(text: str) -> str:
    """Go's %q for the names that appear in messages."""
    return json.dumps(text, ensure_ascii=False)


def consumes_counters_key(cost: list[Obj]) -> str:
    """views.go ``consumesCountersKey``: a device's counter cost as a comparable string."""
    parts = [
        f"{cc.get('counterSet')}/{name}={Quantity.parse(c.get('value', '0'))}"
        for cc in cost
        for name, c in sorted((cc.get("counters") or {}).items())
    ]
    return ",".join(sorted(parts))


def available_counters(shared: list[Obj], devices: list[DeviceRecord], in_use: set[str]) -> Counters:
    """views.go ``availableCounters``: capacity minus the cost of every in-use device, once each
    (the arithmetic is operators.core.dra.counters', the allocator's too)."""
    return counters_left(capacities(shared), (d.consumes_counters for d in devices if d.name in in_use))


def compute_partition_summary(
    driver: str, pool: str, devices: list[DeviceRecord], shared: list[Obj], in_use: set[str]
) -> tuple[list[Obj] | None, str]:
    """views.go ``computePartitionSummary``."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for d in devices:
        if not d.consumes_counters or not d.partition_attr:
            continue
        if not d.has_partition_type:
            return None, (
                f"{PREFIX_PARTITION_TYPE_MISSING} device {_go_quote(d.name)} in pool {driver}/{pool} "
                f"does not carry partition type attribute {_go_quote(d.partition_attr)}"
            )
        group = groups.setdefault((d.partition_attr, d.partition_type), {"total": 0, "fresh": [], "cost": ""})
        key = consumes_counters_key(d.consumes_counters)
        if group["total"] == 0:
            group["cost"] = key
        elif key != group["cost"]:
            return None, (
                f"{PREFIX_PARTITION_COST_MISMATCH} devices of partition type {_go_quote(d.partition_type)} "
                f"in pool {driver}/{pool} consume different counters"
            )
        group["total"] += 1
        if d.name not in in_use:
            group["fresh"].append(d)

    baseline = available_counters(shared, devices, in_use)
    result = []
    for (attr, type_), group in sorted(groups.items()):
        avail = copy_counters(baseline)
        allocatable = 0
        for d in group["fresh"]:
            if shortfall(d.consumes_counters, avail) is None:
                allocatable += 1
                deduct(avail, d.consumes_counters)
        result.append({"attribute": attr, "type": type_, "total": group["total"], "allocatable": allocatable})
    if len(result) > MAX_STATUS_LIST_ITEMS:
        return None, (
            f"{PREFIX_PARTITION_SUMMARY_OVER_CAP} pool {driver}/{pool} has {len(result)} partition types, "
            f"exceeding the maximum of {MAX_STATUS_LIST_ITEMS}"
        )
    return result, ""


def compute_shareable_summary(
    driver: str, pool: str, devices: list[DeviceRecord], in_use: set[str], consumed: dict[str, Quantity]
) -> tuple[Obj | None, str]:
    """views.go ``computeShareableSummary``: only for pools with allowMultipleAllocations devices."""
    full = partial = 0
    total: dict[str, Quantity] = {}
    shareable = False
    for d in devices:
        if not d.allow_multiple:
            continue
        shareable = True
        if d.name in in_use:
            partial += 1
        else:
            full += 1
        for key, capacity in d.capacity.items():
            total[key] = total.get(key, Quantity()).add(Quantity.parse(capacity.get("value", "0")))
    if not shareable:
        return None, ""
    capacities = []
    for key in sorted(total):
        used = consumed.get(key, Quantity())
        capacities.append(
            {
                "name": key,
                "total": str(total[key]),
                "consumed": str(used),
                "available": str(non_negative_diff(total[key], used)),
            }
        )
    if len(capacities) > MAX_STATUS_LIST_ITEMS:
        return None, (
            f"{PREFIX_SHAREABLE_OVER_CAP} pool {driver}/{pool} has {len(capacities)} shareable capacity "
            f"keys, exceeding the maximum of {MAX_STATUS_LIST_ITEMS}"
        )
    summary: Obj = {"fullyAvailableDevices": full, "partiallyAvailableDevices": partial}
    if capacities:
        summary["capacity"] = capacities
    return summary, ""


def compute_pool_views(
    driver: str,
    pool: str,
    devices: list[DeviceRecord],
    shared: list[Obj],
    in_use: set[str],
    consumed: dict[str, Quantity],
) -> tuple[list[Obj] | None, Obj | None, str]:
    """views.go ``computePoolViews``: (partitionSummary, shareableSummary, first validation error)."""
    has_counters = bool(shared)
    grouped = any(d.partition_attr for d in devices)
    partitions, error = None, ""
    if grouped and not has_counters:
        error = (
            f"{PREFIX_PARTITION_TYPE_MISSING} pool {driver}/{pool} declares partitionTypeAttribute "
            "but publishes no sharedCounters"
        )
    elif grouped:
        partitions, error = compute_partition_summary(driver, pool, devices, shared, in_use)
    shareable, shareable_error = compute_shareable_summary(driver, pool, devices, in_use, consumed)
    if not error:
        error = shareable_error
    if shareable_error:
        shareable = None
    if error:
        partitions = None
    return partitions, shareable, error


# -- the whole answer (controller.go calculatePoolStatus) ----------------------------------------


def _truncate(message: str) -> str:
    """To the API field's 256 bytes, as upstream cuts them."""
    raw = message.encode()
    return (
        raw[:MAX_VALIDATION_ERROR_BYTES].decode(errors="replace") if len(raw) > MAX_VALIDATION_ERROR_BYTES else message
    )


@dataclass
class _Pool:
    driver: str
    name: str
    node_name: str
    generation: int
    expected_slices: int
    total: int = 0
    unavailable: int = 0
    slices: int = 0
    node_mixed: bool = False
    devices: list[DeviceRecord] = field(default_factory=list)
    shared_counters: list[Obj] = field(default_factory=list)


def request_limit(request: Obj) -> int:
    limit = (request.get("spec") or {}).get("limit")
    return LIMIT_DEFAULT if limit is None else int(limit)


def calculate_pool_status(
    request: Obj, slices: Iterable[Obj], claims: Iterable[Obj], rules: Iterable[Obj], now: str
) -> Obj:
    """The request's ``status``. ``rules``: the DeviceTaintRules (empty when the cluster serves
    none, as upstream with its DRADeviceTaintRules gate off); ``now``: lastTransitionTime."""
    spec = request.get("spec") or {}
    driver = spec.get("driver", "")
    pool_filter = spec.get("poolName") or ""
    rules = list(rules)

    matching = []
    for s in slices:
        s_spec = s.get("spec") or {}
        pool = s_spec.get("pool") or {}
        if s_spec.get("driver") != driver or (pool_filter and pool.get("name") != pool_filter):
            continue
        matching.append((s, s_spec, pool))

    # Pass 1: the newest generation of every pool; older slices are ignored (KEP-5677).
    newest: dict[str, int] = {}
    for _, _, pool in matching:
        name, generation = pool.get("name", ""), int(pool.get("generation") or 0)
        newest[name] = max(newest.get(name, generation), generation)

    # Pass 2: totals over the newest slices.
    pools: dict[str, _Pool] = {}
    for s, s_spec, pool in matching:
        name = pool.get("name", "")
        if int(pool.get("generation") or 0) < newest[name]:
            continue
        devices = s_spec.get("devices") or []
        unavailable = sum(device_unavailable(driver, name, d, rules) for d in devices)
        node_name = s_spec.get("nodeName") or ""
        info = pools.get(name)
        if info is None:
            info = pools[name] = _Pool(driver, name, node_name, newest[name], int(pool.get("resourceSliceCount") or 0))
        elif node_name != info.node_name:
            info.node_mixed = True
        info.total += len(devices)
        info.unavailable += unavailable
        info.slices += 1
        info.devices.extend(slice_device_records(s))
        info.shared_counters.extend(s_spec.get("sharedCounters") or [])

    # Allocated devices: each device once however many claims share it; adminAccess results
    # observe and do not count. Consumed capacity is summed over the same results.
    allocated: dict[str, set[str]] = {}
    consumed: dict[str, dict[str, Quantity]] = {}
    for claim in claims:
        for result in allocation_results(claim):
            if result.get("adminAccess"):
                continue
            key = f"{result.get('driver')}/{result.get('pool')}"
            allocated.setdefault(key, set()).add(result.get("device", ""))
            for name, amount in (result.get("consumedCapacity") or {}).items():
                per_pool = consumed.setdefault(key, {})
                per_pool[name] = per_pool.get(name, Quantity()).add(Quantity.parse(amount))

    statuses = []
    for info in pools.values():
        status: Obj = {"driver": info.driver, "poolName": info.name, "generation": info.generation}
        if info.node_name and not info.node_mixed:
            status["nodeName"] = info.node_name
        if info.slices < info.expected_slices:
            status["validationError"] = _truncate(
                f"{PREFIX_POOL_INCOMPLETE} pool {info.driver}/{info.name} is incomplete: observed "
                f"{info.slices}/{info.expected_slices} slices at generation {info.generation}"
            )
        else:
            key = f"{info.driver}/{info.name}"
            in_use = allocated.get(key, set())
            status.update(
                resourceSliceCount=info.slices,
                totalDevices=info.total,
                allocatedDevices=len(in_use),
                availableDevices=max(0, info.total - len(in_use) - info.unavailable),
                unavailableDevices=info.unavailable,
            )
            resolve_device_partitions(spec.get("defaultPartitionTypeAttribute"), info.devices, info.driver)
            partitions, shareable, error = compute_pool_views(
                info.driver, info.name, info.devices, info.shared_counters, in_use, consumed.get(key, {})
            )
            if partitions:
                status["partitionSummary"] = partitions
            if shareable is not None:
                status["shareableSummary"] = shareable
            if error:
                status["validationError"] = _truncate(error)
        statuses.append(status)

    statuses.sort(key=lambda p: (p["driver"], p["poolName"]))
    pool_count = len(statuses)
    statuses = statuses[: request_limit(request)]
    flagged = sum(1 for p in statuses if p.get("validationError"))
    message = f"Calculated status for {len(statuses)} pools"
    if flagged:
        message += f" ({flagged} incomplete)"
    result = {"poolCount": pool_count}
    if statuses:
        result["pools"] = statuses
    result["conditions"] = [
        {
            "type": COMPLETE,
            "status": "True",
            "lastTransitionTime": now,
            "reason": "CalculationComplete",
            "message": message,
        }
    ]
    return result


def error_status(message: str, now: str) -> Obj:
    """controller.go ``errorStatus`` (upstream writes it when a lister fails; ours read a cache
    that cannot fail, so it is kept for completeness)."""
    return {
        "poolCount": 0,
        "conditions": [
            {
                "type": FAILED,
                "status": "True",
                "lastTransitionTime": now,
                "reason": "CalculationFailed",
                "message": message,
            }
        ],
    }


def has_incomplete_pool(status: Obj) -> bool:
    """controller.go ``syncRequest``: a returned pool still being published means try again."""
    return any((p.get("validationError") or "").startswith(PREFIX_POOL_INCOMPLETE) for p in status.get("pools") or [])


def is_processed(request: Obj) -> bool:
    """Once a status is set the request is complete and never computed again."""
    return request.get("status") is not None


# -- retention (controller.go shouldDeleteRequest) -----------------------------------------------


def _older_than(stamp: str | None, ttl: float, now: datetime.datetime) -> bool:
    if not stamp:
        return False  # isOlderThan: a zero time is never old
    then = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return (now - then).total_seconds() > ttl


def should_delete(request: Obj, now: datetime.datetime, completed_ttl: float, pending_ttl: float) -> bool:
    """A completed or failed request after ``completed_ttl`` from its condition's
    lastTransitionTime (its creation when it has no such condition); a pending one after
    ``pending_ttl`` from its creation."""
    status = request.get("status")
    if status is not None:
        for condition in status.get("conditions") or []:
            if condition.get("type") in (COMPLETE, FAILED):
                return _older_than(condition.get("lastTransitionTime"), completed_ttl, now)
        return _older_than(request["metadata"].get("creationTimestamp"), completed_ttl, now)
    return _older_than(request["metadata"].get("creationTimestamp"), pending_ttl, now)
