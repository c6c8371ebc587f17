"""The limits of the node agent's gRPC servers: the pure pieces, then a real server (the
grpc.health.v1 service on a TCP port) fed by a raw HTTP/2 client what no well-behaved client sends."""

from __future__ import annotations

import asyncio
import socket

import pytest
from grpclib.health.v1 import health_pb2

from operators.nodeagent.plugin import grpc_limits, liveness
from tests.raw_grpc import RawGrpc, frame

CHECK, WATCH = "/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch"
RESOURCE_EXHAUSTED = "8"


def test_message_refusal_is_grpc_gos_from_one_byte_over_4_mib():
    assert grpc_limits.MAX_RECEIVE_MESSAGE == 4 * 1024 * 1024
    assert grpc_limits.message_refusal(4 * 1024 * 1024) == ""
    assert grpc_limits.message_refusal(2**31) == "grpc: received message larger than max (2147483648 vs. 4194304)"
    assert grpc_limits.message_refusal(11, limit=10) == "grpc: received message larger than max (11 vs. 10)"


def test_admission_caps_calls_and_watch_streams_and_frees_places():
    admission = grpc_limits.Admission(max_calls=3, max_watches=2)
    assert admission.enter(streaming=True) == "" and admission.enter(streaming=True) == ""
    assert "watch streams" in admission.enter(streaming=True)  # a third stream: no
    assert admission.enter(streaming=False) == ""  # a unary call still gets the place left
    assert "too many calls" in admission.enter(streaming=False)
    admission.leave(streaming=True)
    assert (admission.calls, admission.watches) == (2, 1)
    assert admission.enter(streaming=True) == ""


@pytest.fixture
async def health():
    check = liveness.SelfCheck(None, lambda: [])
    port = await check.serve(0)
    yield port
    await check.stop()


def _padded(message: bytes, size: int) -> bytes:
    """``message`` with an unknown length-delimited field (number 15) making it ``size`` bytes."""
    n = size - len(message) - 1 - 4
    assert n >= 2**21  # a 4-byte varint
    return (
        message
        + bytes([15 << 3 | 2])
        + bytes([n & 127 | 128, n >> 7 & 127 | 128, n >> 14 & 127 | 128, n >> 21])
        + bytes(n)
    )


async def test_a_2_gib_length_prefix_is_refused_before_its_body_is_read(health):
    client = await RawGrpc.connect(port=health)
    try:
        stream = client.start(CHECK, frame(b"", declared=2**31), end=False)
        # Today's grpclib would read on until 2 GiB arrived; the limit answers from the prefix.
        sent = await client.send(stream, 64 * 1024 * 1024)
        await client.calls[stream].done.wait()
        assert client.calls[stream].status == RESOURCE_EXHAUSTED, vars(client.calls[stream])
        assert client.calls[stream].message.startswith("grpc: received message larger than max (2147483648 vs.")
        # Flow control: no more than the HTTP/2 windows got out before the answer.
        assert sent <= 2 * grpc_limits.WINDOW, sent
        # The connection still serves.
        ok = client.start(CHECK, frame(health_pb2.HealthCheckRequest(service="liveness").SerializeToString()))
        await client.calls[ok].done.wait()
        assert client.calls[ok].status == "0"
    finally:
        await client.close()


async def test_a_message_of_exactly_4_mib_is_still_read(health):
    client = await RawGrpc.connect(port=health)
    try:
        body = _padded(
            health_pb2.HealthCheckRequest(service="liveness").SerializeToString(), grpc_limits.MAX_RECEIVE_MESSAGE
        )
        stream = client.start(CHECK, frame(b"", declared=len(body)), end=False)
        await client.send(stream, body)
        await client.calls[stream].done.wait()
        assert client.calls[stream].status == "0", vars(client.calls[stream])  # read, decoded, answered
    finally:
        await client.close()


async def test_watch_streams_are_capped_and_check_still_answers(health):
    clients = [await RawGrpc.connect(port=health) for _ in range(3)]
    request = frame(health_pb2.HealthCheckRequest(service="liveness").SerializeToString())
    try:
        streams = [(c, c.start(WATCH, request)) for c in clients for _ in range(30)]

        async def all_answered():
            # Clear, then look, then wait for any client that still owes an answer: a change after
            # the look sets an event being waited on. (Waiting for every open client hung when the
            # last answers all came on one connection: the others never changed again.)
            while True:
                for c in clients:
                    c.changed.clear()
                owing = {c for c, s in streams if not c.calls[s].answered}
                if not owing:
                    return
                assert not any(c.closed for c in owing), "a connection closed with calls unanswered"
                waits = [asyncio.ensure_future(c.changed.wait()) for c in owing]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for w in waits:
                    w.cancel()

        await all_answered()
        watching = [(c, s) for c, s in streams if c.calls[s].data]
        refused = [(c, s) for c, s in streams if c.calls[s].status == RESOURCE_EXHAUSTED]
        assert len(watching) == grpc_limits.MAX_WATCHES and len(refused) == len(streams) - len(watching)
        assert "watch streams" in refused[0][0].calls[refused[0][1]].message
        check = clients[0].start(CHECK, request)
        await clients[0].calls[check].done.wait()
        assert clients[0].calls[check].status == "0"
    finally:
        for c in clients:
            await c.close()


async def test_calls_past_the_servers_cap_are_refused_until_one_ends():
    """The cap on calls at once (unary ones too): calls that never send their request hold their
    places; the next is refused with RESOURCE_EXHAUSTED before its request is read, and a place
    comes back when a call ends (here: cancelled by its client)."""
    servicer = liveness.SelfCheck(None, list).servicer
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server = grpc_limits.server([servicer], max_calls=5)
    sock = socket.create_server(("127.0.0.1", 0))
    await server.start(sock=sock)
    client = await RawGrpc.connect(port=sock.getsockname()[1])
    request = frame(health_pb2.HealthCheckRequest(service="").SerializeToString())
    try:
        idle = [client.start(CHECK, end=False) for _ in range(5)]
        refused = client.start(CHECK, request)
        await client.calls[refused].done.wait()
        assert client.calls[refused].status == RESOURCE_EXHAUSTED
        assert client.calls[refused].message == "too many calls at once on this server (limit 5); retry later"
        assert not any(client.calls[s].answered for s in idle)
        client.reset(idle[0])
        # The reset reaches the server before the next call (one connection, frames in order),
        # and the cancelled call ends before the new one starts.
        again = client.start(CHECK, request)
        await client.calls[again].done.wait()
        assert client.calls[again].status == "0" and client.calls[again].data
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
