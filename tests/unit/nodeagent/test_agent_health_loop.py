import asyncio
from unittest.mock import MagicMock

from prometheus_client import CollectorRegistry

from operators.nodeagent.agent import NodeAgent
from operators.nodeagent.health import XID, HealthEvent, HealthTracker
from operators.nodeagent.metrics import Metrics


async def test_a_health_event_that_fails_is_logged_and_the_loop_goes_on():
    agent = NodeAgent(
        MagicMock(),
        MagicMock(),
        node_name="node-1",
        driver="gpu.example.com",
        sync_delay=0.0,
        health=HealthTracker("gpu.example.com"),
        metrics=Metrics(CollectorRegistry()),
    )
    handled = []

    async def on_health_event(event: HealthEvent) -> None:
        if event.device == "gpu-0":
            raise RuntimeError("bad event")
        handled.append(event.device)

    agent._on_health_event = on_health_event
    loop = asyncio.create_task(agent._health_loop())
    try:
        await agent._health_events.put(HealthEvent("gpu-0", XID, "79"))
        await agent._health_events.put(HealthEvent("gpu-1", XID, "79"))
        for _ in range(100):
            if handled or loop.done():
                break
            await asyncio.sleep(0.01)
        assert not loop.done(), loop.exception()
        assert handled == ["gpu-1"]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
