"""Leader election against an API that fails in every way a real one does; the lab tests show
the same with a restarted kube-apiserver and a cut connection."""

import asyncio

import aiohttp

from operators.core.api.kube import ApiError, ConnectionLost
from operators.core.api.resources import LEASES
from operators.core.machinery.leader import LeaderElector
from tests.fakeapi import FakeApi

FAILURES = [
    ApiError(500, {"reason": "InternalError"}),
    ApiError(429, {"reason": "TooManyRequests"}),
    ConnectionLost("GET", "/", ConnectionRefusedError()),
    aiohttp.ServerDisconnectedError(),
    aiohttp.ClientPayloadError("cut"),
    TimeoutError(),
    OSError("unreachable"),
    ValueError("garbage"),
    KeyError("spec"),
]


class LeaseApi(FakeApi):
    """The fake API server (one Lease, with its resourceVersion checks); ``fail`` makes the next
    calls raise, ``hang`` makes them never answer, ``late_answer`` answers the next write (done
    at once) that late and then hangs; ``written_at``: the loop's time of the last write."""

    def __init__(self):
        super().__init__()
        self.fail: list[BaseException] = []
        self.hang = False
        self.late_answer = 0.0
        self.written_at = 0.0
        self.prepend_reactor("create", "leases", self._write)
        self.prepend_reactor("update", "leases", self._write)
        self.prepend_reactor("*", "leases", self._call)

    @property
    def lease(self):
        return self.stored(LEASES, "l", "ns")

    async def _call(self, action):
        if self.hang:
            await asyncio.Event().wait()
        if self.fail:
            raise self.fail.pop(0)

    async def _write(self, action):
        written = self.track(action)
        self.written_at = asyncio.get_running_loop().time()
        if self.late_answer:
            delay, self.late_answer, self.hang = self.late_answer, 0.0, True
            await asyncio.sleep(delay)
        return True, written


async def sleep_until(when) -> None:
    """Until the loop's clock reaches ``when()`` (read again after each sleep)."""
    loop = asyncio.get_running_loop()
    while (left := when() - loop.time()) > 0:
        await asyncio.sleep(left)


def elector(api, name="a", lease_duration=1.0, renew_deadline=0.6):
    return LeaderElector(
        api, "l", "ns", identity=name, lease_duration=lease_duration, renew_deadline=renew_deadline, retry_period=0.05
    )


async def test_campaign_survives_every_kind_of_failure_and_becomes_leader():
    api = LeaseApi()
    api.fail = list(FAILURES)
    e = elector(api)
    started = asyncio.Event()

    async def on_started():
        started.set()

    task = asyncio.create_task(e.run(on_started, lambda: asyncio.sleep(0)))
    await asyncio.wait_for(started.wait(), 5)
    assert e.may_act() and api.fail == []
    task.cancel()


async def test_renewal_survives_failures_shorter_than_the_deadline():
    api = LeaseApi()
    # Each failure lasts one retry (0.05 s); a deadline a hundred times that long keeps a busy
    # machine's scheduling pauses from being read as a lost Lease.
    e = elector(api, lease_duration=10.0, renew_deadline=6.0)
    lost = asyncio.Event()
    started = asyncio.Event()

    async def on_started():
        started.set()

    async def on_lost():
        lost.set()

    task = asyncio.create_task(e.run(on_started, on_lost))
    await asyncio.wait_for(started.wait(), 5)
    for error in FAILURES:
        api.fail = [error]
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.3)
    assert not lost.is_set() and e.may_act()
    task.cancel()


async def test_a_leader_cut_off_stops_acting_before_its_lease_ends_and_gives_up():
    api = LeaseApi()
    e = elector(api)
    lost = asyncio.Event()
    started = asyncio.Event()

    async def on_started():
        started.set()

    async def on_lost():
        lost.set()

    task = asyncio.create_task(e.run(on_started, on_lost))
    await asyncio.wait_for(started.wait(), 5)
    api.hang = True  # black-holed: requests never answer
    # Another replica may take the Lease once it has not changed for its duration, counted from
    # the last write. From then on this one must not act. Checked at that moment, never before
    # (a sleep never ends early), so a slow machine cannot fail this test but a leader that
    # acts too long does.
    await sleep_until(lambda: api.written_at + e.lease_duration)
    assert not e.may_act(), "acting while another replica could hold the Lease"
    await asyncio.wait_for(lost.wait(), 5)
    await task


async def test_a_renewal_answered_late_counts_from_when_it_was_sent():
    """The server wrote the Lease, the answer came late (a GC pause, SIGSTOP, a slow proxy), then
    the API went away: the leader must stop acting before the Lease can expire for anyone else,
    who counts from the write, not from when our answer arrived."""
    api = LeaseApi()
    e = elector(api)
    started = asyncio.Event()

    async def on_started():
        started.set()

    task = asyncio.create_task(e.run(on_started, lambda: asyncio.sleep(0)))
    await asyncio.wait_for(started.wait(), 5)
    api.late_answer = 0.5  # under the renew deadline (0.6): the renewal succeeds
    while not api.hang:
        await asyncio.sleep(0.01)
    # Counted from the answer, the lead would last until written_at + 0.5 + 0.6, past the
    # Lease's end (written_at + 1.0); counted from the request, it ends by written_at + 0.6.
    await sleep_until(lambda: api.written_at + e.renew_deadline)
    assert not e.may_act(), "the renewal counted from its late answer, not from when it was sent"
    task.cancel()


