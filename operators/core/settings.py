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
    claims_workers: int = setting(50, "DRA_CLAIMS_WORKERS",
                                  "claims: concurrent syncs (upstream --concurrent-resourceclaim-syncs)")
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
