import asyncio

import kopf
import pytest

from operators.core.runtime import Runtime, start_or_undo
from operators.core.supervisor import Supervisor


class NoApi:
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
