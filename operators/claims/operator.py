"""kopf wiring of the claims operator: watches feed the controller's cache and work queue.

PodGroups (KEP-5729) are watched when the cluster serves them (scheduling.k8s.io/v1beta1,
GenericWorkload); their claims are handled when the API server runs with DRAWorkloadResourceClaims
(``core.featuregates``), as kube-controller-manager does with the same gate.
"""

from __future__ import annotations

import kopf

from ..core.dra import podgroup as pg
from ..core.dra import resourceclaim as rc
from ..core.api.featuregates import WORKLOAD_CLAIMS_GATE, detect_workload
from ..core.framework.kopfsettings import quiet
from ..core.api.kube import Kube
from ..core.logging import get_logger
from ..core.framework.metrics import serve
from ..core.api.resources import POD_GROUPS, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from ..core.framework.runtime import Runtime, runtime_liveness, start_or_undo, stop_runtime
from ..core.settings import Settings
from .controller import ClaimsController, Features
from .metrics import Metrics

log = get_logger("operators.claims")

_pod_groups_served = {"served": False}


async def detect_features(kube: Kube) -> Features:
    """GenericWorkload and DRAWorkloadResourceClaims as the cluster runs them (``core.featuregates``)."""
    workload = await detect_workload(kube)
    if not workload.gates_known:
        log.warning("cannot read the API server's feature gates (GET /metrics); PodGroup claims are "
                    "handled as with the gate off", gate=WORKLOAD_CLAIMS_GATE)
    return Features(generic_workload=workload.generic_workload, workload_claims=workload.workload_claims)


@kopf.on.startup(errors=kopf.ErrorsMode.PERMANENT)  # start-up is all-or-nothing: any failure ends the process
async def start_claims(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    quiet(settings)
    config = Settings.from_env()
    kube = await Kube.connect(config.kubeconfig, qps=config.api_qps, burst=config.api_burst)
    runtime = memo.claims_runtime = Runtime("claims", kube, watch_silence=config.watch_silence)
    runtime.on_cleanup(kube.close)

    async def start() -> None:
        features = await detect_features(kube)
        _pod_groups_served["served"] = features.generic_workload
        metrics = Metrics()
        controller = ClaimsController(kube, workers=config.claims_workers, features=features, metrics=metrics)
        metrics.watch_claims(controller.claims.values)
        runtime.on_cleanup(controller.queue.stop)
        # Fill the cache before any worker runs: a restarted operator must see the claims it
        # created before it decides that a Pod still needs one. Claims first, Pods last.
        runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
        runtime.informer(RESOURCE_CLAIM_TEMPLATES, controller.templates, controller.on_template,
                         kind="ResourceClaimTemplate")
        if features.generic_workload:
            runtime.informer(POD_GROUPS, controller.pod_groups, controller.on_pod_group, kind=pg.KIND)
        runtime.informer(PODS, controller.pods, controller.on_pod, kind="Pod", keep=rc.uses_claims,
                         keep_line=rc.may_use_claims)
        counts = await runtime.prime(settings)
        serve(metrics.registry, config.metrics_port)
        memo.claims_controller = controller
        # Watches keep the cache warm on a standby; only the leader's workers act.
        await runtime.lead(config, "dra-operators-claims", controller.queue)
        log.info("claims operator started", workers=config.claims_workers, claims=counts["resourceclaims"],
                 pods=counts["pods"], pod_groups=counts.get(pg.RESOURCE), generic_workload=features.generic_workload,
                 workload_resource_claims=features.workload_claims, metrics_port=config.metrics_port)

    await start_or_undo(runtime, start)


@kopf.on.cleanup()
async def stop_claims(memo: kopf.Memo, **_) -> None:
    await stop_runtime(memo, "claims_runtime")


@kopf.on.probe(id="claims")
def claims_liveness(memo: kopf.Memo, **_) -> dict:
    return runtime_liveness(memo, "claims_runtime")


# Handlers are async: sync ones would run in kopf's thread pool, off the event loop that owns the queue.
@kopf.on.event("v1", "pods")
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_runtime.informers["pods"].on_event(event)


@kopf.on.event("resource.k8s.io", "v1", "resourceclaims")
async def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_runtime.informers["resourceclaims"].on_event(event)


@kopf.on.event("resource.k8s.io", "v1", "resourceclaimtemplates")
async def template_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_runtime.informers["resourceclaimtemplates"].on_event(event)


def _served_pod_groups(resource: kopf.Resource) -> bool:
    return (_pod_groups_served["served"] and resource.group == pg.GROUP and resource.plural == pg.RESOURCE
            and resource.version == POD_GROUPS.version)


@kopf.on.event(_served_pod_groups, id="claims-podgroups")
async def pod_group_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_runtime.informers[pg.RESOURCE].on_event(event)
