"""The claims operator's start-up: informers feed the controller's cache and work queue.

PodGroups (KEP-5729) are watched when the cluster serves them (scheduling.k8s.io/v1beta1,
GenericWorkload); their claims are handled when the API server runs with DRAWorkloadResourceClaims
(``core.featuregates``), as kube-controller-manager does with the same gate.
"""

from __future__ import annotations

import kopf

from ..core.api.featuregates import WORKLOAD_CLAIMS_GATE, detect_workload
from ..core.api.kube import Kube
from ..core.api.resources import POD_GROUPS, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from ..core.dra import podgroup as pg
from ..core.dra import resourceclaim as rc
from ..core.framework.metrics import serve
from ..core.framework.operator import OperatorSpec, register
from ..core.framework.runtime import Runtime
from ..core.logging import get_logger
from ..core.settings import Settings
from .controller import ClaimsController, Features
from .metrics import Metrics

log = get_logger("operators.claims")


async def detect_features(kube: Kube) -> Features:
    """GenericWorkload and DRAWorkloadResourceClaims as the cluster runs them (``core.featuregates``)."""
    workload = await detect_workload(kube)
    if not workload.gates_known:
        log.warning(
            "cannot read the API server's feature gates (GET /metrics); PodGroup claims are "
            "handled as with the gate off",
            gate=WORKLOAD_CLAIMS_GATE,
        )
    return Features(generic_workload=workload.generic_workload, workload_claims=workload.workload_claims)


async def start(runtime: Runtime, config: Settings, memo: kopf.Memo) -> None:
    kube = runtime.kube
    features = await detect_features(kube)
    metrics = Metrics()
    controller = ClaimsController(kube, workers=config.claims_workers, features=features, metrics=metrics)
    metrics.watch_claims(controller.claims.values)
    metrics.watch_pods(controller.pods.values, controller.claims.get)
    runtime.on_cleanup(controller.queue.stop)
    runtime.instrument(metrics.registry, controller.queue)
    # Fill the cache before any worker runs: a restarted operator must see the claims it
    # created before it decides that a Pod still needs one. (The caches fill at once; no worker
    # runs before all are full.)
    claims = runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
    runtime.informer(
        RESOURCE_CLAIM_TEMPLATES, controller.templates, controller.on_template, kind="ResourceClaimTemplate"
    )
    if features.generic_workload:
        runtime.informer(POD_GROUPS, controller.pod_groups, controller.on_pod_group, kind=pg.KIND)
    runtime.informer(
        PODS, controller.pods, controller.on_pod, kind="Pod", keep=rc.uses_claims, keep_line=rc.may_use_claims
    )
    counts = await runtime.prime()
    serve(metrics.registry, config.metrics_port)
    memo.claims_controller = controller
    # Watches keep the cache warm on a standby; only the leader's workers act.
    # The one thing it creates, ResourceClaims, is read afresh on taking over (see Runtime.lead).
    await runtime.lead(config, "dra-operators-claims", controller.queue, read_afresh=[claims])
    log.info(
        "claims operator started",
        workers=config.claims_workers,
        claims=counts["resourceclaims"],
        pods=counts["pods"],
        pod_groups=counts.get(pg.RESOURCE),
        generic_workload=features.generic_workload,
        workload_resource_claims=features.workload_claims,
        metrics_port=config.metrics_port,
    )


register(OperatorSpec("claims", start))
