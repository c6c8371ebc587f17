"""kopf wiring of the binding operator: the claim watch feeds the controller's cache and queue."""

from __future__ import annotations

import kopf

from ..core.framework.kopfsettings import quiet
from ..core.api.kube import Kube
from ..core.logging import get_logger
from ..core.framework.metrics import serve
from ..core.api.resources import DEVICE_TAINT_RULES, RESOURCE_CLAIMS
from ..core.framework.runtime import Runtime, runtime_liveness, start_or_undo, stop_runtime
from ..core.settings import Settings
from . import decisions as d
from . import rbac
from . import preparers
from .controller import BindingController
from .metrics import Metrics

log = get_logger("operators.binding")

TAINT_EFFECTS = ("NoSchedule", "None")  # NoExecute would evict Pods that use the device elsewhere


@kopf.on.startup(errors=kopf.ErrorsMode.PERMANENT)  # start-up is all-or-nothing: any failure ends the process
async def start_binding(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    quiet(settings)
    config = Settings.from_env()
    drivers = d.DriverFilter.parse(config.binding_drivers)
    if not drivers.patterns:
        log.warning("binding operator serves no driver: set DRA_BINDING_DRIVERS (names, patterns, or *)")
    if config.binding_taint_effect not in TAINT_EFFECTS:
        raise kopf.PermanentError(f"DRA_BINDING_TAINT_EFFECT={config.binding_taint_effect!r}: "
                                  f"use one of {', '.join(TAINT_EFFECTS)}")
    try:
        preparer = preparers.load(config.binding_preparer, preparers.parse_config(config.binding_preparer_config))
    except preparers.ConfigError as e:
        raise kopf.PermanentError(
            f"DRA_BINDING_PREPARER={config.binding_preparer!r} with DRA_BINDING_PREPARER_CONFIG: {e}; fix the "
            "preparer's name or its configuration (a JSON object, or @file with JSON or YAML)") from None
    kube = await Kube.connect(config.kubeconfig, qps=config.api_qps, burst=config.api_burst)
    runtime = memo.binding_runtime = Runtime("binding", kube, watch_silence=config.watch_silence)
    runtime.on_cleanup(kube.close)

    async def start() -> None:
        rules = None
        if config.binding_cool_off > 0:
            # v1 from 1.37, v1beta2 or v1alpha3 before (feature gate and runtime config permitting).
            rules = await kube.preferred_version(DEVICE_TAINT_RULES)
            if rules is None:
                log.warning("DeviceTaintRules are not served: failed devices get no cool-off taint")
        metrics = Metrics()
        controller = BindingController(
            kube, preparer, drivers, timeout=config.binding_timeout, workers=config.binding_workers,
            max_parallel=config.binding_max_parallel, rules=rules, cool_off=config.binding_cool_off,
            taint_key=config.binding_taint_key, taint_effect=config.binding_taint_effect, metrics=metrics)
        runtime.on_cleanup(controller.stop)
        # Fill the cache before any worker runs: records on claims tell a restarted operator which
        # preparations to resume and which to undo; rules tell it which cool-offs to end.
        runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
        await runtime.prime(settings)
        await controller.cool_off.prime()
        serve(metrics.registry, config.metrics_port)
        memo.binding_controller = controller

        # Watches keep the cache warm on a standby; only the leader's workers start preparations,
        # write conditions and taints. A leader that loses its Lease cancels its preparations and
        # exits; the new leader resumes them from the records on the claims.
        await runtime.lead(config, rbac.LEASE, controller.queue, stop=controller.stop)
        log.info("binding operator started", drivers=list(drivers.patterns), preparer=config.binding_preparer,
                 timeout=config.binding_timeout, claims=len(controller.claims),
                 cool_off=config.binding_cool_off if rules else 0, taint_rules=rules.group_version if rules else None,
                 metrics_port=config.metrics_port)

    await start_or_undo(runtime, start)


@kopf.on.cleanup()
async def stop_binding(memo: kopf.Memo, **_) -> None:
    await stop_runtime(memo, "binding_runtime")


@kopf.on.probe(id="binding")
def binding_liveness(memo: kopf.Memo, **_) -> dict:
    return runtime_liveness(memo, "binding_runtime")


# Async on purpose: sync handlers would run in kopf's thread pool, off the loop that owns the queue.
@kopf.on.event("resource.k8s.io", "v1", "resourceclaims")
async def binding_claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.binding_runtime.informers["resourceclaims"].on_event(event)
