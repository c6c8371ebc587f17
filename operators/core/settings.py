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
