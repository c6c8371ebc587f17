"""Checks a device against the API server's ResourceSlice limits before it is published, so
one bad device is reported by name and field while the others are still published."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from ..core.dra.quantity import format_binary as format_quantity
from ..core.dra.quantity import parse_quantity

MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE_BYTES = 64
MAX_ID_LENGTH = 32
MAX_DOMAIN_LENGTH = 63

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Semantic Versioning 2.0.0, as the API server checks version attributes.
_SEMVER = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_ATTRIBUTE_TYPES = ("int", "bool", "string", "version")


def _qualified_name(name: str) -> str | None:
    domain, _, ident = name.rpartition("/")
    if "/" in domain:
        return "more than one '/'"
    if domain and (len(domain) > MAX_DOMAIN_LENGTH or not _DNS_SUBDOMAIN.match(domain)):
        return f"domain {domain!r} is not a DNS subdomain of at most {MAX_DOMAIN_LENGTH} characters"
    if not ident or len(ident) > MAX_ID_LENGTH or not _C_IDENTIFIER.match(ident):
        return f"{ident!r} is not a C identifier of at most {MAX_ID_LENGTH} characters"
    return None


# What a ResourceSlice device may carry when the node agent publishes it (per-device node
# selection is not among them: the agent's devices belong to its node).
DEVICE_FIELDS = {
    "name",
    "attributes",
    "capacity",
    "consumesCounters",
    "taints",
    "bindsToNode",
    "bindingConditions",
    "bindingFailureConditions",
    "allowMultipleAllocations",
}
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
MAX_BINDING_CONDITIONS = 4


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    except ValueError:
        return None


def _attribute_problems(attributes: Any) -> list[str]:
    if not isinstance(attributes, dict):
        return [f"attributes: {attributes!r} is not a mapping of names to values"]
    problems: list[str] = []
    for key, value in attributes.items():
        field = f"attributes[{key}]"
        if problem := _qualified_name(str(key)):
            problems.append(f"{field}: {problem}")
        kinds = [k for k in _ATTRIBUTE_TYPES if k in value] if isinstance(value, dict) else []
        if len(kinds) != 1 or len(value) != 1:
            problems.append(f"{field}: {value!r} must be a mapping with exactly one of {', '.join(_ATTRIBUTE_TYPES)}")
            continue
        raw = value[kinds[0]]
        if kinds[0] in ("string", "version") and not isinstance(raw, str):
            problems.append(f"{field}: {kinds[0]} value {raw!r} is not a string")
        elif kinds[0] in ("string", "version") and len(raw.encode()) > MAX_ATTRIBUTE_VALUE_BYTES:
            problems.append(f"{field}: {len(raw.encode())} bytes, at most {MAX_ATTRIBUTE_VALUE_BYTES} are allowed")
        if kinds[0] == "version" and isinstance(raw, str) and not _SEMVER.match(raw):
            problems.append(f"{field}: {raw!r} is not a semantic version (like 1.2.3)")
        if kinds[0] == "int" and (not isinstance(raw, int) or isinstance(raw, bool)):
            problems.append(f"{field}: int value {raw!r} is not an integer")
        if kinds[0] == "bool" and not isinstance(raw, bool):
            problems.append(f"{field}: bool value {raw!r} is not true or false")
    return problems


def _capacity_problems(capacity: Any) -> list[str]:
    if not isinstance(capacity, dict):
        return [f"capacity: {capacity!r} is not a mapping of names to {{value: quantity}}"]
    problems: list[str] = []
    for key, value in capacity.items():
        field = f"capacity[{key}]"
        if problem := _qualified_name(str(key)):
            problems.append(f"{field}: {problem}")
        if not isinstance(value, dict):
            problems.append(f"{field}: {value!r} must be a mapping like {{value: 16Gi}}")
            continue
        try:
            parse_quantity(value.get("value", ""))
        except ValueError as e:
            problems.append(f"{field}.value: {e}")
        if "requestPolicy" in value:
            problems += [f"{field}.requestPolicy: {p}" for p in _policy_problems(value["requestPolicy"])]
    return problems


def _policy_problems(policy: Any) -> list[str]:
    """A consumable capacity's request policy: quantities, and a default inside the range."""
    if not isinstance(policy, dict) or not isinstance(policy.get("validRange") or {}, dict):
        return [f"{policy!r} is not a mapping with default and validRange {{min, max, step}}"]
    found: dict[str, Fraction] = {}
    for key, raw in [("default", policy.get("default")), *((policy.get("validRange") or {}).items())]:
        if raw is None:
            continue
        if (amount := _quantity(raw)) is None:
            return [f"{key}: {raw!r} is not a quantity like 1Gi"]
        found[key] = amount
    default, low, high = found.get("default"), found.get("min"), found.get("max")
    if default is not None and low is not None and default < low:
        return [f"default {policy['default']} is less than min {policy['validRange']['min']}"]
    if default is not None and high is not None and default > high:
        return [f"default {policy['default']} is more than max {policy['validRange']['max']}"]
    return []


