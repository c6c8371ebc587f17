import asyncio

import aiohttp

from operators.core.api.kube import ApiError, ConnectionLost
from operators.core.machinery.supervisor import Supervisor

FAILURES = [
    ApiError(500, {"reason": "InternalError"}),
    ConnectionLost("GET", "/", ConnectionResetError()),
    aiohttp.ServerDisconnectedError(),
    aiohttp.ClientPayloadError("cut"),
    TimeoutError(),
    KeyError("spec"),
    ValueError("garbage"),
    RuntimeError("bug"),
]


async def wait_for(condition, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)


async def test_a_task_that_raises_anything_is_restarted_and_keeps_working():
    dead = []
    supervisor = Supervisor("t", backoff=(0.01,), max_failures=len(FAILURES) + 1, on_dead=dead.append)
    errors = list(FAILURES)
    done = asyncio.Event()

    async def loop():
        if errors:
            raise errors.pop(0)
        done.set()
        await asyncio.Event().wait()

    supervisor.spawn("loop", loop)
    await asyncio.wait_for(done.wait(), 5)
    assert supervisor.problems() == [] and dead == []
    await supervisor.stop()


async def test_a_task_that_keeps_failing_is_dead_fails_liveness_and_ends_the_process():
    dead = []
    supervisor = Supervisor("t", backoff=(0.01,), max_failures=3, on_dead=dead.append)

    async def broken():
        raise KeyError("always")

    supervisor.spawn("broken", broken)
    await wait_for(lambda: dead)
    assert "broken" in dead[0] and "KeyError" in dead[0]
    assert any("broken is dead" in p for p in supervisor.problems())


async def test_a_task_that_must_not_restart_is_fatal_at_once():
    dead = []
    supervisor = Supervisor("t", backoff=(0.01,), on_dead=dead.append)

    async def leader():
        raise aiohttp.ServerDisconnectedError()

    supervisor.spawn("leader", leader, restart=False)
    await wait_for(lambda: dead)
    assert supervisor.problems()


async def test_a_loop_that_returns_counts_as_failed():
    dead = []
    supervisor = Supervisor("t", backoff=(0.01,), max_failures=2, on_dead=dead.append)

    async def returns():
        return None

    supervisor.spawn("returns", returns)
    await wait_for(lambda: dead)
    assert "should run until stopped" in dead[0]


async def test_stop_cancels_without_counting_failures_and_checks_join_liveness():
    dead = []
    supervisor = Supervisor("t", on_dead=dead.append)
    supervisor.spawn("sleeper", lambda: asyncio.sleep(3600))
    supervisor.add_check(lambda: "watch of pods is stuck")
    assert supervisor.problems() == ["watch of pods is stuck"]
    await supervisor.stop()
    assert dead == [] and supervisor.running() == []
