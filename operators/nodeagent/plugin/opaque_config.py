"""Opaque device configuration of the suite's drivers (pure): decoded strictly, merged in
upstream's order.

Claims and DeviceClasses carry ``config[].opaque{driver, parameters}``; the scheduler copies the
class's into ``status.allocation.devices.config`` (``source: FromClass``) beside the claim's
(``FromClaim``). As upstream's drivers read them (dra-example-driver and NVIDIA's
``GetOpaqueDeviceConfigs``): configs for another driver are skipped, those of the class come
first, then those of the claim, each source in its own order, and a config applies to a result
when its ``requests`` is empty or names the result's request (or its parent request, for a
subrequest). Where upstream's drivers take the last applicable config whole, ours are merged in
that order field by field (later wins), so a class can set defaults that a claim refines.

The configuration kind (``nodeagent.dra-operators.dev/v1alpha1``, ``DeviceConfig``)::

    apiVersion: nodeagent.dra-operators.dev/v1alpha1
    kind: DeviceConfig
    env:                       # environment of the containers using the device (CDI)
      MY_SETTING: "value"      # names: [A-Za-z_][A-Za-z0-9_]*, not starting with DRA_ (ours)
                               # nor NVIDIA_ (reserved: the toolkit's device grants)
    sharing:                   # as NVIDIA's GpuConfig
      strategy: TimeSlicing    # or Exclusive
      timeSlicingConfig:
        interval: Default      # Default, Short, Medium or Long (TimeSlicing only)

NVIDIA's own kind is understood too, for claims written for NVIDIA's driver:
``resource.nvidia.com/v1beta1`` ``GpuConfig`` with ``sharing`` (``TimeSlicing``; ``MPS`` is
refused, saying so). Decoding is strict: an unknown field or a bad value fails the claim's
prepare with a message naming the field and where the config came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

GROUP = "nodeagent.dra-operators.dev"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "DeviceConfig"
NVIDIA_API_VERSION, NVIDIA_KIND = "resource.nvidia.com/v1beta1", "GpuConfig"
STRATEGIES = ("Exclusive", "TimeSlicing")
INTERVALS = ("Default", "Short", "Medium", "Long")
# All of NVIDIA_*, not only NVIDIA_VISIBLE_DEVICES: the toolkit and nvidia-container-runtime treat
# many of them as device grants (NVIDIA_MIG_CONFIG_DEVICES, NVIDIA_IMEX_CHANNELS, NVIDIA_GDRCOPY, ...)
# and new ones come with new toolkit releases. CDI applies a device's edits after the spec's, so a
# config's variable would win over the driver's NVIDIA_VISIBLE_DEVICES.
RESERVED_ENV_PREFIX = "NVIDIA_"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Config:
    requests: tuple[str, ...]  # empty: every request
    parameters: dict[str, Any]  # decoded: {"env": {...}, "sharing": {...}} (only what was set)
    where: str  # "the claim's config[0]" / "DeviceClass gpu's config (config[1] of the allocation)"


def _check_fields(value: Any, allowed: set[str], path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{path or 'parameters'}: must be an object, not {type(value).__name__}")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ConfigError(
            f"unknown field {', '.join(f'{path}.{u}' if path else u for u in unknown)!s} "
            f"(known: {', '.join(sorted(allowed))})"
        )
    return value


def _sharing(value: Any, path: str, strategies: tuple[str, ...]) -> dict[str, Any]:
    nvidia = "MPS" in strategies
    sharing = _check_fields(value, {"strategy", "timeSlicingConfig"} | ({"mpsConfig"} if nvidia else set()), path)
    strategy = sharing.get("strategy")
    if strategy not in strategies:
        raise ConfigError(f"{path}.strategy: {strategy!r} is not one of {', '.join(strategies)}")
    if strategy == "MPS":
        raise ConfigError(
            f"{path}.strategy: MPS is not supported by this driver (use TimeSlicing or, with "
            f"{API_VERSION} {KIND}, Exclusive)"
        )
    out: dict[str, Any] = {"strategy": strategy}
    if "timeSlicingConfig" in sharing:
        if strategy != "TimeSlicing":
            raise ConfigError(f"{path}.timeSlicingConfig: only with strategy TimeSlicing, not {strategy}")
        ts = _check_fields(sharing["timeSlicingConfig"], {"interval"}, f"{path}.timeSlicingConfig")
        interval = ts.get("interval", "Default")
        if interval not in INTERVALS:
            raise ConfigError(f"{path}.timeSlicingConfig.interval: {interval!r} is not one of {', '.join(INTERVALS)}")
        out["timeSlicingConfig"] = {"interval": interval}
    if sharing.get("mpsConfig") is not None:
        raise ConfigError(f"{path}.mpsConfig: MPS is not supported by this driver")
    return out


def decode(parameters: Any) -> dict[str, Any]:
    """One config's parameters to {"env", "sharing"} (what it sets); ConfigError naming the field."""
    if isinstance(parameters, (str, bytes)):
        try:
            parameters = json.loads(parameters)
        except ValueError as e:
            raise ConfigError(f"parameters are not JSON: {e}") from e
        except RecursionError:
            raise ConfigError("parameters are nested too deeply to be a configuration") from None
    if not isinstance(parameters, dict):
        raise ConfigError(f"parameters must be an object with apiVersion and kind, not {type(parameters).__name__}")
    kind = (parameters.get("apiVersion"), parameters.get("kind"))
    if kind == (API_VERSION, KIND):
        body = _check_fields(parameters, {"apiVersion", "kind", "env", "sharing"}, "")
        out: dict[str, Any] = {}
        if "env" in body:
            env = body["env"]
            if not isinstance(env, dict):
                raise ConfigError(f"env: must map variable names to strings, not {type(env).__name__}")
            for name, value in env.items():
                if not _ENV_NAME.fullmatch(str(name)):  # match() let "A\n" through ($ before a final newline)
                    raise ConfigError(f"env.{name}: not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
                if str(name).startswith("DRA_"):
                    raise ConfigError(f"env.{name}: names starting with DRA_ are the driver's own")
                if str(name).startswith(RESERVED_ENV_PREFIX):
                    raise ConfigError(
                        f"env.{name}: names starting with {RESERVED_ENV_PREFIX} are reserved: the driver sets "
                        "NVIDIA_VISIBLE_DEVICES to the claim's own devices, and the NVIDIA Container Toolkit reads "
                        f"{RESERVED_ENV_PREFIX}* to choose which GPUs and driver capabilities a container gets, so a "
                        "configuration could hand out devices the claim was not allocated; remove "
                        f"env.{name} from the configuration"
                    )
                if not isinstance(value, str):
                    raise ConfigError(f"env.{name}: {value!r} is not a string (quote it)")
                if "\0" in value:  # the container's environment cannot hold it: its start would fail
                    raise ConfigError(f"env.{name}: the value holds a NUL character")
            out["env"] = dict(env)
        if "sharing" in body:
            out["sharing"] = _sharing(body["sharing"], "sharing", STRATEGIES)
        return out
    if kind == (NVIDIA_API_VERSION, NVIDIA_KIND):
        body = _check_fields(parameters, {"apiVersion", "kind", "sharing"}, "")
        return {"sharing": _sharing(body["sharing"], "sharing", ("TimeSlicing", "MPS"))} if "sharing" in body else {}
    raise ConfigError(
        f"apiVersion {kind[0]!r} kind {kind[1]!r} is not a configuration this driver understands "
        f"({API_VERSION} {KIND}, or NVIDIA's {NVIDIA_API_VERSION} {NVIDIA_KIND})"
    )


def _class_of(claim: dict[str, Any], requests: list[str]) -> str:
    """The DeviceClass(es) of the requests a FromClass config applies to (to name its source)."""
    names = []
    for request in (claim.get("spec") or {}).get("devices", {}).get("requests") or []:
        if requests and request.get("name") not in requests:
            continue
        for sub in [request.get("exactly") or {}] + list(request.get("firstAvailable") or []):
            if sub.get("deviceClassName") and sub["deviceClassName"] not in names:
                names.append(sub["deviceClassName"])
    return ", ".join(names) or "?"


def claim_configs(claim: dict[str, Any], driver: str) -> list[Config]:
    """This driver's configs of an allocated claim, class first then claim, decoded; ConfigError
    naming the field and the object a bad one came from."""
    ref = f"ResourceClaim {claim['metadata'].get('namespace')}/{claim['metadata'].get('name')}"
    entries = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("config") or []
    ordered = [(i, e) for i, e in enumerate(entries) if e.get("source") == "FromClass"] + [
        (i, e) for i, e in enumerate(entries) if e.get("source") != "FromClass"
    ]
    claim_index = 0
    configs = []
    for i, entry in ordered:
        requests = list(entry.get("requests") or [])
        if entry.get("source") == "FromClass":
            where = f"DeviceClass {_class_of(claim, requests)} (config[{i}] of {ref}'s allocation)"
        else:
            where = f"{ref} spec.devices.config[{claim_index}]"
            claim_index += 1
        opaque = entry.get("opaque")
        if opaque is None or opaque.get("driver") != driver:
            continue  # another driver's, or a kind of config this release does not know: not ours
        try:
            parameters = decode(opaque.get("parameters"))
        except ConfigError as e:
            raise ConfigError(f"opaque config of {where} for driver {driver}: {e}") from None
        configs.append(Config(tuple(requests), parameters, where))
    return configs


def for_request(configs: list[Config], request: str) -> dict[str, Any] | None:
    """The merged configuration for one allocation result's request ("req" or "req/sub"), or None."""
    parent = request.split("/", 1)[0]
    merged: dict[str, Any] = {}
    for config in configs:
        if config.requests and request not in config.requests and parent not in config.requests:
            continue
        for key, value in config.parameters.items():
            merged[key] = {**merged.get(key, {}), **value} if key == "env" else value
    return merged or None