def _condition_problems(device: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    for key in ("bindingConditions", "bindingFailureConditions"):
        value = device.get(key)
        if value is None:
            continue
        if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
            problems.append(f"{key}: {value!r} is not a list of condition names")
        elif len(value) > MAX_BINDING_CONDITIONS or len(set(value)) != len(value):
            problems.append(f"{key}: at most {MAX_BINDING_CONDITIONS} different conditions are allowed")
    if device.get("bindingConditions") and not device.get("bindingFailureConditions"):
        problems.append("bindingConditions: bindingFailureConditions are required with them")
    return problems


def _taint_problems(taints: Any) -> list[str]:
    if not isinstance(taints, list) or not all(isinstance(t, dict) for t in taints):
        return [f"taints: {taints!r} is not a list of taints"]
    return [
        f"taints[{i}]: needs a key and an effect of {', '.join(TAINT_EFFECTS)}"
        for i, t in enumerate(taints)
        if not isinstance(t.get("key"), str) or not t.get("key") or t.get("effect") not in TAINT_EFFECTS
    ]


def _counter_problems(consumes: Any, counter_sets: dict[str, dict[str, Fraction]]) -> list[str]:
    """Every counter a device consumes must exist, and no device may consume more than its
    counter set holds: a device that names a missing counter set makes the scheduler refuse the
    whole pool ("invalid resource pools"), so such a device is left out instead."""
    if not isinstance(consumes, list) or not all(isinstance(c, dict) for c in consumes):
        return [f"consumesCounters: {consumes!r} is not a list of {{counterSet, counters}}"]
    problems: list[str] = []
    for i, entry in enumerate(consumes):
        field = f"consumesCounters[{i}]"
        name, counters = entry.get("counterSet"), entry.get("counters")
        if name not in counter_sets:
            known = ", ".join(sorted(counter_sets)) or "none"
            problems.append(f"{field}: counter set {name!r} does not exist in this pool (counter sets: {known})")
            continue
        if not isinstance(counters, dict) or not counters:
            problems.append(f"{field}.counters: {counters!r} is not a mapping of counters to {{value: quantity}}")
            continue
        for counter, value in counters.items():
            amount = _quantity(value.get("value") if isinstance(value, dict) else None)
            held = counter_sets[name].get(counter)
            if held is None:
                problems.append(
                    f"{field}: counter {counter!r} is not in counter set {name!r} "
                    f"(it has {', '.join(sorted(counter_sets[name])) or 'none'})"
                )
            elif amount is None or amount < 0:
                problems.append(f"{field}.counters[{counter}]: {value!r} is not a quantity like {{value: 8Gi}}")
            elif amount > held:
                problems.append(
                    f"{field}.counters[{counter}]: consumes {value['value']}, more than counter set "
                    f"{name!r} holds ({format_quantity(held)}): the device could never be allocated"
                )
    return problems


def counter_capacities(counter_sets: list[dict[str, Any]] | None) -> dict[str, dict[str, Fraction]]:
    """Counter set name -> counter -> amount, for the sets whose amounts parse."""
    found: dict[str, dict[str, Fraction]] = {}
    for counter_set in counter_sets or []:
        counters = counter_set.get("counters") or {}
        found[counter_set.get("name", "")] = {
            name: amount
            for name, value in counters.items()
            if (amount := _quantity((value or {}).get("value"))) is not None
        }
    return found


def device_problems(device: Any, counter_sets: dict[str, dict[str, Fraction]] | None = None) -> list[str]:
    """Everything wrong with one device, each naming the field: empty when it can be published.
    Whatever the device holds (an inventory is hand-written), the answer is a list of problems."""
    if not isinstance(device, dict):
        return [f"{device!r} is not a mapping"]
    name = device.get("name", "")
    problems: list[str] = []
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
        problems.append(
            f"name {name!r}: must be a DNS label (lower-case letters, digits and '-', at most 63 characters)"
        )
    unknown = sorted(str(k) for k in set(device) - DEVICE_FIELDS)
    if unknown:
        problems.append(
            f"unknown field(s) {', '.join(unknown)} (a published device may have {', '.join(sorted(DEVICE_FIELDS))})"
        )
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if (
        isinstance(attributes, dict)
        and isinstance(capacity, dict)
        and len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES
    ):
        problems.append(
            f"attributes and capacity: {len(attributes) + len(capacity)} entries, "
            f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} are allowed"
        )
    problems += _attribute_problems(attributes) + _capacity_problems(capacity) + _condition_problems(device)
    for key in ("allowMultipleAllocations", "bindsToNode"):
        if key in device and not isinstance(device[key], bool):
            problems.append(f"{key}: {device[key]!r} is not true or false")
    if "taints" in device:
        problems += _taint_problems(device["taints"])
    if "consumesCounters" in device:
        problems += _counter_problems(device["consumesCounters"], counter_sets or {})
    return problems


def split_valid(
    devices: list[Any], counter_sets: list[dict[str, Any]] | None = None
) -> tuple[list[dict[str, Any]], list[str]]:
    """(the devices that can be published, one message per problem naming device and field)."""
    capacities = counter_capacities(counter_sets)
    valid: list[dict[str, Any]] = []
    errors: list[str] = []
    seen: set[str | None] = set()
    for device in devices:
        problems = device_problems(device, capacities)
        name = device.get("name") if isinstance(device, dict) else None
        if isinstance(name, str) and name in seen:
            problems.append("name: duplicate device name in the pool")
        if problems:
            errors.extend(f"device {name!r}: {p}" for p in problems)
            continue
        seen.add(name)
        valid.append(device)
    return valid, errors
