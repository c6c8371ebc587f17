"""The suite's one typed settings object, read from ``DRA_*`` environment variables.

Every field documents itself; ``dra-operators settings`` and the README table list them.
A value that cannot work (not a number, out of range, not one of the choices) is refused when
the settings are read, with a ``SettingsError`` naming the variable, the value and what to set
instead: the process exits with that message before it starts anything.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class SettingsError(ValueError):
    """A setting whose value cannot work; the message names the variable and the fix."""


def setting(
    default: Any,
    env: str,
    help: str,
    *,
    choices: tuple[str, ...] = (),
    minimum: float | None = None,
    positive: bool = False,
    maximum: float | None = None,
    check: Callable[[Any], str | None] | None = None,
) -> Any:
    """``choices``: the allowed strings; ``minimum``/``maximum``: inclusive bounds of a number;
    ``positive``: a number greater than 0; ``check(value)``: a problem, or None."""
    return field(
        default=default,
        metadata={
            "env": env,
            "help": help,
            "choices": choices,
            "minimum": minimum,
            "positive": positive,
            "maximum": maximum,
            "check": check,
        },
    )


def _log_level(value: str) -> str | None:
    return None if isinstance(logging.getLevelName(value.upper()), int) else "not a log level"


def _logger_names(value: str) -> str | None:
    bad = [x.strip() for x in value.split(",") if x.strip() and (" " in x.strip() or x.strip().strip(".") != x.strip())]
    return f"{', '.join(map(repr, bad))} is not a logger name" if bad else None


def _xid_list(value: str) -> str | None:
    bad = [x.strip() for x in value.split(",") if x.strip() and not x.strip().isdigit()]
    return f"{', '.join(map(repr, bad))} is not an XID number" if bad else None


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = setting(None, "KUBECONFIG", "kubeconfig file; in-cluster ServiceAccount when unset")
    log_level: str = setting("INFO", "DRA_LOG_LEVEL", "log level: DEBUG, INFO, WARNING, ERROR", check=_log_level)
    log_format: str = setting("json", "DRA_LOG_FORMAT", "log format: json or console", choices=("json", "console"))
    log_debug_loggers: str = setting(
        "",
        "DRA_LOG_DEBUG_LOGGERS",
        "loggers of other libraries to log at DEBUG, comma-separated (such as "
        "h2,grpclib,aiohttp); they stay at INFO otherwise, even with DRA_LOG_LEVEL=DEBUG",
        check=_logger_names,
    )
    metrics_port: int = setting(
        8080, "DRA_METRICS_PORT", "port serving Prometheus /metrics (0: off)", minimum=0, maximum=65535
    )
    tracemalloc: int = setting(
        0,
        "DRA_TRACEMALLOC",
        "frames per allocation traced by Python's tracemalloc, read at GET "
        "/debug/tracemalloc on the metrics port (0: off; costs memory and CPU)",
        minimum=0,
        maximum=100,
    )
    leader_election: bool = setting(
        False, "DRA_LEADER_ELECTION", "claims, taints, binding: act only while holding a Lease (for several replicas)"
    )
    leader_election_namespace: str = setting(
        "", "DRA_LEADER_ELECTION_NAMESPACE", "namespace of the Leases (default: the Pod's namespace)"
    )
    leader_election_lease_duration: float = setting(
        15.0, "DRA_LEADER_ELECTION_LEASE_DURATION", "seconds a leader's Lease lasts without renewal", positive=True
    )
    api_qps: float = setting(
        0.0,
        "DRA_API_QPS",
        "claims, taints, binding, poolstatus: most API requests a second (client-go's QPS; 0: no limit, the default)",
        minimum=0,
    )
    api_burst: int = setting(
        0, "DRA_API_BURST", "requests allowed at once above DRA_API_QPS (client-go's burst; 0: DRA_API_QPS)", minimum=0
    )
    api_wait: float = setting(
        60.0,
        "DRA_API_WAIT",
        "seconds a starting operator waits for an API server that does not answer yet, before it exits with the reason",
        minimum=0,
    )
    watch_silence: float = setting(
        600.0,
        "DRA_WATCH_SILENCE",
        "seconds a watch may stay silent before the operator checks that it still "
        "delivers; a stuck watch fails liveness",
        positive=True,
    )
    claims_workers: int = setting(
        50, "DRA_CLAIMS_WORKERS", "claims: concurrent syncs (upstream --concurrent-resourceclaim-syncs)", minimum=1
    )
    # -- taints ------------------------------------------------------------------------------
    taints_workers: int = setting(
        10,
        "DRA_TAINTS_WORKERS",
        "taints: concurrent syncs (upstream --concurrent-device-taint-eviction-syncs)",
        minimum=1,
    )
    taints_evictions_per_second: float = setting(
        0.0,
        "DRA_TAINTS_EVICTIONS_PER_SECOND",
        "taints: most evictions per second over all rules and taints (0: no limit, as upstream)",
        minimum=0,
    )
    taints_eviction_api_max_wait: float = setting(
        300.0,
        "DRA_TAINTS_EVICTION_API_MAX_WAIT",
        "taints: seconds past its eviction time a Pod of an Eviction-API rule waits for its "
        "PodDisruptionBudget before it is deleted anyway",
        minimum=0,
    )
    taints_eviction_api_retry: float = setting(
        2.0,
        "DRA_TAINTS_EVICTION_API_RETRY",
        "taints: seconds between re-checks of a Pod waiting for its PodDisruptionBudget",
        positive=True,
    )
    taints_rule_version: str = setting(
        "",
        "DRA_TAINTS_RULE_VERSION",
        "taints: DeviceTaintRule version to use (v1, v1beta2, v1alpha3) instead of the one discovered",
        choices=("", "v1", "v1beta2", "v1alpha3"),
    )
    # -- poolstatus --------------------------------------------------------------------------
    poolstatus_workers: int = setting(
        1, "DRA_POOLSTATUS_WORKERS", "poolstatus: concurrent request syncs (upstream runs 1)", minimum=1
    )
    poolstatus_completed_ttl: float = setting(
        3600.0,
        "DRA_POOLSTATUS_COMPLETED_TTL",
        "poolstatus: seconds a completed or failed request is kept (upstream: 1 h, fixed)",
        positive=True,
    )
    poolstatus_pending_ttl: float = setting(
        86400.0,
        "DRA_POOLSTATUS_PENDING_TTL",
        "poolstatus: seconds a request never answered is kept (upstream: 24 h, fixed)",
        positive=True,
    )
    poolstatus_cleanup_interval: float = setting(
        600.0,
        "DRA_POOLSTATUS_CLEANUP_INTERVAL",
        "poolstatus: seconds between looks for expired requests (upstream: 10 min, fixed)",
        positive=True,
    )
    # -- nodeagent ---------------------------------------------------------------------------
    node_name: str = setting("", "NODE_NAME", "nodeagent: the Node this agent publishes devices for (required)")
    nodeagent_backend: str = setting(
        "nvml", "DRA_NODEAGENT_BACKEND", "nodeagent: device backend, nvml or simulated", choices=("nvml", "simulated")
    )
    nodeagent_driver: str = setting(
        "",
        "DRA_NODEAGENT_DRIVER",
        "nodeagent: driver name (default gpu.nvidia.com for nvml, gpu.sim.dra-operators.dev for simulated)",
    )
    nodeagent_inventory: str = setting(
        "", "DRA_NODEAGENT_INVENTORY", "nodeagent: simulated backend's inventory YAML file"
    )
    nodeagent_sync_delay: float = setting(
        30.0,
        "DRA_NODEAGENT_SYNC_DELAY",
        "nodeagent: seconds after a change of its slices before they are checked (upstream's helper waits 30 s)",
        minimum=0,
    )
    nodeagent_health_quiet_period: float = setting(
        300.0,
        "DRA_NODEAGENT_HEALTH_QUIET_PERIOD",
        "nodeagent: seconds without a health event before a device that passes its check loses its taint",
        minimum=0,
    )
    nodeagent_ignored_xids: str = setting(
        "13,31,43,45,68,109",
        "DRA_NODEAGENT_IGNORED_XIDS",
        "nodeagent: XIDs that taint with effect None instead of NoSchedule",
        check=_xid_list,
    )
    nodeagent_kubelet_plugin: bool = setting(
        True, "DRA_NODEAGENT_KUBELET_PLUGIN", "nodeagent: serve kubelet as the driver's DRA plugin"
    )
    nodeagent_registry_dir: str = setting(
        "/var/lib/kubelet/plugins_registry",
        "DRA_NODEAGENT_REGISTRY_DIR",
        "nodeagent: kubelet's plugin registry directory",
    )
    nodeagent_plugins_dir: str = setting(
        "/var/lib/kubelet/plugins",
        "DRA_NODEAGENT_PLUGINS_DIR",
        "nodeagent: kubelet's plugins directory (DRA socket, checkpoint)",
    )
    nodeagent_cdi_root: str = setting(
        "/var/run/cdi", "DRA_NODEAGENT_CDI_ROOT", "nodeagent: where CDI specs of prepared claims are written"
    )
    nodeagent_toolkit_cdi_dirs: str = setting(
        "/etc/cdi,/var/run/cdi",
        "DRA_NODEAGENT_TOOLKIT_CDI_DIRS",
        "nodeagent: where the NVIDIA Container Toolkit's CDI spec is looked for (comma-separated)",
    )
    nodeagent_nvidia_container_runtime: bool = setting(
        False,
        "DRA_NODEAGENT_NVIDIA_CONTAINER_RUNTIME",
        "nodeagent: nvidia-container-runtime is the node's runtime, "
        "so claims may be prepared without the toolkit's CDI spec",
    )
    pod_uid: str = setting(
        "",
        "POD_UID",
        "nodeagent: the agent Pod's UID (downward API metadata.uid): unique kubelet plugin sockets "
        "per instance, so a DaemonSet rolling update runs old and new side by side",
    )
    nodeagent_nvml_refresh: float = setting(
        30.0,
        "DRA_NODEAGENT_NVML_REFRESH",
        "nodeagent: seconds between checks for GPUs gone or back and MIG changes (nvml backend)",
        minimum=0.1,
    )
    nodeagent_grpc_health_port: int = setting(
        0,
        "DRA_NODEAGENT_GRPC_HEALTH_PORT",
        "nodeagent: TCP port of the grpc.health.v1 service for kubelet's grpc "
        'liveness probe (services "" and "liveness"; 0 = not served)',
        minimum=0,
    )
    nodeagent_self_check_period: float = setting(
        10.0,
        "DRA_NODEAGENT_SELF_CHECK_PERIOD",
        "nodeagent: seconds between the plugin's calls to its own sockets; 3 misses in a row fail liveness",
        minimum=0.1,
    )
    # -- binding -----------------------------------------------------------------------------
    binding_drivers: str = setting(
        "", "DRA_BINDING_DRIVERS", "binding: drivers served, comma-separated names or patterns (* = all; empty = none)"
    )
    binding_preparer: str = setting(
        "simulated",
        "DRA_BINDING_PREPARER",
        "binding: preparer, simulated, http or an entry point of dra_operators.preparers",
    )
    binding_preparer_config: str = setting(
        "", "DRA_BINDING_PREPARER_CONFIG", "binding: the preparer's configuration, a JSON object or @file (JSON/YAML)"
    )
    binding_timeout: float = setting(
        600.0,
        "DRA_BINDING_TIMEOUT",
        "binding: seconds after allocation a preparation may take; set it to the "
        "scheduler's DynamicResources bindingTimeout",
        positive=True,
    )
    binding_workers: int = setting(10, "DRA_BINDING_WORKERS", "binding: concurrent claim syncs", minimum=1)
    binding_max_parallel: int = setting(
        100, "DRA_BINDING_MAX_PARALLEL", "binding: preparations running at once", minimum=1
    )
    binding_cool_off: float = setting(
        300.0,
        "DRA_BINDING_COOL_OFF",
        "binding: seconds a device whose preparation failed stays tainted (0: no taint)",
        minimum=0,
    )
    binding_taint_key: str = setting(
        "binding.dra-operators.dev/preparation-failed",
        "DRA_BINDING_TAINT_KEY",
        "binding: key of the cool-off device taint",
    )
    binding_taint_effect: str = setting(
        "NoSchedule",
        "DRA_BINDING_TAINT_EFFECT",
        "binding: effect of the cool-off device taint (NoSchedule or None)",
        choices=("NoSchedule", "None"),
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """The settings from ``environ`` (default: the process environment); SettingsError for
        the first value that cannot work."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is None or raw == "":
                continue
            values[f.name] = parse_value(f, raw)
        values.update(overrides)
        return cls(**values)

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str]]:
        """(name, environment variable, default, meaning) for every setting."""
        return [(f.name, f.metadata["env"], f.default, f.metadata["help"]) for f in dataclasses.fields(cls)]


