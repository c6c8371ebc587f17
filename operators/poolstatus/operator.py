"""kopf wiring of the poolstatus operator: watches feed the controller's caches and work queue.

ResourcePoolStatusRequests are alpha (DRAResourcePoolStatus, resource.k8s.io/v1alpha3): a
cluster that does not serve them ends the operator at start with a message saying so.
DeviceTaintRules are read at the version the cluster prefers, if it serves them at all.
"""

from __future__ import annotations

import kopf

from ..core.framework.kopfsettings import quiet
from ..core.api.kube import Kube
from ..core.logging import get_logger
from ..core.framework.metrics import serve
from ..core.api.resources import (DEVICE_TAINT_RULES, RESOURCE_CLAIMS, RESOURCE_GROUP, RESOURCE_POOL_STATUS_REQUESTS,
                              RESOURCE_SLICES)
from ..core.framework.runtime import Runtime, runtime_liveness, start_or_undo, stop_runtime
from ..core.settings import Settings
from .controller import PoolStatusController
from .metrics import Metrics

log = get_logger("operators.poolstatus")

LEASE = "dra-operators-poolstatus"
_rules_version: dict[str, str | None] = {"version": None}


def not_served_message(host: str | None) -> str:
    return (f"the API server{f' at {host}' if host else ''} does not serve "
            f"{RESOURCE_POOL_STATUS_REQUESTS.group_version} {RESOURCE_POOL_STATUS_REQUESTS.plural}: start "
            "kube-apiserver with --feature-gates=DRAResourcePoolStatus=true and "
            "--runtime-config=resource.k8s.io/v1alpha3=true (alpha in Kubernetes 1.36 and 1.37)")


@kopf.on.startup(errors=kopf.ErrorsMode.PERMANENT)  # start-up is all-or-nothing: any failure ends the process
async def start_poolstatus(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    quiet(settings)
    config = Settings.from_env()
    kube = await Kube.connect(config.kubeconfig, qps=config.api_qps, burst=config.api_burst)
    runtime = memo.poolstatus_runtime = Runtime("poolstatus", kube, watch_silence=config.watch_silence)
    runtime.on_cleanup(kube.close)

    async def start() -> None:
        served = await kube.served_versions(RESOURCE_POOL_STATUS_REQUESTS.group, RESOURCE_POOL_STATUS_REQUESTS.plural)
        if RESOURCE_POOL_STATUS_REQUESTS.version not in served:
            raise RuntimeError(not_served_message(getattr(kube, "host", None)))
        rules = await kube.preferred_version(DEVICE_TAINT_RULES)
        _rules_version["version"] = rules.version if rules else None
        metrics = Metrics()
        controller = PoolStatusController(
            kube, workers=config.poolstatus_workers, metrics=metrics, completed_ttl=config.poolstatus_completed_ttl,
            pending_ttl=config.poolstatus_pending_ttl, cleanup_interval=config.poolstatus_cleanup_interval)
        runtime.on_cleanup(controller.queue.stop)
        # Every cache is filled before the first request is answered (upstream waits for its
        # informers' sync): requests last, so they are queued when the rest is known.
        runtime.informer(RESOURCE_SLICES, controller.slices, controller.on_slice, kind="ResourceSlice")
        runtime.informer(RESOURCE_CLAIMS, controller.claims, controller.on_claim, kind="ResourceClaim")
        if rules is not None:
            runtime.informer(rules, controller.rules, controller.on_rule, kind="DeviceTaintRule")
        runtime.informer(RESOURCE_POOL_STATUS_REQUESTS, controller.requests, controller.on_request,
                         kind="ResourcePoolStatusRequest")
        counts = await runtime.prime(settings)
        serve(metrics.registry, config.metrics_port)
        memo.poolstatus_controller = controller
        await runtime.lead(config, LEASE, controller.queue)
        runtime.supervisor.spawn("poolstatus-cleanup", controller.cleanup_loop)
        if rules is None:
            log.warning("the cluster serves no DeviceTaintRules: only taints in ResourceSlices make devices "
                        "unavailable")
        log.info("poolstatus operator started", workers=config.poolstatus_workers,
                 rules_version=_rules_version["version"], completed_ttl=config.poolstatus_completed_ttl,
                 metrics_port=config.metrics_port, **counts)

    await start_or_undo(runtime, start)


@kopf.on.cleanup()
async def stop_poolstatus(memo: kopf.Memo, **_) -> None:
    await stop_runtime(memo, "poolstatus_runtime")


@kopf.on.probe(id="poolstatus")
def poolstatus_liveness(memo: kopf.Memo, **_) -> dict:
    return runtime_liveness(memo, "poolstatus_runtime")


def _informer(memo: kopf.Memo, plural: str):
    return memo.poolstatus_runtime.informers[plural]


def _served_rules(resource: kopf.Resource) -> bool:
    return (resource.group == RESOURCE_GROUP and resource.plural == DEVICE_TAINT_RULES.plural
            and resource.version == _rules_version["version"])


# Handlers are async: sync ones would run in kopf's thread pool, off the event loop that owns the queue.
@kopf.on.event(RESOURCE_GROUP, "v1alpha3", "resourcepoolstatusrequests", id="poolstatus-requests")
async def request_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "resourcepoolstatusrequests").on_event(event)


@kopf.on.event(RESOURCE_GROUP, "v1", "resourceslices", id="poolstatus-slices")
async def slice_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "resourceslices").on_event(event)


@kopf.on.event(RESOURCE_GROUP, "v1", "resourceclaims", id="poolstatus-claims")
async def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "resourceclaims").on_event(event)


@kopf.on.event(_served_rules, id="poolstatus-rules")
async def rule_event(event: kopf.RawEvent, memo: kopf.Memo, **_) -> None:
    _informer(memo, "devicetaintrules").on_event(event)
