"""The poolstatus operator's start-up: informers feed the controller's caches and work queue.

ResourcePoolStatusRequests are alpha (DRAResourcePoolStatus, resource.k8s.io/v1alpha3): a
cluster that does not serve them ends the operator at start with a message saying so.
DeviceTaintRules are read at the version the cluster prefers, if it serves them at all.
"""

from __future__ import annotations

import kopf

from ..core.api.resources import DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_POOL_STATUS_REQUESTS, RESOURCE_SLICES
from ..core.framework.metrics import serve
from ..core.framework.operator import OperatorSpec, register
from ..core.framework.runtime import Runtime
from ..core.logging import get_logger
from ..core.settings import Settings
from .controller import PoolStatusController
from .metrics import Metrics

log = get_logger("operators.poolstatus")

LEASE = "dra-operators-poolstatus"


def not_served_message(host: str | None) -> str:
    return (
        f"the API server{f' at {host}' if host else ''} does not serve "
        f"{RESOURCE_POOL_STATUS_REQUESTS.group_version} {RESOURCE_POOL_STATUS_REQUESTS.plural}: start "
        "kube-apiserver with --feature-gates=DRAResourcePoolStatus=true and "
        "--runtime-config=resource.k8s.io/v1alpha3=true (alpha in Kubernetes 1.36 and 1.37)"
    )


async def start(runtime: Runtime, config: Settings, memo: kopf.Memo) -> None:
    kube = runtime.kube
    served = await kube.served_versions(RESOURCE_POOL_STATUS_REQUESTS.group, RESOURCE_POOL_STATUS_REQUESTS.plural)
    if RESOURCE_POOL_STATUS_REQUESTS.version not in served:
        raise RuntimeError(not_served_message(kube.host))
    rules = await kube.preferred_version(DEVICE_TAINT_RULES)
    metrics = Metrics()
    controller = PoolStatusController(
        kube,
        workers=config.poolstatus_workers,
        metrics=metrics,
        completed_ttl=config.poolstatus_completed_ttl,
        pending_ttl=config.poolstatus_pending_ttl,
        cleanup_interval=config.poolstatus_cleanup_interval,
    )
    runtime.on_cleanup(controller.queue.stop)
    runtime.instrument(metrics.registry, controller.queue)
    # Every cache is filled before the first request is answered (upstream waits for its
    # informers' sync): requests last, so they are queued when the rest is known.
    runtime.informer(RESOURCE_SLICES, controller.slices, controller.on_slice, kind="ResourceSlice")
    runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
    if rules is not None:
        runtime.informer(rules, controller.rules, controller.on_rule, kind="DeviceTaintRule")
    runtime.informer(
        RESOURCE_POOL_STATUS_REQUESTS, controller.requests, controller.on_request, kind="ResourcePoolStatusRequest"
    )
    counts = await runtime.prime()
    serve(metrics.registry, config.metrics_port)
    memo.poolstatus_controller = controller
    await runtime.lead(config, LEASE, controller.queue)
    runtime.supervisor.spawn("poolstatus-cleanup", controller.cleanup_loop)
    if rules is None:
        log.warning("the cluster serves no DeviceTaintRules: only taints in ResourceSlices make devices unavailable")
    log.info(
        "poolstatus operator started",
        workers=config.poolstatus_workers,
        rules_version=rules.version if rules else None,
        completed_ttl=config.poolstatus_completed_ttl,
        metrics_port=config.metrics_port,
        **counts,
    )


register(OperatorSpec("poolstatus", start))
