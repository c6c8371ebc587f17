"""The binding operator's start-up: the claim informer feeds the controller's cache and queue."""

from __future__ import annotations

import kopf

from ..core.api.featuregates import apiserver_feature_gates
from ..core.api.resources import DEVICE_TAINT_RULES, RESOURCE_CLAIMS
from ..core.framework.metrics import serve
from ..core.framework.operator import ConfigurationError, OperatorSpec, register
from ..core.framework.runtime import Runtime
from ..core.logging import get_logger
from ..core.settings import Settings
from . import decisions as d
from . import preparers, rbac
from .controller import BindingController
from .metrics import Metrics

log = get_logger("operators.binding")

TAINT_EFFECTS = ("NoSchedule", "None")  # NoExecute would evict Pods that use the device elsewhere
BINDING_CONDITIONS_GATE = "DRADeviceBindingConditions"


def gate_off_message(host: str | None) -> str:
    return (
        f"the API server{f' at {host}' if host else ''} runs with {BINDING_CONDITIONS_GATE} off (alpha and off "
        "by default in Kubernetes 1.34 and 1.35): it drops the binding conditions of devices and claims, so "
        "the scheduler never waits for this operator. Turn the gate on in kube-apiserver and kube-scheduler "
        "(--feature-gates=DRADeviceBindingConditions=true,DRAResourceClaimDeviceStatus=true), or do not "
        "deploy the binding operator"
    )


def check(config: Settings, memo: kopf.Memo) -> None:
    """The driver filter, the taint effect and the preparer, before anything connects."""
    if not d.DriverFilter.parse(config.binding_drivers).patterns:
        log.warning("binding operator serves no driver: set DRA_BINDING_DRIVERS (names, patterns, or *)")
    if config.binding_taint_effect not in TAINT_EFFECTS:
        raise ConfigurationError(
            f"DRA_BINDING_TAINT_EFFECT={config.binding_taint_effect!r}: use one of {', '.join(TAINT_EFFECTS)}"
        )
    try:
        memo.binding_preparer = preparers.load(
            config.binding_preparer, preparers.parse_config(config.binding_preparer_config)
        )
    except preparers.ConfigError as e:
        raise ConfigurationError(
            f"DRA_BINDING_PREPARER={config.binding_preparer!r} with DRA_BINDING_PREPARER_CONFIG: {e}; fix the "
            "preparer's name or its configuration (a JSON object, or @file with JSON or YAML)"
        ) from None


async def start(runtime: Runtime, config: Settings, memo: kopf.Memo) -> None:
    kube = runtime.kube
    gates = await apiserver_feature_gates(kube)
    if gates is None:
        log.warning(
            f"cannot read the API server's feature gates (GET /metrics): {BINDING_CONDITIONS_GATE} is assumed on"
        )
    elif not gates.get(BINDING_CONDITIONS_GATE):
        raise RuntimeError(gate_off_message(kube.host))
    drivers = d.DriverFilter.parse(config.binding_drivers)
    rules = None
    if config.binding_cool_off > 0:
        # v1 from 1.37, v1beta2 or v1alpha3 before (feature gate and runtime config permitting).
        rules = await kube.preferred_version(DEVICE_TAINT_RULES)
        if rules is None:
            log.warning("DeviceTaintRules are not served: failed devices get no cool-off taint")
    metrics = Metrics()
    controller = BindingController(
        kube,
        memo.binding_preparer,
        drivers,
        timeout=config.binding_timeout,
        workers=config.binding_workers,
        max_parallel=config.binding_max_parallel,
        rules=rules,
        cool_off=config.binding_cool_off,
        taint_key=config.binding_taint_key,
        taint_effect=config.binding_taint_effect,
        metrics=metrics,
    )
    runtime.on_cleanup(controller.stop)
    runtime.instrument(metrics.registry, controller.queue)
    # Fill the cache before any worker runs: records on claims tell a restarted operator which
    # preparations to resume and which to undo; rules tell it which cool-offs to end.
    runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
    await runtime.prime()
    await controller.cool_off.prime()
    serve(metrics.registry, config.metrics_port)
    memo.binding_controller = controller
    # Watches keep the cache warm on a standby; only the leader's workers start preparations,
    # write conditions and taints. A leader that loses its Lease cancels its preparations and
    # exits; the new leader resumes them from the records on the claims.
    await runtime.lead(config, rbac.LEASE, controller.queue, stop=controller.stop)
    log.info(
        "binding operator started",
        drivers=list(drivers.patterns),
        preparer=config.binding_preparer,
        timeout=config.binding_timeout,
        claims=len(controller.claims),
        cool_off=config.binding_cool_off if rules else 0,
        taint_rules=rules.group_version if rules else None,
        metrics_port=config.metrics_port,
    )


register(OperatorSpec("binding", start, check=check))
