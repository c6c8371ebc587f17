"""kubelet's DRAResourceHealth stream (v1 and v1alpha1): what the agent reports for its devices,
and when, read through a real gRPC client on a Unix socket (no kubelet)."""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace

import grpc
import pytest
import structlog

from operators.nodeagent.health import LOST, XID, HealthEvent, HealthTracker
from operators.nodeagent.plugin import grpc_limits, health_report, health_service
from operators.nodeagent.plugin.kubeletapi import dra_health_v1_pb2, dra_health_v1alpha1_pb2
from operators.nodeagent.plugin.servicers import SUPPORTED_SERVICES
from tests.grpcio_stubs import dra_health_v1_pb2_grpc, dra_health_v1alpha1_pb2_grpc

DRIVER, NODE = "gpu.sim.test", "node-a"


def test_tainted_devices_are_unhealthy_informational_taints_are_not():
    tracker = HealthTracker(DRIVER)
    tracker.record(HealthEvent("gpu-1", XID, "79"))
    tracker.record(HealthEvent("gpu-2", XID, "13"))  # an application XID: effect None
    reports = {r.device: r for r in health_report.device_reports(["gpu-2", "gpu-0", "gpu-1"], NODE, tracker.taints)}
    assert [r.device for r in health_report.device_reports(["gpu-2", "gpu-0"], NODE, tracker.taints)] == [
        "gpu-0",
        "gpu-2",
    ]
    assert reports["gpu-0"] == health_report.DeviceReport(NODE, "gpu-0", "HEALTHY")
    assert reports["gpu-1"].health == "UNHEALTHY" and reports["gpu-1"].message.startswith("xid=79 (effect NoSchedule")
    assert reports["gpu-2"].health == "HEALTHY" and reports["gpu-2"].message.startswith("informational: xid=13")


def test_the_health_services_are_advertised_after_the_dra_services():
    """kubelet takes the first DRA service it knows, and v1 health before v1alpha1 (pickHealthService)."""
    assert SUPPORTED_SERVICES == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]


@pytest.fixture
async def served(tmp_path):
    tracker = HealthTracker(DRIVER, quiet_period=0)
    agent = SimpleNamespace(
        node_name=NODE,
        health=tracker,
        log=structlog.get_logger(),
        published_devices=lambda: [{"name": "gpu-0"}, {"name": "gpu-1"}],
    )
    feed = health_service.HealthFeed()
    server = grpc_limits.server(health_service.services(agent, feed, resend=0.5))
    socket = tmp_path / "dra.sock"
    await server.start(path=str(socket))
    channel = grpc.aio.insecure_channel(f"unix://{socket}")  # grpcio's client against our server
    yield SimpleNamespace(tracker=tracker, feed=feed, channel=channel)
    await channel.close()
    server.close()
    await server.wait_closed()


def health(message) -> dict[str, tuple[str, str]]:
    return {
        d.device.device_name: (d.device.pool_name, dra_health_v1_pb2.HealthStatus.Name(d.health))
        for d in message.devices
    }


@pytest.mark.parametrize("version", ["v1", "v1alpha1"])
async def test_a_snapshot_on_open_then_every_change_then_again_before_kubelets_timeout(served, version):
    stub = (dra_health_v1_pb2_grpc if version == "v1" else dra_health_v1alpha1_pb2_grpc).DRAResourceHealthStub(
        served.channel
    )
    pb2 = dra_health_v1_pb2 if version == "v1" else dra_health_v1alpha1_pb2
    stream = stub.NodeWatchResources(pb2.NodeWatchResourcesRequest())
    first = await asyncio.wait_for(stream.read(), 5)
    assert health(first) == {"gpu-0": (NODE, "HEALTHY"), "gpu-1": (NODE, "HEALTHY")}
    assert all(
        d.health_check_timeout_seconds == health_service.TIMEOUT and d.last_updated_time > 0 for d in first.devices
    )
    assert served.feed.streams == 1

    served.tracker.record(HealthEvent("gpu-1", LOST))
    served.feed.changed()
    changed = await asyncio.wait_for(stream.read(), 10)
    assert health(changed)["gpu-1"] == (NODE, "UNHEALTHY")
    assert "gpu-lost" in {d.device.device_name: d.message for d in changed.devices}["gpu-1"]

    again = await asyncio.wait_for(stream.read(), 10)  # nothing changed: re-sent within `resend`
    assert health(again) == health(changed)

    served.tracker.recover(lambda device: True, now=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1))
    served.feed.changed()
    recovered = await asyncio.wait_for(stream.read(), 10)
    assert health(recovered)["gpu-1"] == (NODE, "HEALTHY")
    stream.cancel()
    await asyncio.sleep(0.1)
    assert served.feed.streams == 0


async def test_the_streams_end_when_the_agent_stops(served):
    """kubelet sees its stream end (and re-opens it to the next agent) rather than a stream
    cancelled without an end when the server closes."""
    stream = dra_health_v1_pb2_grpc.DRAResourceHealthStub(served.channel).NodeWatchResources(
        dra_health_v1_pb2.NodeWatchResourcesRequest()
    )
    assert health(await asyncio.wait_for(stream.read(), 5))
    await served.feed.close(grace=2)
    assert await asyncio.wait_for(stream.read(), 5) is grpc.aio.EOF
    assert (await stream.code()) == grpc.StatusCode.OK and served.feed.streams == 0
