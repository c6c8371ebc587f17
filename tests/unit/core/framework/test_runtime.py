import asyncio
import contextlib

import kopf
import pytest

from operators.core.api.kube import ApiError, ConnectionLost
from operators.core.api.resources import DEVICE_CLASSES, RESOURCE_CLAIMS
from operators.core.framework.runtime import Runtime, start_or_undo
from operators.core.machinery.store import Store
from operators.core.machinery.supervisor import Supervisor
from tests.fakeapi import FakeApi


class NoApi:
    """An API server that answers /version (or fails as told, one answer per call)."""

    def __init__(self, answers=()):
        self.answers = list(answers)
        self.calls = 0

    async def request(self, method, path, **_):
        self.calls += 1
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
        return {"gitVersion": "v1.37.1"}

    async def close(self):
        pass


async def test_liveness_reports_tasks_and_fails_with_the_problem():
    runtime = Runtime("t", NoApi(), supervisor=Supervisor("t", on_dead=lambda reason: None))
    runtime.supervisor.spawn("loop", lambda: asyncio.sleep(3600))
    assert runtime.liveness()["tasks"] == 1
    runtime.supervisor.add_check(lambda: "watch of pods silent for 700s")
    with pytest.raises(kopf.PermanentError, match="watch of pods silent"):
        runtime.liveness()
    await runtime.stop()


async def test_a_failed_start_stops_what_it_started_and_ends_with_the_reason():
    runtime = Runtime("t", NoApi(), supervisor=Supervisor("t", on_dead=lambda reason: None))
    stopped = []

    async def start():
        runtime.supervisor.spawn("publish", lambda: asyncio.sleep(3600))
        runtime.on_cleanup(lambda: asyncio.sleep(0, stopped.append("grpc server")))
        raise ConnectionRefusedError("https://127.0.0.1:6443")

    with pytest.raises(kopf.PermanentError, match="could not start: ConnectionRefusedError"):
        await start_or_undo(runtime, start)
    assert stopped == ["grpc server"] and runtime.supervisor.running() == []


async def test_a_starting_operator_waits_for_an_api_server_that_does_not_answer_yet(monkeypatch):
    sleeps = []

    async def sleep(seconds):
        sleeps.append(seconds)

    api = NoApi([ConnectionLost("GET", "/version", OSError("refused"))] * 3 + [ApiError(503, "starting")])
    runtime = Runtime("t", api, supervisor=Supervisor("t", on_dead=lambda reason: None))
    monkeypatch.setattr(asyncio, "sleep", sleep)
    await runtime.wait_for_api(timeout=60)
    assert api.calls == 5 and sleeps == [0.5, 1.0, 2.0, 4.0]


async def test_the_wait_for_the_api_server_is_bounded_and_ends_at_any_other_answer():
    api = NoApi([ConnectionLost("GET", "/version", OSError("refused"))] * 100)
    runtime = Runtime("t", api, supervisor=Supervisor("t", on_dead=lambda reason: None))
    await runtime.wait_for_api(timeout=0.6)  # gives up; the start then reports the unreachable server
    assert 1 < api.calls < 5
    forbidden = NoApi([ApiError(403, "forbidden")])
    await Runtime("t", forbidden, supervisor=Supervisor("t", on_dead=lambda reason: None)).wait_for_api()
    assert forbidden.calls == 1
    garbage = NoApi([ApiError(502, {"reason": "BadResponse", "message": "not JSON"})])  # no API server at all
    await Runtime("t", garbage, supervisor=Supervisor("t", on_dead=lambda reason: None)).wait_for_api()
    assert garbage.calls == 1


