"""What every operator process is made of besides its controller: the API client, the supervisor
of its long-running tasks, its informers, and the liveness answer built from them.

Start-up is all-or-nothing (``start_or_undo``): a start that fails half-way stops whatever it had
started (tasks, servers, sockets) and the process exits non-zero with the reason, instead of kopf
retrying the start-up handler on top of the half-started one.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import kopf
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from ..api import diagnose
from ..api.apihealth import OUTAGE_STATUSES
from ..api.kube import ApiError, ConnectionLost, Kube
from ..api.resources import Resource
from ..logging import get_logger
from ..machinery.informer import Handler, Informer, watch_families
from ..machinery.leader import LeaderElector, act_when_leader, master_status
from ..machinery.store import Store
from ..machinery.supervisor import Supervisor
from ..machinery.watch import INITIAL_EVENTS_END, Reflector
from ..machinery.workqueue import QueueMetrics, WorkQueue
from ..settings import Settings

log = get_logger(__name__)

WATCHDOG_INTERVAL = 30.0
API_WAIT = 60.0  # the default of DRA_API_WAIT


class Runtime:
    def __init__(self, name: str, kube: Kube, *, watch_silence: float = 600.0, supervisor: Supervisor | None = None):
        self.name = name
        self.kube = kube
        self.watch_silence = watch_silence
        self.supervisor = supervisor or Supervisor(name)
        self.informers: dict[str, Informer] = {}
        self.reflectors: list[Reflector] = []
        self.electors: list[LeaderElector] = []
        self._cleanups: list[Callable[[], Awaitable[Any]]] = []

    async def wait_for_api(self, timeout: float = API_WAIT) -> None:
        """Before starting: wait (bounded) for an API server that does not answer yet, as after a
        node reboot or beside a restarting control plane, instead of exiting at once into
        kubelet's growing crash-loop back-off. Any answer ends the wait, an error too: the start
        that follows reports what is wrong."""
        deadline = asyncio.get_running_loop().time() + timeout
        delay = 0.5
        while True:
            try:
                await self.kube.request("GET", "/version", retry=False, timeout=10)
                return
            except ApiError as e:
                if e.status not in OUTAGE_STATUSES or e.reason == "BadResponse":
                    return  # an answer (garbage from something that is no API server is one too)
                error = f"{e.status}: {e.message[:200]}"
            except ConnectionLost as e:
                error = str(e)
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            log.warning(
                "waiting for the API server",
                operator=self.name,
                error=error,
                retry_in=round(delay, 1),
                gives_up_in=round(left),
            )
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 5.0)

    def instrument(self, registry: CollectorRegistry, *queues: WorkQueue) -> None:
        """Export into the operator's ``registry`` what every operator has: client-go's workqueue
        metrics of ``queues`` (call before ``prime``: the first adds come from it), the leader
        election status and the watches' silence (computed at scrape time)."""
        queue_metrics = QueueMetrics(registry)
        for queue in queues:
            queue_metrics.watch(queue)
        registry.register(_RuntimeCollector(self))

    def informer(self, resource: Resource, store: Store, handler: Handler, **options: Any) -> Informer:
        """A cache of ``resource``; it is filled by ``prime`` and then kept by its reflector."""
        informer = Informer(self.kube, resource, store, handler, silence=self.watch_silence, **options)
        self.informers[resource.plural] = informer
        return informer

    async def streams_initial_events(self) -> bool:
        """Whether the API server offers streamed initial events (WatchList, ``sendInitialEvents``)
        for relists: a probe watch that matches (almost) nothing must end its initial events with
        the ``k8s.io/initial-events-end`` bookmark. Servers without them are relisted with LIST."""
        informer = next(iter(self.informers.values()), None)
        if informer is None:
            return False
        try:
            text = await self.kube.request(
                "GET",
                informer.resource.path(),
                params=[
                    ("watch", "true"),
                    ("sendInitialEvents", "true"),
                    ("resourceVersionMatch", "NotOlderThan"),
                    ("allowWatchBookmarks", "true"),
                    ("timeoutSeconds", "1"),
                    ("fieldSelector", informer.field_selector or "metadata.name=dra-operators-watch-list-probe"),
                    # The bookmark ends the read: a server that keeps the watch open for its
                    # timeoutSeconds cost every start a second (a node agent's cold start 2.3 s).
                    ("labelSelector", informer.label_selector),
                ],
                raw=True,
                stop_at=INITIAL_EVENTS_END,
                retry=False,
                timeout=15,
            )
        except (ApiError, ConnectionLost) as e:
            log.info("streamed initial events not available, relists use LIST", operator=self.name, error=str(e))
            return False
        return INITIAL_EVENTS_END in text

    async def prime(self) -> dict[str, int]:
        """The one listing per watched resource at start-up, all at once: a start-up waits for
        its longest listing (every Pod's), not for their sum. Each informer's reflector then
        watches at once from its LIST's resourceVersion (started after every LIST, a watch from
        an early one met 410 Gone at the envelope: kube-apiserver keeps about 75 s of a busy
        resource's events). An informer that filters lines, where the server streams initial
        events, is primed by its reflector: the snapshot as events (the lines it refuses never
        parsed), and the same request goes on as its watch (``Reflector.run``). Watch events may
        reach a handler while other caches prime, as they may in any order later; no worker runs
        before all are. One listing that fails fails the start-up, the others cancelled."""
        watch_list = await self.streams_initial_events()
        try:
            async with asyncio.TaskGroup() as group:
                tasks = {
                    plural: group.create_task(self._prime_one(plural, informer, watch_list))
                    for plural, informer in self.informers.items()
                }
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None  # the API's answer, as one listing gave it
        return {plural: task.result() for plural, task in tasks.items()}

    async def _prime_one(self, plural: str, informer: Informer, watch_list: bool) -> int:
        """One informer's start-up listing; returns how many objects it kept."""
        started = time.monotonic()
        reflector = Reflector(self.kube, informer, watch_list=watch_list)
        self.reflectors.append(reflector)
        streamed = watch_list and informer.keep_line is not None
        if streamed:
            self.supervisor.spawn(f"{self.name}-watch-{plural}", functools.partial(reflector.run, listing_first=True))
            await reflector.wait_synced()
            kept = len(informer.store)
        else:
            kept = await informer.prime()
            self.supervisor.spawn(f"{self.name}-watch-{plural}", reflector.run)
        # Where a slow start-up went, for whoever waits on it (one line per resource).
        log.info(
            "cache primed",
            operator=self.name,
            resource=plural,
            kept=kept,
            seconds=round(time.monotonic() - started, 2),
            streamed=streamed,
        )
        return kept

    async def lead(
        self,
        config: Settings,
        lease: str,
        queue: WorkQueue,
        stop: Callable[[], Awaitable[None]] | None = None,
        *,
        read_afresh: Sequence[Informer] = (),
    ) -> None:
        """Start ``queue``'s workers now, or once this replica holds ``lease`` (leader election on;
        the Lease is released at shutdown); then the watchdog. ``read_afresh``: the informers of
        what the controller creates, read again on taking over before any worker runs
        (``Informer.catch_up``), so that nothing the old leader created is created twice."""

        async def catch_up() -> None:
            await asyncio.gather(*(informer.catch_up() for informer in read_afresh))

        leader = await act_when_leader(
            self.kube,
            config,
            lease,
            queue,
            stop=stop,
            supervisor=self.supervisor,
            catch_up=catch_up if read_afresh else None,
        )
        if leader is not None:
            self.electors.append(leader)
            self.on_cleanup(leader.release)
        self.start_watchdog()

    def on_cleanup(self, cleanup: Callable[[], Awaitable[Any]]) -> None:
        """Run at shutdown (and after a failed start), last registered first."""
        self._cleanups.append(cleanup)

    def start_watchdog(self) -> None:
        if self.informers:
            self.supervisor.spawn(f"{self.name}-watchdog", self._watchdog)
        for informer in self.informers.values():

            def stale_reason(i: Informer = informer) -> str:
                return i.stale_reason

            self.supervisor.add_check(stale_reason)

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(min(WATCHDOG_INTERVAL, self.watch_silence / 4))
            for informer in self.informers.values():
                try:
                    if reason := await informer.check_stale():
                        log.error("watch is stuck, liveness fails", operator=self.name, reason=reason)
                except (ApiError, ConnectionLost) as e:
                    if isinstance(e, ApiError) and e.status not in OUTAGE_STATUSES:
                        raise
                    # An outage (no answer, 5xx, 429): nothing to judge the watch by, and nothing
                    # a restart could mend; /healthz and the metrics report it (kube.health).
                    log.info("watchdog cannot reach the API server", operator=self.name, error=str(e))

    def problems(self) -> list[str]:
        return self.supervisor.problems()

    def liveness(self) -> dict[str, Any]:
        """For kopf's probe: raises (HTTP 500 on /healthz) when something is dead or stuck."""
        problems = self.problems()
        if problems:
            raise kopf.PermanentError(f"{self.name}: " + "; ".join(problems))
        return {
            "tasks": len(self.supervisor.running()),
            "watches": len(self.informers),
            "watching": sum(r.watching for r in self.reflectors),
            "api": health.details() if (health := getattr(self.kube, "health", None)) else {},
            "relists": sum(i.relists for i in self.informers.values()),
            "deletions_found_by_relist": sum(i.deletions_found for i in self.informers.values()),
            "watch_lines_skipped": sum(i.lines_skipped for i in self.informers.values()),
            "watch_bookmarks": sum(i.bookmarks for i in self.informers.values()),
        }

    async def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()
        await self.supervisor.stop()
        for cleanup in reversed(self._cleanups):
            try:
                await cleanup()
            except Exception as e:  # noqa: BLE001 - the other cleanups still run
                log.warning("cleanup failed", operator=self.name, error=f"{type(e).__name__}: {e}")
        self._cleanups.clear()


