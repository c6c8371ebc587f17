"""The poolstatus controller: answers ResourcePoolStatusRequests from its caches of slices, claims
and DeviceTaintRules, and deletes answered requests after their retention time. The answer is
``decisions.calculate_pool_status``; this module only reads and writes.

As kube-controller-manager v1.37.1 (pkg/controller/resourcepoolstatusrequest/controller.go):
- one work queue keyed by request name; only requests without a status are queued
  (``enqueueRequest``), and a sync skips a request that has one (``syncRequest``);
- a request with a returned pool still being published (PoolIncomplete) is retried, and a
  failing key is dropped after ``MAX_RETRIES`` retries (``processNextWorkItem``);
- the status is written with an update of ``/status`` carrying the cached resourceVersion;
- ``cleanup_expired`` (``cleanupExpiredRequests``) runs at start and every cleanup interval,
  deleting with a UID precondition.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable

import structlog

from ..core.api.kube import ApiError, ConnectionLost, Kube, NotLeader
from ..core.api.resources import RESOURCE_POOL_STATUS_REQUESTS, Resource
from ..core.dra.metatime import format_time, utcnow
from ..core.machinery.store import Store, uid_of
from ..core.machinery.workqueue import RetryableError, WorkQueue
from . import decisions as d
from .metrics import Metrics

log = structlog.stdlib.get_logger("operators.poolstatus")

MAX_RETRIES = 5  # controller.go maxRetries


class PoolStatusController:
    def __init__(
        self,
        kube: Kube,
        *,
        requests: Resource = RESOURCE_POOL_STATUS_REQUESTS,
        workers: int = 1,
        metrics: Metrics | None = None,
        completed_ttl: float = 3600.0,
        pending_ttl: float = 86400.0,
        cleanup_interval: float = 600.0,
        clock: Callable[[], datetime.datetime] = utcnow,
    ):
        self.kube = kube
        self.resource = requests
        self.metrics = metrics or Metrics()
        self.completed_ttl, self.pending_ttl, self.cleanup_interval = completed_ttl, pending_ttl, cleanup_interval
        self.clock = clock
        self.requests = Store()
        self.slices = Store()
        self.claims = Store()
        self.rules = Store()
        self.queue = WorkQueue("resourcepoolstatusrequest", self.process, workers=workers)

    # -- event handlers (from watches) -------------------------------------------------------

    def on_request(self, request: d.Obj, deleted: bool) -> None:
        if deleted:
            self.requests.delete(request)
            return
        self.requests.upsert(request)
        if not d.is_processed(request):
            self.queue.add(request["metadata"]["name"])

    # Slices, claims and rules are only read when a request is answered, as upstream's listers.
    def on_slice(self, obj: d.Obj, deleted: bool) -> None:
        self.slices.delete(obj) if deleted else self.slices.upsert(obj)

    def on_claim(self, obj: d.Obj, deleted: bool) -> None:
        self.claims.delete(obj) if deleted else self.claims.upsert(obj)

    def on_rule(self, obj: d.Obj, deleted: bool) -> None:
        self.rules.delete(obj) if deleted else self.rules.upsert(obj)

    # -- sync --------------------------------------------------------------------------------

    async def process(self, key: str) -> None:
        """``processNextWorkItem``: a failing key is retried MAX_RETRIES times, then dropped
        until the request changes again."""
        try:
            await self.sync(key)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # retried by the queue, or dropped as upstream
            if self.queue.failures(key) < MAX_RETRIES:
                raise
            log.error(
                "dropping request out of the queue after max retries", request=key, retries=MAX_RETRIES, error=str(e)
            )

    async def sync(self, name: str) -> None:
        request = self.requests.get(name)
        if request is None or d.is_processed(request):
            return
        started = time.monotonic()
        driver = (request.get("spec") or {}).get("driver", "")
        status = d.calculate_pool_status(
            request, self.slices.values(), self.claims.values(), self.rules.values(), format_time(self.clock())
        )
        if d.has_incomplete_pool(status):
            raise RetryableError(f"request {name}: incomplete pools detected, requeueing")
        try:
            updated = await self.kube.replace(self.resource, {**request, "status": status}, subresource="status")
        except (ApiError, ConnectionLost) as e:
            self.metrics.written(driver, time.monotonic() - started, failed=True)
            raise RetryableError(f"failed to update status for request {name}: {e}") from e
        self.metrics.written(driver, time.monotonic() - started, failed=False)
        self.requests.upsert(updated)
        log.info(
            "processed ResourcePoolStatusRequest",
            request=name,
            driver=driver,
            pools=len(status.get("pools") or []),
            pool_count=status["poolCount"],
        )

    # -- retention ---------------------------------------------------------------------------

    async def cleanup_loop(self) -> None:
        """At start and every cleanup interval, as upstream's ``wait.UntilWithContext``; only
        while this replica may act (leader election)."""
        while True:
            if self.queue.gate():
                await self.cleanup_expired()
                await asyncio.sleep(self.cleanup_interval)
            else:
                await asyncio.sleep(1.0)

    async def cleanup_expired(self) -> int:
        now = self.clock()
        deleted = 0
        for request in self.requests.values():
            if not d.should_delete(request, now, self.completed_ttl, self.pending_ttl):
                continue
            name = request["metadata"]["name"]
            try:
                await self.kube.delete(self.resource, name, uid=uid_of(request))
            except NotLeader:
                break  # the Lease may have passed on mid-round: the new leader cleans up
            except (ApiError, ConnectionLost) as e:
                if not (isinstance(e, ApiError) and e.not_found):
                    log.error("failed to delete expired ResourcePoolStatusRequest", request=name, error=str(e))
                continue
            deleted += 1
            log.info("deleted expired ResourcePoolStatusRequest", request=name)
        if deleted:
            log.info("cleanup completed", deleted=deleted)
        return deleted
