"""kopf wiring of the claims operator: watches feed the controller's cache and work queue."""

from __future__ import annotations

import kopf

from ..core.kopfsettings import quiet
from ..core.kube import Kube
from ..core.leader import act_when_leader
from ..core.logging import get_logger
from ..core.metrics import serve
from ..core.resources import PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from ..core.settings import Settings
from .controller import ClaimsController
from .metrics import Metrics

log = get_logger("operators.claims")


@kopf.on.startup()
async def start_claims(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    quiet(settings)
    config = Settings.from_env()
    kube = await Kube.connect(config.kubeconfig)
    metrics = Metrics()
    controller = ClaimsController(kube, workers=config.claims_workers, metrics=metrics)
    metrics.watch_claims(controller.claims.values)
    # Fill the cache before any worker runs: a restarted operator must see the claims it
    # created before it decides that a Pod still needs one.
    for claim in await kube.list(RESOURCE_CLAIMS):
        controller.on_claim(claim, deleted=False)
    for template in await kube.list(RESOURCE_CLAIM_TEMPLATES):
        controller.on_template(template, deleted=False)
    for pod in await kube.list(PODS):
        controller.on_pod(pod, deleted=False)
    serve(metrics.registry, config.metrics_port)
    memo.claims_controller = controller

    # Watches keep the cache warm on a standby; only the leader's workers act.
    memo.claims_leader = await act_when_leader(kube, config, "dra-operators-claims", controller.queue)
    log.info("claims operator started", workers=config.claims_workers, claims=len(controller.claims),
             pods=len(controller.pods), metrics_port=config.metrics_port)


@kopf.on.cleanup()
async def stop_claims(memo: kopf.Memo, **_) -> None:
    controller: ClaimsController | None = getattr(memo, "claims_controller", None)
    if controller is not None:
        await controller.queue.stop()
        if getattr(memo, "claims_leader", None) is not None:
            await memo.claims_leader.release()
        await controller.kube.close()


def _deleted(event: kopf.RawEvent) -> bool:
    return event.get("type") == "DELETED"


# Handlers are async: sync ones would run in kopf's thread pool, off the event loop that owns the queue.
@kopf.on.event("v1", "pods")
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_controller.on_pod(event["object"], _deleted(event))


@kopf.on.event("resource.k8s.io", "v1", "resourceclaims")
async def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_controller.on_claim(event["object"], _deleted(event))


@kopf.on.event("resource.k8s.io", "v1", "resourceclaimtemplates")
async def template_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    memo.claims_controller.on_template(event["object"], _deleted(event))
