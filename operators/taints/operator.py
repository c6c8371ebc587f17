"""kopf wiring of the taints operator: watches feed the controller's cache and work queue.

DeviceTaintRules are served as v1 (1.37+), v1beta2 or v1alpha3 depending on the cluster: the
version is discovered at start-up, and the rule watch selects exactly that version (a kopf
callable selector, evaluated after the start-up handlers have run).
"""

from __future__ import annotations

import kopf

from ..core.dra import resourceclaim as rc
from ..core.api.featuregates import WORKLOAD_CLAIMS_GATE, detect_workload
from ..core.framework.kopfsettings import quiet
from ..core.api.kube import Kube
from ..core.logging import get_logger
from ..core.framework.metrics import serve
from ..core.api.resources import (DEVICE_CLASSES, DEVICE_TAINT_RULES, POD_DISRUPTION_BUDGETS, PODS, RESOURCE_CLAIMS,
                              RESOURCE_GROUP, RESOURCE_SLICES)
from ..core.framework.runtime import Runtime, runtime_liveness, start_or_undo, stop_runtime
from ..core.settings import Settings
from .controller import Guards, TaintsController
from .discovery import discover_rules
from .metrics import Metrics

log = get_logger("operators.taints")

_rules_version: dict[str, str | None] = {"version": None}


@kopf.on.startup(errors=kopf.ErrorsMode.PERMANENT)  # start-up is all-or-nothing: any failure ends the process
async def start_taints(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    quiet(settings)
    config = Settings.from_env()
    kube = await Kube.connect(config.kubeconfig, qps=config.api_qps, burst=config.api_burst)
    runtime = memo.taints_runtime = Runtime("taints", kube, watch_silence=config.watch_silence)
    runtime.on_cleanup(kube.close)

    async def start() -> None:
        rules, rule_status = await discover_rules(kube, config.taints_rule_version)
        workload = await detect_workload(kube)
        if not workload.gates_known:
            log.warning("cannot read the API server's feature gates (GET /metrics); claims reserved for a "
                        "PodGroup are handled as with the gate off", gate=WORKLOAD_CLAIMS_GATE)
        _rules_version["version"] = rules.version if rules else None
        metrics = Metrics()
        controller = TaintsController(
            kube, rules=rules, rule_status=rule_status, workers=config.taints_workers, metrics=metrics,
            guards=Guards(evictions_per_second=config.taints_evictions_per_second,
                          eviction_api_max_wait=config.taints_eviction_api_max_wait,
                          eviction_api_retry=config.taints_eviction_api_retry),
            workload_claims=workload.workload_claims)
        runtime.on_cleanup(controller.queue.stop)
        # Fill the caches before any worker runs: deadlines come from the API's state, so a
        # restarted operator finds every pending eviction again, with the same due time.
        runtime.informer(POD_DISRUPTION_BUDGETS, controller.budgets, controller.on_budget)
        runtime.informer(DEVICE_CLASSES, controller.classes, controller.on_class, kind="DeviceClass")
        runtime.informer(RESOURCE_SLICES, controller.slices, controller.on_slice, kind="ResourceSlice")
        if rules is not None:
            runtime.informer(rules, controller.rules, controller.on_rule, kind="DeviceTaintRule")
        runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
        runtime.informer(PODS, controller.pods, controller.on_pod, kind="Pod", keep=rc.uses_claims,
                         keep_line=rc.may_use_claims)
        counts = await runtime.prime(settings)
        serve(metrics.registry, config.metrics_port)
        memo.taints_controller = controller
        # Watches keep the cache warm on a standby; only the leader's workers evict and write status.
        await runtime.lead(config, "dra-operators-taints", controller.queue)
        if rules is None:
            log.warning("the cluster serves no DeviceTaintRules: only ResourceSlice taints evict")
        log.info("taints operator started", workers=config.taints_workers, rules_version=_rules_version["version"],
                 rule_status=rule_status, evictions_per_second=config.taints_evictions_per_second,
                 workload_resource_claims=workload.workload_claims, metrics_port=config.metrics_port, **counts)

    await start_or_undo(runtime, start)


@kopf.on.cleanup()
async def stop_taints(memo: kopf.Memo, **_) -> None:
    await stop_runtime(memo, "taints_runtime")


@kopf.on.probe(id="taints")
def taints_liveness(memo: kopf.Memo, **_) -> dict:
    return runtime_liveness(memo, "taints_runtime")


def _informer(memo: kopf.Memo, plural: str):
    return memo.taints_runtime.informers[plural]


def _served_rules(resource: kopf.Resource) -> bool:
    return (resource.group == RESOURCE_GROUP and resource.plural == DEVICE_TAINT_RULES.plural
            and resource.version == _rules_version["version"])


# Handlers are async: sync ones would run in kopf's thread pool, off the event loop that owns the queue.
@kopf.on.event("v1", "pods", id="taints-pods")
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "pods").on_event(event)


@kopf.on.event("resource.k8s.io", "v1", "resourceclaims", id="taints-claims")
async def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "resourceclaims").on_event(event)


@kopf.on.event("resource.k8s.io", "v1", "resourceslices", id="taints-slices")
async def slice_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "resourceslices").on_event(event)


@kopf.on.event(_served_rules, id="taints-rules")
async def rule_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "devicetaintrules").on_event(event)


# Only v1alpha3 rules (Kubernetes <= 1.34) select through a DeviceClass; the preferred version
# of DeviceClasses is what every supported cluster serves.
@kopf.on.event(RESOURCE_GROUP, "deviceclasses", id="taints-deviceclasses")
async def class_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "deviceclasses").on_event(event)


# The Eviction API mode waits for PodDisruptionBudgets to allow a disruption instead of polling.
@kopf.on.event("policy", "v1", "poddisruptionbudgets", id="taints-budgets")
async def budget_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "poddisruptionbudgets").on_event(event)
