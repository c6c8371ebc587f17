"""Checks a device against the API server's ResourceSlice limits before it is published, so
one bad device is reported by name and field while the others are still published."""

from __future__ import annotations

import re
from typing import Any

from ..core.quantity import parse_quantity

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
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$")
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


def device_problems(device: dict[str, Any]) -> list[str]:
    """Everything wrong with one device, each naming the field: empty when it can be published."""
    name = device.get("name", "")
    problems: list[str] = []
    if not isinstance(name, str) or len(name) > 63 or not _DNS_LABEL.match(name):
        problems.append(f"name {name!r}: must be a DNS label (lower-case letters, digits and '-', "
                        "at most 63 characters)")
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        problems.append(f"attributes and capacity: {len(attributes) + len(capacity)} entries, "
                        f"at most {MAX_ATTRIBUTES_AND_CAPACITIES} are allowed")
    for key, value in attributes.items():
        field = f"attributes[{key}]"
        if problem := _qualified_name(key):
            problems.append(f"{field}: {problem}")
        kinds = [k for k in _ATTRIBUTE_TYPES if k in (value or {})]
        if len(kinds) != 1:
            problems.append(f"{field}: exactly one of {', '.join(_ATTRIBUTE_TYPES)} must be set")
            continue
        raw = value[kinds[0]]
        if kinds[0] in ("string", "version") and len(str(raw).encode()) > MAX_ATTRIBUTE_VALUE_BYTES:
            problems.append(f"{field}: {len(str(raw).encode())} bytes, at most {MAX_ATTRIBUTE_VALUE_BYTES} are allowed")
        if kinds[0] == "version" and not _SEMVER.match(str(raw)):
            problems.append(f"{field}: {raw!r} is not a semantic version (like 1.2.3)")
        if kinds[0] == "int" and (not isinstance(raw, int) or isinstance(raw, bool)):
            problems.append(f"{field}: int value {raw!r} is not an integer")
        if kinds[0] == "bool" and not isinstance(raw, bool):
            problems.append(f"{field}: bool value {raw!r} is not true or false")
    for key, value in capacity.items():
        field = f"capacity[{key}]"
        if problem := _qualified_name(key):
            problems.append(f"{field}: {problem}")
        try:
            parse_quantity((value or {}).get("value", ""))
        except ValueError as e:
            problems.append(f"{field}.value: {e}")
    return problems


def split_valid(devices: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """(the devices that can be published, one message per problem naming device and field)."""
    valid, errors, seen = [], [], set()
    for device in devices:
        problems = device_problems(device)
        name = device.get("name")
        if name in seen:
            problems.append("name: duplicate device name in the pool")
        if problems:
            errors.extend(f"device {name!r}: {p}" for p in problems)
            continue
        seen.add(name)
        valid.append(device)
    return valid, errors
