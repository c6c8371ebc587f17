"""Our gRPC server on h2: the pure decisions, then the kubelet plugin's DRA servicers on a real
Unix socket behind a stand-in DeviceState, called with grpclib's client (kubelet's calls) and a
raw HTTP/2 client (what well-behaved clients never send). The limits are test_grpc_limits'."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError

from operators.nodeagent.plugin import grpc_limits, servicers
from operators.nodeagent.plugin.checkpoint import PreparedDevice
from operators.nodeagent.plugin.grpc_server import (
    encode_status_message,
    request_refusal,
    status_headers,
    timeout_seconds,
)
from operators.nodeagent.plugin.kubeletapi import dra_v1_grpc, dra_v1_pb2
from operators.nodeagent.plugin.state import ClaimResult
from tests.raw_grpc import Call, RawGrpc, frame

PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"


# -- the decisions -------------------------------------------------------------------------------


def test_grpc_timeouts_in_every_unit_and_malformed_ones():
    assert timeout_seconds("10S") == 10 and timeout_seconds("2H") == 7200 and timeout_seconds("3M") == 180
    assert timeout_seconds("250m") == pytest.approx(0.25) and timeout_seconds("99999999n") == pytest.approx(0.1, 1e-6)
    for bad in ("", "10", "S", "123456789S", "1.5S", "-1S", "10s "):
        with pytest.raises(ValueError):
            timeout_seconds(bad)


def test_status_messages_are_percent_encoded_outside_printable_ascii():
    assert encode_status_message("too many calls (limit 5); retry later") == "too many calls (limit 5); retry later"
    assert encode_status_message("50% über\n") == "50%25 %C3%BCber%0A"


def test_what_cannot_start_a_call():
    mapping = {PREPARE: object()}
    ok = {":method": "POST", ":path": PREPARE, "content-type": "application/grpc"}
    assert request_refusal(ok, mapping) is None
    assert request_refusal({**ok, "content-type": "application/grpc+proto"}, mapping) is None
    assert request_refusal({**ok, "content-type": "application/grpc; charset=utf-8"}, mapping) is None
    assert request_refusal({**ok, ":method": "GET"}, mapping)[0] == 405
    assert request_refusal({**ok, "content-type": "application/json"}, mapping)[0] == 415
    assert request_refusal({**ok, "content-type": "application/grpc+json"}, mapping)[0] == 415
    assert request_refusal({**ok, ":path": "/x.Y/Z"}, mapping) == (200, Status.UNIMPLEMENTED, "unknown method /x.Y/Z")
    assert request_refusal({**ok, "grpc-timeout": "soon"}, mapping)[:2] == (200, Status.INTERNAL)


def test_trailers_alone_or_after_the_response_headers():
    assert status_headers(Status.OK, "") == [("grpc-status", "0")]
    assert status_headers(Status.NOT_FOUND, "no such", 200) == [
        (":status", "200"),
        ("content-type", "application/grpc+proto"),
        ("grpc-status", "5"),
        ("grpc-message", "no such"),
    ]


# -- a real server -------------------------------------------------------------------------------


class State:
    """What the DRA servicers call: answers ``devices`` devices per claim, or waits, or fails."""

    def __init__(self) -> None:
        self.devices = 1
        self.hang = False
        self.fail = False
        self.cancelled = asyncio.Event()

    async def prepare(self, claims: list[dict[str, str]]) -> dict[str, ClaimResult]:
        if self.fail:
            raise RuntimeError("a bug")
        if self.hang:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return {
            c["uid"]: ClaimResult(
                devices=[
                    PreparedDevice(
                        pool="node-a",
                        device=f"gpu-{i}",
                        requestNames=["gpus"],
                        cdiDeviceIDs=[f"k8s.gpu.test/claim={c['uid']}-gpu-{i}"],
                    )
                    for i in range(self.devices)
                ]
            )
            for c in claims
        }

    async def unprepare(self, claims: list[dict[str, str]]) -> dict[str, str]:
        return {c["uid"]: "" for c in claims}


@pytest.fixture
async def served():
    state = State()
    server = grpc_limits.server([servicers.DraV1(state)])
    path = Path(tempfile.mkdtemp(prefix="gs-", dir="/tmp")) / "dra.sock"
    await server.start(path=str(path))
    channel = Channel(path=str(path))
    yield state, server, path, dra_v1_grpc.DRAPluginStub(channel)
    channel.close()
    server.close()
    await server.wait_closed()


def request(count: int) -> dra_v1_pb2.NodePrepareResourcesRequest:
    return dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1_pb2.Claim(namespace="ns", uid=f"uid-{i:05}", name=f"claim-{i}") for i in range(count)]
    )


async def test_messages_larger_than_the_windows_go_both_ways(served):
    """A request and an answer of several HTTP/2 windows each (flow control on both sides)."""
    state, _, _, stub = served
    state.devices = 3
    big = request(8000)
    assert big.ByteSize() > 2 * grpc_limits.WINDOW
    response = await stub.NodePrepareResources(big, timeout=30)
    assert response.ByteSize() > 4 * grpc_limits.WINDOW
    assert sorted(response.claims) == [c.uid for c in big.claims]
    assert [d.device_name for d in response.claims["uid-07999"].devices] == ["gpu-0", "gpu-1", "gpu-2"]


async def test_a_passed_deadline_cancels_the_call_and_answers_deadline_exceeded(served):
    """The server's own deadline (clients give up by themselves too: this one waits for the answer)."""
    state, _, path, _ = served
    state.hang = True
    client = await RawGrpc.connect(path=str(path))
    try:
        stream = client.h2.get_next_available_stream_id()
        client.calls[stream] = Call()
        client.h2.send_headers(
            stream,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", PREPARE),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", "200m"),
            ],
        )
        await client.send(stream, frame(request(1).SerializeToString()))
        await asyncio.wait_for(client.calls[stream].done.wait(), 5)
        assert client.calls[stream].status == str(Status.DEADLINE_EXCEEDED.value)
        assert state.cancelled.is_set()
    finally:
        await client.close()