class OutageInformer:
    """An informer whose stale-watch check meets an API outage every time."""

    def __init__(self, error):
        self.error, self.checks, self.stale_reason = error, 0, ""
        self.relists = self.deletions_found = self.lines_skipped = self.bookmarks = 0

    def stop(self):
        pass

    async def check_stale(self):
        self.checks += 1
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        ApiError(503, "proxy: no upstream"),
        ApiError(429, "slow down"),
        ApiError(500, "etcd"),
        ConnectionLost("GET", "/", OSError("refused")),
    ],
)
async def test_the_watchdog_rides_out_an_api_outage(error):
    """5xx/429 or no answer is the API server's outage: the watchdog keeps running (it used to die
    five times in a row and take the process with it), liveness holds and reports the outage."""
    from operators.core.api.apihealth import ApiHealth
    from operators.core.api.kube import Kube

    dead = []
    health = ApiHealth()
    kube = Kube(None, health=health)
    runtime = Runtime("t", kube, watch_silence=0.04, supervisor=Supervisor("t", on_dead=dead.append, backoff=(0,)))
    runtime.informers["pods"] = informer = OutageInformer(error)
    runtime.start_watchdog()
    health.failed(str(error))
    while informer.checks < 20 and not dead:
        await asyncio.sleep(0.01)
    assert dead == [] and runtime.problems() == []
    assert runtime.liveness()["api"]["available"] is False
    health.answered()
    assert runtime.liveness()["api"] == {"available": True, "outages": 1}
    await runtime.stop()


async def test_the_watchdog_still_fails_on_what_is_not_an_outage():
    dead = []
    runtime = Runtime(
        "t", NoApi(), watch_silence=0.04, supervisor=Supervisor("t", on_dead=dead.append, backoff=(0,), max_failures=2)
    )
    runtime.informers["pods"] = OutageInformer(ApiError(403, "forbidden"))
    runtime.start_watchdog()
    while not dead:
        await asyncio.sleep(0.01)
    await runtime.stop()


class Watchless(FakeApi):
    """Every watch waits (for its cancellation): the reflectors the start-up starts are not tested here."""

    @contextlib.asynccontextmanager
    async def stream(self, *args, **kwargs):
        await asyncio.Event().wait()
        yield


async def test_the_caches_prime_at_once_and_one_refused_listing_fails_the_start_with_its_answer():
    """A start-up waits for its longest listing, not for the sum of them: here the claims' LIST
    is answered only once the classes' LIST (made after it) has been, which one at a time never
    would. A refused one ends the start-up with the API's answer, the others cancelled."""
    api = Watchless()
    classes_listed, claims_cancelled = asyncio.Event(), asyncio.Event()

    async def claims_after_classes(action):
        if (action.params or {}).get("watch"):  # the probe for streamed initial events
            return None
        try:
            await asyncio.wait_for(classes_listed.wait(), 5)
        except asyncio.CancelledError:
            claims_cancelled.set()
            raise
        return None  # the tracker answers

    def classes(action):
        classes_listed.set()

    api.prepend_reactor("list", "resourceclaims", claims_after_classes)
    api.prepend_reactor("list", "deviceclasses", classes)
    runtime = Runtime("t", api, supervisor=Supervisor("t", on_dead=lambda reason: None))
    for resource in (RESOURCE_CLAIMS, DEVICE_CLASSES):
        runtime.informer(resource, Store(), lambda obj, deleted: None)
    try:
        assert await runtime.prime() == {"resourceclaims": 0, "deviceclasses": 0}
    finally:
        await runtime.stop()

    classes_listed.clear()
    api.fail("list", "deviceclasses", ApiError(403, {"reason": "Forbidden", "message": "cannot list deviceclasses"}))
    runtime = Runtime("t", api, supervisor=Supervisor("t", on_dead=lambda reason: None))
    for resource in (RESOURCE_CLAIMS, DEVICE_CLASSES):
        runtime.informer(resource, Store(), lambda obj, deleted: None)
    try:
        with pytest.raises(ApiError) as refused:
            await runtime.prime()
    finally:
        await runtime.stop()
    assert refused.value.status == 403 and claims_cancelled.is_set()
