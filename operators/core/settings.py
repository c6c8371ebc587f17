"""The suite's one typed settings object, read from ``DRA_*`` environment variables.

Every field documents itself; ``dra-operators settings`` and the README table list them.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any


def setting(default: Any, env: str, help: str) -> Any:
    return field(default=default, metadata={"env": env, "help": help})


@dataclass(frozen=True)
class Settings:
    kubeconfig: str | None = setting(None, "KUBECONFIG", "kubeconfig file; in-cluster ServiceAccount when unset")
    log_level: str = setting("INFO", "DRA_LOG_LEVEL", "log level: DEBUG, INFO, WARNING, ERROR")
    log_format: str = setting("json", "DRA_LOG_FORMAT", "log format: json or console")
    metrics_port: int = setting(8080, "DRA_METRICS_PORT", "port serving Prometheus /metrics (0: off)")
    leader_election: bool = setting(False, "DRA_LEADER_ELECTION",
                                    "claims, taints, binding: act only while holding a Lease (for several replicas)")
    leader_election_namespace: str = setting("", "DRA_LEADER_ELECTION_NAMESPACE",
                                             "namespace of the Leases (default: the Pod's namespace)")
    leader_election_lease_duration: float = setting(15.0, "DRA_LEADER_ELECTION_LEASE_DURATION",
                                                    "seconds a leader's Lease lasts without renewal")
    watch_silence: float = setting(600.0, "DRA_WATCH_SILENCE",
                                   "seconds a watch may stay silent before the operator checks that it still "
                                   "delivers; a stuck watch fails liveness")
    claims_workers: int = setting(50, "DRA_CLAIMS_WORKERS",
                                  "claims: concurrent syncs (upstream --concurrent-resourceclaim-syncs)")
    # -- taints ------------------------------------------------------------------------------
    taints_workers: int = setting(10, "DRA_TAINTS_WORKERS",
                                  "taints: concurrent syncs (upstream --concurrent-device-taint-eviction-syncs)")
    taints_evictions_per_second: float = setting(
        0.0, "DRA_TAINTS_EVICTIONS_PER_SECOND",
        "taints: most evictions per second over all rules and taints (0: no limit, as upstream)")
    taints_eviction_api_max_wait: float = setting(
        300.0, "DRA_TAINTS_EVICTION_API_MAX_WAIT",
        "taints: seconds past its eviction time a Pod of an Eviction-API rule waits for its "
        "PodDisruptionBudget before it is deleted anyway")
    taints_eviction_api_retry: float = setting(
        2.0, "DRA_TAINTS_EVICTION_API_RETRY",
        "taints: seconds between re-checks of a Pod waiting for its PodDisruptionBudget")
    taints_rule_version: str = setting(
        "", "DRA_TAINTS_RULE_VERSION",
        "taints: DeviceTaintRule version to use (v1, v1beta2, v1alpha3) instead of the one discovered")
    # -- nodeagent ---------------------------------------------------------------------------
    node_name: str = setting("", "NODE_NAME", "nodeagent: the Node this agent publishes devices for (required)")
    nodeagent_backend: str = setting("nvml", "DRA_NODEAGENT_BACKEND", "nodeagent: device backend, nvml or simulated")
    nodeagent_driver: str = setting("", "DRA_NODEAGENT_DRIVER",
                                    "nodeagent: driver name (default gpu.nvidia.com for nvml, "
                                    "gpu.sim.dra-operators.dev for simulated)")
    nodeagent_inventory: str = setting("", "DRA_NODEAGENT_INVENTORY", "nodeagent: simulated backend's inventory YAML file")
    nodeagent_sync_delay: float = setting(30.0, "DRA_NODEAGENT_SYNC_DELAY",
                                          "nodeagent: seconds after a change of its slices before they are checked "
                                          "(upstream's helper waits 30 s)")
    nodeagent_health_quiet_period: float = setting(300.0, "DRA_NODEAGENT_HEALTH_QUIET_PERIOD",
                                                   "nodeagent: seconds without a health event before a device that "
                                                   "passes its check loses its taint")
    nodeagent_ignored_xids: str = setting("13,31,43,45,68,109", "DRA_NODEAGENT_IGNORED_XIDS",
                                          "nodeagent: XIDs that taint with effect None instead of NoSchedule")
    nodeagent_kubelet_plugin: bool = setting(True, "DRA_NODEAGENT_KUBELET_PLUGIN",
                                             "nodeagent: serve kubelet as the driver's DRA plugin")
    nodeagent_registry_dir: str = setting("/var/lib/kubelet/plugins_registry", "DRA_NODEAGENT_REGISTRY_DIR",
                                          "nodeagent: kubelet's plugin registry directory")
    nodeagent_plugins_dir: str = setting("/var/lib/kubelet/plugins", "DRA_NODEAGENT_PLUGINS_DIR",
                                         "nodeagent: kubelet's plugins directory (DRA socket, checkpoint)")
    nodeagent_cdi_root: str = setting("/var/run/cdi", "DRA_NODEAGENT_CDI_ROOT",
                                      "nodeagent: where CDI specs of prepared claims are written")
    # -- binding -----------------------------------------------------------------------------
    binding_drivers: str = setting("", "DRA_BINDING_DRIVERS",
                                   "binding: drivers served, comma-separated names or patterns (* = all; "
                                   "empty = none)")
    binding_preparer: str = setting("simulated", "DRA_BINDING_PREPARER",
                                    "binding: preparer, simulated, http or an entry point of dra_operators.preparers")
    binding_preparer_config: str = setting("", "DRA_BINDING_PREPARER_CONFIG",
                                           "binding: the preparer's configuration, a JSON object or @file (JSON/YAML)")
    binding_timeout: float = setting(600.0, "DRA_BINDING_TIMEOUT",
                                     "binding: seconds after allocation a preparation may take; set it to the "
                                     "scheduler's DynamicResources bindingTimeout")
    binding_workers: int = setting(10, "DRA_BINDING_WORKERS", "binding: concurrent claim syncs")
    binding_max_parallel: int = setting(100, "DRA_BINDING_MAX_PARALLEL", "binding: preparations running at once")
    binding_cool_off: float = setting(300.0, "DRA_BINDING_COOL_OFF",
                                      "binding: seconds a device whose preparation failed stays tainted (0: no taint)")
    binding_taint_key: str = setting("binding.dra-operators.dev/preparation-failed", "DRA_BINDING_TAINT_KEY",
                                     "binding: key of the cool-off device taint")
    binding_taint_effect: str = setting("NoSchedule", "DRA_BINDING_TAINT_EFFECT",
                                        "binding: effect of the cool-off device taint (NoSchedule or None)")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **overrides: Any) -> "Settings":
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is None or raw == "":
                continue
            kind = type(f.default) if f.default is not None else str
            try:
                values[f.name] = kind(raw) if kind is not bool else raw.lower() in ("1", "true", "yes")
            except ValueError as e:
                raise ValueError(f"{f.metadata['env']}={raw!r}: expected {kind.__name__} ({f.metadata['help']})") from e
        values.update(overrides)
        return cls(**values)

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str]]:
        """(name, environment variable, default, meaning) for every setting."""
        return [(f.name, f.metadata["env"], f.default, f.metadata["help"]) for f in dataclasses.fields(cls)]