async def test_a_servicer_bug_answers_unknown(served):
    state, _, _, stub = served
    state.fail = True
    with pytest.raises(GRPCError) as failed:
        await stub.NodePrepareResources(request(1), timeout=5)
    assert (failed.value.status, failed.value.message) == (Status.UNKNOWN, "Internal Server Error")


async def test_a_request_in_one_byte_frames_and_an_unknown_method(served):
    _, _, path, _ = served
    client = await RawGrpc.connect(path=str(path))
    try:
        stream = client.start(PREPARE, end=False)
        for byte in frame(request(2).SerializeToString()):
            await client.send(stream, bytes([byte]), end=False)
        await client.send(stream, b"")
        await client.calls[stream].done.wait()
        assert client.calls[stream].status == "0"
        answer = dra_v1_pb2.NodePrepareResourcesResponse.FromString(bytes(client.calls[stream].data[5:]))
        assert sorted(answer.claims) == ["uid-00000", "uid-00001"]

        unknown = client.start("/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NoSuchMethod", frame(b""))
        await client.calls[unknown].done.wait()
        assert client.calls[unknown].status == str(Status.UNIMPLEMENTED.value)
        garbage = client.start(PREPARE, frame(b"\xff\xff\xff"))
        await client.calls[garbage].done.wait()
        assert client.calls[garbage].status == str(Status.INTERNAL.value)
        assert client.calls[garbage].message.startswith("grpc: error unmarshalling request")
    finally:
        await client.close()


async def test_after_close_calls_under_way_end_and_new_ones_are_refused(served):
    state, server, path, _ = served
    state.hang = True
    client = await RawGrpc.connect(path=str(path))
    try:
        under_way = client.start(PREPARE, frame(request(1).SerializeToString()))
        await asyncio.sleep(0.1)
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5)
        assert state.cancelled.is_set()
        refused = client.start(PREPARE, frame(request(1).SerializeToString()))
        await asyncio.wait_for(client.calls[refused].done.wait(), 5)
        assert client.calls[refused].reset and client.calls[refused].status is None
        assert not client.calls[under_way].data
    finally:
        await client.close()
