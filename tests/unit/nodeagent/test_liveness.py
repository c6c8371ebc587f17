"""The kubelet plugin's self-check and the grpc.health.v1 service behind liveness, through real
gRPC clients and servers (Unix sockets for the plugin, TCP for the health service). The plugin's
stand-ins here are grpcio servers, so the self-check's grpclib client is tested against the other
implementation; the health service is read with grpclib's client, as grpcio-health-checking's
messages cannot share a process with grpclib's (the same protobuf names)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.health.v1 import health_grpc, health_pb2

from operators.nodeagent.plugin import liveness
from operators.nodeagent.plugin.kubeletapi import dra_v1_pb2, pluginregistration_v1_pb2
from tests.grpcio_stubs import dra_v1_pb2_grpc, pluginregistration_v1_pb2_grpc


class _Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    async def GetInfo(self, request, context):
        return pluginregistration_v1_pb2.PluginInfo(type="DRAPlugin", name="d")


class _Dra(dra_v1_pb2_grpc.DRAPluginServicer):
    def __init__(self):
        self.calls = 0
        self.hang = asyncio.Event()

    async def NodePrepareResources(self, request, context):
        self.calls += 1
        assert not request.claims  # the self-check prepares nothing
        if self.hang.is_set():
            await asyncio.sleep(3600)
        return dra_v1_pb2.NodePrepareResourcesResponse()


@pytest.fixture
async def plugin(tmp_path):
    registration, dra = tmp_path / "d-reg.sock", tmp_path / "dra.sock"
    servers, dra_servicer = [], _Dra()
    for path, add in (
        (registration, lambda s: pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(_Registration(), s)),
        (dra, lambda s: dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(dra_servicer, s)),
    ):
        server = grpc.aio.server()
        add(server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        servers.append(server)
    yield SimpleNamespace(sockets=lambda: (registration, dra), servers=servers, dra=dra_servicer, dra_path=dra)
    for server in servers:
        await server.stop(0)


async def status(port: int, service: str) -> str:
    channel = Channel("127.0.0.1", port)
    try:
        answer = await health_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
    finally:
        channel.close()
    return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)


async def test_serving_while_the_sockets_answer_then_not_after_three_misses(plugin):
    problems: list[str] = []
    check = liveness.SelfCheck(
        plugin.sockets, lambda: problems + [p for p in [check.problem()] if p], failures=3
    )  # the default timeout: nothing here should time out, a deleted socket fails at once
    port = await check.serve(0)
    try:
        assert await check.check_once() == ""
        assert plugin.dra.calls == 1
        assert (await status(port, ""), await status(port, "liveness")) == ("SERVING", "SERVING")
        with pytest.raises(GRPCError) as unknown:
            await status(port, "something-else")
        assert unknown.value.status == Status.NOT_FOUND

        plugin.dra_path.unlink()  # the DRA socket deleted under the server: kubelet cannot reach it
        for missed in (1, 2):
            assert "NodePrepareResources on" in await check.check_once()
            assert check.problem() == "" and await status(port, "liveness") == "SERVING", missed
        await check.check_once()
        assert check.problem().startswith("kubelet plugin does not answer (3 checks in a row): NodePrepareResources")
        assert str(plugin.dra_path) in check.problem()
        assert await status(port, "liveness") == "NOT_SERVING"
    finally:
        await check.stop()


async def test_a_hanging_call_is_a_miss_and_an_answer_clears_the_count(plugin):
    check = liveness.SelfCheck(plugin.sockets, lambda: [], timeout=0.3, failures=2)
    plugin.dra.hang.set()
    assert "DEADLINE_EXCEEDED" in await check.check_once()
    assert check.missed == 1
    plugin.dra.hang.clear()
    check.timeout = 5.0  # only the hanging call should time out, not an answer on a loaded machine
    assert await check.check_once() == ""
    assert check.missed == 0 and check.problem() == ""


async def test_any_other_problem_is_not_serving_at_the_time_of_the_call(plugin):
    """A dead task elsewhere (what /healthz reports) answers NOT_SERVING at once, without waiting
    for the next self-check."""
    problems: list[str] = []
    check = liveness.SelfCheck(None, lambda: problems)  # an agent without the kubelet plugin
    port = await check.serve(0)
    try:
        assert await check.check_once() == "" and await status(port, "liveness") == "SERVING"
        problems.append("task informer-nodes is dead")
        assert await status(port, "liveness") == "NOT_SERVING"
        assert await status(port, "") == "NOT_SERVING"
    finally:
        await check.stop()


async def test_a_port_in_use_is_a_clear_error():
    first = liveness.SelfCheck(None, lambda: [])
    port = await first.serve(0)
    try:
        with pytest.raises(OSError, match="DRA_NODEAGENT_GRPC_HEALTH_PORT"):
            await liveness.SelfCheck(None, lambda: []).serve(port)
    finally:
        await first.stop()


async def test_ready_only_once_kubelet_registered_the_plugin(plugin):
    registered = {"yes": False}
    check = liveness.SelfCheck(plugin.sockets, lambda: [], registered=lambda: registered["yes"])
    port = await check.serve(0)
    try:
        await check.check_once()
        assert (await status(port, "liveness"), await status(port, "readiness")) == ("SERVING", "NOT_SERVING")
        registered["yes"] = True
        assert await status(port, "readiness") == "SERVING"
    finally:
        await check.stop()


async def test_watch_streams_each_change_and_not_serving_at_shutdown():
    """grpc.health.v1 Watch, as grpcio's servicer answers it: the status now, then every change;
    SERVICE_UNKNOWN for a service never set; NOT_SERVING when the agent stops."""
    problems: list[str] = []
    check = liveness.SelfCheck(None, lambda: problems)
    port = await check.serve(0)
    channel = Channel("127.0.0.1", port)
    try:
        stub = health_grpc.HealthStub(channel)
        async with stub.Watch.open() as stream:
            await stream.send_message(health_pb2.HealthCheckRequest(service="liveness"), end=True)
            seen = [(await asyncio.wait_for(stream.recv_message(), 5)).status]
            problems.append("task informer-nodes is dead")
            await check.check_once()  # the next self-check publishes the change
            seen.append((await asyncio.wait_for(stream.recv_message(), 5)).status)
            problems.clear()
            await check.check_once()
            seen.append((await asyncio.wait_for(stream.recv_message(), 5)).status)
            await check.stop()
            seen.append((await asyncio.wait_for(stream.recv_message(), 5)).status)
            assert await asyncio.wait_for(stream.recv_message(), 5) is None  # and the stream ends
        assert seen == [liveness.SERVING, liveness.NOT_SERVING, liveness.SERVING, liveness.NOT_SERVING]
        check2 = liveness.SelfCheck(None, lambda: [])
        port2 = await check2.serve(0)
        other = Channel("127.0.0.1", port2)
        try:
            async with health_grpc.HealthStub(other).Watch.open() as stream:
                await stream.send_message(health_pb2.HealthCheckRequest(service="nothing-such"), end=True)
                assert (await asyncio.wait_for(stream.recv_message(), 5)).status == liveness.SERVICE_UNKNOWN
                await check2.stop()
                assert await asyncio.wait_for(stream.recv_message(), 5) is None
        finally:
            other.close()
            await check2.stop()
    finally:
        channel.close()
        await check.stop()
