"""Leader election on a coordination.k8s.io Lease, with client-go's semantics: two replicas of an
operator never act at once.

- A candidate takes the Lease when it is free or its holder has not renewed it for
  ``lease_duration`` (measured on our own clock from when we last saw it change, so clock skew
  between nodes does not matter); writes use the Lease's resourceVersion, so only one wins.
- The leader renews every ``retry_period``. If it cannot renew within ``renew_deadline`` (shorter
  than ``lease_duration``) it stops acting at once: before anyone else may take the Lease. "At
  once" includes a sync already running: its API client sends no write after that moment
  (``Kube.write_gate``), so every write of the old leader was sent at least
  ``lease_duration - renew_deadline`` before a new one can take over.
- A new leader reads the objects it creates afresh before its first sync (``catch_up``): its
  watch may lag (it was reconnecting after an API server restart, say) and miss what the old
  leader created last, and a create that is not seen is made twice (a second ResourceClaim for a
  Pod). Upstream's controllers get the same from starting their informers only once they lead.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily

from ..api.kube import ApiError, Kube
from ..api.resources import LEASES
from ..logging import get_logger

if TYPE_CHECKING:
    from ..settings import Settings
    from .supervisor import Supervisor
    from .workqueue import WorkQueue

log = get_logger(__name__)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        name: str,
        namespace: str,
        identity: str | None = None,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ):
        assert renew_deadline < lease_duration and retry_period < renew_deadline
        # Tried once each: a try stuck in a retry back-off would keep us from taking over (or
        # renewing) right after the API server comes back. The loops retry every retry_period.
        self.kube = kube.without_retries() if hasattr(kube, "without_retries") else kube
        self.name, self.namespace = name, namespace
        self.identity = identity or default_identity()
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self.is_leader = False
        self._last_renewed = 0.0
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self.own_client: Kube | None = None  # closed by release()
        self.task: asyncio.Task | None = None  # the campaign, set by act_when_leader
        self.starting: asyncio.Task | None = None  # catch-up, then the workers (act_when_leader)
        self.log = log.bind(lease=f"{namespace}/{name}", identity=self.identity)

    def _body(self, lease: dict | None, acquire: bool) -> dict:
        now = _now()
        spec = dict((lease or {}).get("spec") or {})
        if acquire:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if lease else 0)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.lease_duration), renewTime=now)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": dict((lease or {}).get("metadata") or {"name": self.name, "namespace": self.namespace}),
            "spec": spec,
        }
        return body

    async def try_acquire_or_renew(self) -> bool:
        loop = asyncio.get_running_loop()
        lease = await self.kube.get_or_none(LEASES, self.name, self.namespace)
        if lease is None:
            try:
                await self.kube.create(LEASES, self._body(None, acquire=True), self.namespace)
                return True
            except ApiError as e:
                if e.already_exists:
                    return False
                raise
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        observed = (holder, spec.get("renewTime") or "")
        if observed != self._observed:
            self._observed, self._observed_at = observed, loop.time()
        held_by_other = holder and holder != self.identity
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if held_by_other and loop.time() < self._observed_at + duration:
            return False
        try:
            await self.kube.replace(LEASES, self._body(lease, acquire=holder != self.identity))
        except ApiError as e:
            if e.conflict:
                return False  # someone else wrote first
            raise
        return True

    async def _attempt(self) -> float | None:
        """One try, bounded by the renew deadline; any failure (API error, broken or hung
        connection, garbage) is a failed try, never the end of the election. Returns when the
        try began (None: it failed): a success vouches for the Lease from that moment only.
        The time is taken before the request is sent, as client-go's ``tryAcquireOrRenew``
        takes ``now`` before its update (tools/leaderelection/leaderelection.go): an answer read
        late (a GC pause, SIGSTOP or a slow answer between sending and reading) must not extend
        our lead, because the standby counts the Lease from when the server wrote it."""
        started = asyncio.get_running_loop().time()
        try:
            async with asyncio.timeout(self.renew_deadline):
                renewed = await self.try_acquire_or_renew()
            return started if renewed else None
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - an election must survive whatever the API does
            self.log.warning("leader election attempt failed", error=f"{type(e).__name__}: {e}", leader=self.is_leader)
            return None

    async def run(self, on_started: Callable[[], Awaitable[None]], on_lost: Callable[[], Awaitable[None]]) -> None:
        """Campaign until leader, call ``on_started``, renew; on losing the Lease call ``on_lost``
        and return (the caller should exit: a fresh process campaigns again as a standby)."""
        loop = asyncio.get_running_loop()
        while (acquired := await self._attempt()) is None:
            await asyncio.sleep(self.retry_period)
        self.is_leader = True
        self._last_renewed = acquired
        self.log.info("became leader")
        await on_started()  # its workers check may_act() before every sync
        while True:
            await asyncio.sleep(self.retry_period)
            if (renewed := await self._attempt()) is not None:
                self._last_renewed = renewed
                continue
            if loop.time() - self._last_renewed >= self.renew_deadline:
                break
        self.is_leader = False
        self.log.error("lost the lease, stopping")
        await on_lost()

    def may_act(self) -> bool:
        """Leader, and renewed recently enough that nobody else can hold the Lease yet. Checked
        before every action: a process that was frozen (SIGSTOP, a long GC pause) learns here,
        before doing anything, that its leadership may have passed to another replica."""
        return self.is_leader and asyncio.get_running_loop().time() - self._last_renewed < self.renew_deadline

    async def release(self) -> None:
        """Give the Lease up at a clean shutdown, so the standby takes over at once. Renewal is
        stopped first: else it could take the Lease back right after we gave it up."""
        for task in (self.starting, self.task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        try:
            await self._release()
        finally:
            if self.own_client is not None:
                await self.own_client.close()

    async def _release(self) -> None:
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            async with asyncio.timeout(self.renew_deadline):
                lease = await self.kube.get_or_none(LEASES, self.name, self.namespace)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._body(lease, acquire=False)
                body["spec"].update(holderIdentity="", leaseDurationSeconds=1)
                async with asyncio.timeout(self.renew_deadline):
                    await self.kube.replace(LEASES, body)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the Lease then simply expires
            self.log.warning("could not release the lease; it expires by itself", error=str(e))


async def act_when_leader(
    kube: Kube,
    settings: Settings,
    lease: str,
    queue: WorkQueue,
    stop: Callable[[], Awaitable[None]] | None = None,
    supervisor: Supervisor | None = None,
    catch_up: Callable[[], Awaitable[object]] | None = None,
) -> LeaderElector | None:
    """Start ``queue``'s workers now (leader election off) or once this replica holds ``lease``
    and ``catch_up`` has succeeded; while leading, every sync first checks that the Lease is
    surely still ours, and so does every write. A replica that loses the Lease runs ``stop``
    (default: stop the queue) and exits, to come back as a standby."""
    stop = stop or queue.stop

    if not settings.leader_election:
        queue.start(supervisor)
        return None
    duration = settings.leader_election_lease_duration
    # A client of its own: renewals must not wait behind the workers' rate limit or connections.
    own = kube.for_leader_election() if hasattr(kube, "for_leader_election") else None
    elector = LeaderElector(
        own or kube,
        lease,
        election_namespace(settings.leader_election_namespace),
        lease_duration=duration,
        renew_deadline=duration * 2 / 3,
        retry_period=max(0.5, duration / 7.5),
    )
    elector.own_client = own
    queue.gate = elector.may_act
    kube.write_gate = elector.may_act

    async def caught_up_then_work() -> None:
        delays = iter((0.5, 1.0, 2.0))
        while catch_up is not None:
            try:
                await catch_up()
                break
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - an outage: try again; the Lease decides the end
                delay = next(delays, 2.0)
                elector.log.warning("cannot read afresh after taking over, retrying", error=str(e), retry_in=delay)
                await asyncio.sleep(delay)
        queue.start(supervisor)

    async def start() -> None:
        # Not awaited by the election (the Lease is renewed while the catch-up runs), and not a
        # supervised task (those run until stopped; this one ends).
        elector.starting = asyncio.get_running_loop().create_task(caught_up_then_work(), name=f"catch-up-{lease}")

    async def lost() -> None:
        try:
            async with asyncio.timeout(5):
                await stop()
        finally:
            elector.log.error("exiting after losing the lease")
            os._exit(1)  # nothing more may happen in this process

    # Not restarted when it fails: a leader must never campaign twice in one process.
    if supervisor is not None:
        elector.task = supervisor.spawn(f"leader-{lease}", lambda: elector.run(start, lost), restart=False)
    else:
        elector.task = asyncio.get_running_loop().create_task(elector.run(start, lost), name=f"leader-{lease}")
    return elector


def master_status(electors: Iterable[LeaderElector]) -> GaugeMetricFamily:
    """client-go's ``leader_election_master_status{name}`` (1 leading, 0 standby;
    component-base/metrics/prometheus/clientgo/leaderelection/metrics.go), one sample per Lease."""
    family = GaugeMetricFamily(
        "leader_election_master_status",
        "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 "
        "indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
        labels=["name"],
    )
    for elector in electors:
        family.add_metric([elector.name], 1.0 if elector.is_leader else 0.0)
    return family


def election_namespace(configured: str) -> str:
    """The configured namespace, else the Pod's own (POD_NAMESPACE or the ServiceAccount mount)."""
    if configured:
        return configured
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip()
    except OSError:
        return "default"
