"""The taints operator's start-up: informers feed the controller's cache and work queue.

DeviceTaintRules are served as v1 (1.37+), v1beta2 or v1alpha3 depending on the cluster: the
version is discovered at start-up, and the rule informer watches exactly that version.
"""

from __future__ import annotations

import kopf

from ..core.api.featuregates import (
    DEVICE_TAINTS_GATE,
    WORKLOAD_CLAIMS_GATE,
    apiserver_feature_gates,
    detect_workload,
    device_taint_rules_on,
)
from ..core.api.resources import DEVICE_CLASSES, POD_DISRUPTION_BUDGETS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from ..core.dra import resourceclaim as rc
from ..core.framework.metrics import serve
from ..core.framework.operator import OperatorSpec, register
from ..core.framework.runtime import Runtime
from ..core.logging import get_logger
from ..core.settings import Settings
from .controller import Guards, TaintsController
from .discovery import discover_rules
from .metrics import Metrics

log = get_logger("operators.taints")


def gate_off_message(host: str | None) -> str:
    return (
        f"the API server{f' at {host}' if host else ''} runs with {DEVICE_TAINTS_GATE} off (alpha and off by "
        "default in Kubernetes 1.34 and 1.35): it drops device taints, kube-scheduler ignores DeviceTaintRules "
        "and upstream's device-taint-eviction-controller does not run, so this operator would evict Pods for "
        "taints nothing else honours. Turn the gate on in kube-apiserver, kube-scheduler and "
        "kube-controller-manager (--feature-gates=DRADeviceTaints=true, and DRADeviceTaintRules=true from "
        "1.35 for DeviceTaintRules), or do not deploy the taints operator"
    )


async def start(runtime: Runtime, config: Settings, memo: kopf.Memo) -> None:
    kube = runtime.kube
    gates = await apiserver_feature_gates(kube)
    if gates is not None and not gates.get(DEVICE_TAINTS_GATE):
        raise RuntimeError(gate_off_message(kube.host))
    rules, rule_status = await discover_rules(kube, config.taints_rule_version)
    rules_ignored = rules is not None and gates is not None and not device_taint_rules_on(gates)
    if rules_ignored:
        # Served (runtime config) but off: kube-scheduler and upstream's controller ignore them.
        log.warning("DeviceTaintRules are served but DRADeviceTaintRules is off: rules are ignored, as upstream does")
        rules = None
    workload = await detect_workload(kube, gates)
    if not workload.gates_known:
        log.warning(
            "cannot read the API server's feature gates (GET /metrics); claims reserved for a "
            "PodGroup are handled as with the gate off",
            gate=WORKLOAD_CLAIMS_GATE,
        )
    metrics = Metrics()
    controller = TaintsController(
        kube,
        rules=rules,
        rule_status=rule_status,
        workers=config.taints_workers,
        metrics=metrics,
        guards=Guards(
            evictions_per_second=config.taints_evictions_per_second,
            eviction_api_max_wait=config.taints_eviction_api_max_wait,
            eviction_api_retry=config.taints_eviction_api_retry,
        ),
        workload_claims=workload.workload_claims,
    )
    runtime.on_cleanup(controller.queue.stop)
    runtime.instrument(metrics.registry, controller.queue)
    metrics.watch_parked(lambda: controller.parked)
    # Fill the caches before any worker runs: deadlines come from the API's state, so a
    # restarted operator finds every pending eviction again, with the same due time.
    # PodDisruptionBudgets: the Eviction API mode waits for them to allow a disruption.
    runtime.informer(POD_DISRUPTION_BUDGETS, controller.budgets, controller.on_budget)
    # Only v1alpha3 rules (Kubernetes <= 1.34) select through a DeviceClass.
    runtime.informer(DEVICE_CLASSES, controller.classes, controller.on_class, kind="DeviceClass")
    runtime.informer(RESOURCE_SLICES, controller.slices, controller.on_slice, kind="ResourceSlice")
    if rules is not None:
        runtime.informer(rules, controller.rules, controller.on_rule, kind="DeviceTaintRule")
    runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
    runtime.informer(
        PODS, controller.pods, controller.on_pod, kind="Pod", keep=rc.uses_claims, keep_line=rc.may_use_claims
    )
    counts = await runtime.prime()
    serve(metrics.registry, config.metrics_port)
    memo.taints_controller = controller
    # Watches keep the cache warm on a standby; only the leader's workers evict and write status.
    await runtime.lead(config, "dra-operators-taints", controller.queue)
    if rules is None and not rules_ignored:
        log.warning("the cluster serves no DeviceTaintRules: only ResourceSlice taints evict")
    log.info(
        "taints operator started",
        workers=config.taints_workers,
        rules_version=rules.version if rules else None,
        rule_status=rule_status,
        evictions_per_second=config.taints_evictions_per_second,
        workload_resource_claims=workload.workload_claims,
        metrics_port=config.metrics_port,
        **counts,
    )


register(OperatorSpec("taints", start))