class _RuntimeCollector(Collector):
    def __init__(self, runtime: Runtime):
        self._runtime = runtime

    def collect(self):
        yield from watch_families(self._runtime.name, list(self._runtime.informers.values()), time.monotonic())
        if self._runtime.electors:  # none with leader election off, as client-go
            yield master_status(self._runtime.electors)


async def start_or_undo(runtime: Runtime, start: Callable[[], Awaitable[None]]) -> None:
    """Run ``start``; if it fails, stop what it started and end the operator with the reason."""
    try:
        await runtime.wait_for_api(Settings.from_env().api_wait)
        await start()
    except asyncio.CancelledError:
        await runtime.stop()
        raise
    except Exception as e:  # any failure: undo, then exit non-zero with the reason
        log.error("start-up failed, stopping what was started", operator=runtime.name, error=f"{type(e).__name__}: {e}")
        await runtime.stop()
        message = diagnose.start_failure(
            runtime.name, e, getattr(runtime.kube, "host", None), os.environ.get("KUBECONFIG")
        )
        raise kopf.PermanentError(message) from e


# For the kopf handlers each operator registers (operator.py registers; this only serves them).
async def stop_runtime(memo: kopf.Memo, attr: str) -> None:
    runtime: Runtime | None = getattr(memo, attr, None)
    if runtime is not None:
        await runtime.stop()


def runtime_liveness(memo: kopf.Memo, attr: str) -> dict[str, Any]:
    runtime: Runtime | None = getattr(memo, attr, None)
    return runtime.liveness() if runtime is not None else {}