def _wanted(f: dataclasses.Field) -> str:
    """The values a setting accepts, in words."""
    meta = f.metadata
    if meta.get("choices"):
        return "one of " + ", ".join(repr(c) for c in meta["choices"] if c)
    kind = type(f.default) if f.default is not None else str
    if kind is bool:
        return "true or false"
    if kind is str:
        return (
            "XID numbers separated by commas, like 13,31,43"
            if meta.get("check") is _xid_list
            else "DEBUG, INFO, WARNING or ERROR"
            if meta.get("check") is _log_level
            else "logger names separated by commas, like h2,grpclib"
            if meta.get("check") is _logger_names
            else ""
        )
    words = "a whole number" if kind is int else "a number"
    bounds = [
        f">= {meta['minimum']:g}" if meta.get("minimum") is not None else "",
        "> 0" if meta.get("positive") else "",
        f"<= {meta['maximum']:g}" if meta.get("maximum") is not None else "",
    ]
    return " ".join([words, " and ".join(b for b in bounds if b)]).strip()


def parse_value(f: dataclasses.Field, raw: str) -> Any:
    """One setting's value from its environment text, checked (pure; SettingsError)."""
    env, meta = f.metadata["env"], f.metadata
    kind = type(f.default) if f.default is not None else str
    text = raw.strip()

    def refuse(problem: str) -> SettingsError:
        default = "" if f.default in (None, "") else f" ({f.default})"
        wanted = _wanted(f)
        return SettingsError(
            f"{env}={raw!r}: {problem}. {f'Set {wanted}, or u' if wanted else 'U'}nset {env} "
            f"for the default{default}. ({env}: {meta['help']})"
        )

    value: Any
    if kind is bool:
        if text.lower() not in TRUE + FALSE:
            raise refuse("not true or false")
        value = text.lower() in TRUE
    elif kind is int:
        try:
            value = int(text)
        except ValueError:
            raise refuse("not a whole number") from None
    elif kind is float:
        try:
            value = float(text)
        except ValueError:
            raise refuse("not a number") from None
        if not math.isfinite(value):
            raise refuse("not a finite number")
    else:
        value = raw
    if meta.get("choices") and value not in meta["choices"]:
        raise refuse("not a known value")
    if meta.get("minimum") is not None and value < meta["minimum"]:
        raise refuse("too small")
    if meta.get("maximum") is not None and value > meta["maximum"]:
        raise refuse("too large")
    if meta.get("positive") and not value > 0:
        raise refuse("must be greater than 0")
    if meta.get("check") is not None and (problem := meta["check"](value)):
        raise refuse(problem)
    return value