async def test_release_stops_renewal_first_so_the_lease_stays_free():
    api = LeaseApi()
    e = elector(api)
    started = asyncio.Event()

    async def on_started():
        started.set()

    e.task = asyncio.create_task(e.run(on_started, lambda: asyncio.sleep(0)))
    await asyncio.wait_for(started.wait(), 5)
    await e.release()
    assert e.task.done() and api.lease["spec"]["holderIdentity"] == ""
    await asyncio.sleep(0.2)  # a renewal still running would have taken it back by now
    assert api.lease["spec"]["holderIdentity"] == ""


async def test_release_that_cannot_reach_the_api_does_not_raise():
    api = LeaseApi()
    e = elector(api)
    started = asyncio.Event()

    async def on_started():
        started.set()

    e.task = asyncio.create_task(e.run(on_started, lambda: asyncio.sleep(0)))
    await asyncio.wait_for(started.wait(), 5)
    api.fail = [ConnectionLost("GET", "/", ConnectionRefusedError())] * 3
    await e.release()
    assert not e.is_leader


async def test_the_elector_has_a_client_of_its_own_without_the_workers_rate_limit():
    """kube-controller-manager's separate leader-election client: a renewal never waits for the
    workers' DRA_API_QPS tokens nor for a connection of their pool; it is closed at release."""
    from operators.core.api.kube import Kube
    from operators.core.api.ratelimit import TokenBucket
    from operators.core.machinery.leader import act_when_leader
    from operators.core.machinery.workqueue import WorkQueue
    from operators.core.settings import Settings

    workers = Kube.for_host("https://127.0.0.1:9")
    workers.limiter = TokenBucket(1)
    for _ in range(100):
        workers.limiter.reserve()  # the workers are 100 s in debt
    settings = Settings(leader_election=True, leader_election_namespace="ns", leader_election_lease_duration=3)
    e = await act_when_leader(workers, settings, "l", WorkQueue("q", lambda key: asyncio.sleep(0)))
    try:
        assert e.kube.limiter is None and e.kube.session is not workers.session
        assert e.kube.retry.attempts == 1
    finally:
        await e.release()
        await workers.close()
    assert e.kube.closed


async def test_a_new_leader_reads_afresh_before_its_workers_start_and_fences_its_writes():
    """On taking over: the catch-up (retried through an outage) comes before any sync, the Lease
    is renewed meanwhile, and the workers' client sends writes only while ``may_act``."""
    from operators.core.machinery.leader import act_when_leader
    from operators.core.machinery.workqueue import WorkQueue
    from operators.core.settings import Settings

    api = LeaseApi()
    synced: list[str] = []
    queue = WorkQueue("q", lambda key: asyncio.sleep(0, synced.append(key)), workers=1)
    queue.add("k")
    reads: list[bool] = []

    async def catch_up():
        reads.append(bool(queue._tasks))  # were the workers running yet?
        if len(reads) == 1:
            raise ConnectionLost("GET", "/", ConnectionRefusedError())

    settings = Settings(leader_election=True, leader_election_namespace="ns", leader_election_lease_duration=3)
    e = await act_when_leader(api, settings, "l", queue, catch_up=catch_up)
    try:
        while not synced:
            await asyncio.sleep(0.02)
        assert reads == [False, False] and synced == ["k"]
        assert api.write_gate == e.may_act and e.may_act()
    finally:
        await e.release()
        await queue.stop()


async def test_a_standby_takes_the_lease_only_once_its_holder_stopped_renewing_for_its_duration():
    """client-go's rule, counted on the standby's own clock from when it saw the Lease last
    change: before that, no write; after it, the first try takes the Lease. (The lab test kills a
    real leader; this one says what the standby does without timing it.)"""
    api = LeaseApi()
    api.add(
        {
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "ns"},
            "spec": {
                "holderIdentity": "b",
                "leaseDurationSeconds": 1,
                "renewTime": "2026-01-01T00:00:00.000000Z",
                "leaseTransitions": 3,
            },
        },
        LEASES,
    )
    e = elector(api, "a")
    assert not await e.try_acquire_or_renew()
    assert not await e.try_acquire_or_renew()
    assert api.actions_of("update", "leases") == []
    await asyncio.sleep(1.05)  # no change seen for the Lease's own duration (a sleep never ends early)
    assert await e.try_acquire_or_renew()
    spec = api.lease["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"], spec["leaseDurationSeconds"]) == ("a", 4, 1)
    assert len(api.actions_of("update", "leases")) == 1
