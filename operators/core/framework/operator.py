"""One declarative start-up for every operator: what kopf runs for it, in one place.

An operator's ``operator`` module describes itself (``OperatorSpec``: its name, how it starts on a
ready ``Runtime``) and calls ``register``; kopf then runs, for each operator of the process:

1. at start-up: kopf quietened (``kopfsettings.quiet``), the settings read, the API client
   connected, a ``Runtime`` made, then the operator's own ``start``, all-or-nothing
   (``runtime.start_or_undo``): a failure stops what was started and ends the process with the
   reason;
2. at clean-up: the runtime stopped (its tasks, watches, servers and the API client);
3. on the liveness probe: the runtime's answer (``Runtime.liveness``);
4. at login (once per process): kopf's own connection, to the same API server (``login``).

Importing this module registers nothing; only ``register`` does, called by an ``operator`` module
(``kopf run -m operators.<name>.operator``, or ``dra-operators run <name>``).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import kopf

from .. import heap
from ..api.kube import Kube
from ..settings import Settings
from .kopfsettings import quiet
from .login import connection
from .runtime import Runtime, runtime_liveness, start_or_undo, stop_runtime


class ConfigurationError(ValueError):
    """A setting that cannot work: the process ends with this message before connecting."""


@dataclass(frozen=True)
class OperatorSpec:
    name: str
    # Builds the controller on the runtime: informers, ``runtime.prime()``, metrics, leadership.
    start: Callable[[Runtime, Settings, kopf.Memo], Awaitable[None]]
    # Before anything connects: raises ConfigurationError for settings that cannot work.
    check: Callable[[Settings, kopf.Memo], None] | None = None
    # DRA_API_QPS and DRA_API_BURST apply (the node agent's few requests are never limited).
    rate_limited: bool = True

    @property
    def memo_key(self) -> str:
        return f"{self.name}_runtime"


@functools.cache  # once per process, however many operators it runs
def _register_login() -> None:
    kopf.on.login(id="dra-operators-login")(connection)


def register(spec: OperatorSpec) -> None:
    """kopf's start-up, clean-up and probe handlers for ``spec`` (and, once per process, kopf's
    login: ``login.connection``)."""
    _register_login()

    @kopf.on.startup(id=f"{spec.name}-start", errors=kopf.ErrorsMode.PERMANENT)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        quiet(settings)
        config = Settings.from_env()
        if spec.check is not None:
            try:
                spec.check(config, memo)
            except ConfigurationError as e:
                raise kopf.PermanentError(str(e)) from None
        qps, burst = (config.api_qps, config.api_burst) if spec.rate_limited else (0.0, 0)
        kube = await Kube.connect(config.kubeconfig, qps=qps, burst=burst)
        runtime = Runtime(spec.name, kube, watch_silence=config.watch_silence)
        setattr(memo, spec.memo_key, runtime)
        runtime.on_cleanup(kube.close)
        await start_or_undo(runtime, lambda: spec.start(runtime, config, memo))
        heap.started()

    @kopf.on.cleanup(id=f"{spec.name}-stop")
    async def stop(memo: kopf.Memo, **_: Any) -> None:
        await stop_runtime(memo, spec.memo_key)

    @kopf.on.probe(id=spec.name)
    def liveness(memo: kopf.Memo, **_: Any) -> dict[str, Any]:
        return runtime_liveness(memo, spec.memo_key)
