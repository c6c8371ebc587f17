"""The gRPC server of the node agent's three servers (registration, DRA with health, grpc.health.v1):
ours, on h2's public API.

Why not grpclib's ``Server``: it reads whatever length a message's 5-byte prefix declares, into
memory, and has no setting for a limit (vmagamedov/grpclib#195); the prefix is visible only
through a private attribute of its stream. Serving HTTP/2 with h2 (sans-I/O, the library under
grpclib too) and framing the messages here lets ``grpc_limits`` refuse a message from its prefix,
before its body is read, as grpc-go (kubelet's library) does. The services stay grpclib's
generated bases (their public ``__mapping__``): a servicer gets a ``Call`` with the stream
methods it uses (``recv_message``, ``send_message``, ``send_trailing_metadata``) and raises
grpclib's ``GRPCError`` to answer with a status, as before; clients notice nothing.

What a call gets, as from grpc-go's server (google.golang.org/grpc v1.83 internal/transport/
http2_server.go):
- Request bytes are acknowledged (HTTP/2 flow control) only when the servicer's read needs more,
  so a client is never more than the stream window ahead of what was read.
- The status goes in trailers (alone, "trailers-only", when nothing else was sent), then
  RST_STREAM NO_ERROR when the client has not finished sending (``finishStream``).
- ``grpc-timeout`` cancels the servicer and answers DEADLINE_EXCEEDED; a client's RST_STREAM or a
  closed connection cancels it and answers nothing.
- An exception in a servicer answers UNKNOWN "Internal Server Error" (grpclib's text) and is logged.
- ``close()`` stops listening and cancels the calls under way; a new call on a connection still
  open is refused (RST_STREAM REFUSED_STREAM: clients retry elsewhere). The connections are left
  for their clients to close, as grpclib's server left them: a GOAWAY or a closed socket would make
  grpclib's client drop an answer it has received but not read yet (it fails every stream of a
  connection that ends).
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
from collections.abc import Collection
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from google.protobuf.message import DecodeError
from grpclib.const import Handler, Status
from grpclib.exceptions import GRPCError

from ...core.logging import get_logger

if TYPE_CHECKING:
    from .grpc_limits import Admission, Limits

log = get_logger("operators.nodeagent.grpc")

CONTENT_TYPE = "application/grpc+proto"
PREFIX = struct.Struct(">?I")  # each message: compressed flag, length
DEFAULT_WINDOW = 65535  # HTTP/2's initial window, per stream and per connection
_TIMEOUT = re.compile(r"(\d{1,8})([HMSmun])")
_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
# grpc-message is percent-encoded: everything outside printable ASCII, and "%" itself.
_MESSAGE_SAFE = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) != "%")


class StreamGone(Exception):
    """The client reset the stream or the connection went: nothing more can be sent on it."""


# -- pure decisions ------------------------------------------------------------------------------


def timeout_seconds(value: str) -> float:
    """A ``grpc-timeout`` value (1 to 8 digits and a unit) in seconds; ValueError if malformed."""
    match = _TIMEOUT.fullmatch(value)
    if match is None:
        raise ValueError(f"malformed grpc-timeout {value!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def encode_status_message(text: str) -> str:
    return quote(text, safe=_MESSAGE_SAFE, encoding="utf-8")


def request_refusal(headers: dict[str, str], mapping: dict[str, Handler]) -> tuple[int, Status, str] | None:
    """Why a request cannot start a call, as (HTTP status, gRPC status, message), or None."""
    if headers.get(":method") != "POST":
        return 405, Status.UNIMPLEMENTED, f"method {headers.get(':method')} is not POST"
    content_type = headers.get("content-type", "")
    base, _, subtype = content_type.partition("+")
    if base.split(";", 1)[0].strip() != "application/grpc" or subtype not in ("", "proto"):
        return 415, Status.UNKNOWN, f"unacceptable content-type {content_type!r}"
    if headers.get(":path") not in mapping:
        return 200, Status.UNIMPLEMENTED, f"unknown method {headers.get(':path')}"
    if "grpc-timeout" in headers:
        try:
            timeout_seconds(headers["grpc-timeout"])
        except ValueError as e:
            return 200, Status.INTERNAL, str(e)
    return None


def status_headers(status: Status, message: str, http_status: int | None = None) -> list[tuple[str, str]]:
    """The trailers of a call; with an ``http_status`` the response headers come first (a
    "trailers-only" answer: nothing else was sent)."""
    headers = [(":status", str(http_status)), ("content-type", CONTENT_TYPE)] if http_status else []
    headers.append(("grpc-status", str(status.value)))
    if message:
        headers.append(("grpc-message", encode_status_message(message)))
    return headers


# -- one call ------------------------------------------------------------------------------------


class _Inbox:
    """A call's request bytes as they arrive. What arrived is acknowledged to the client (the
    stream and connection windows open again) only when a read needs more than it holds."""

    def __init__(self, acknowledge: Any):
        self._acknowledge = acknowledge  # (byte count) -> None
        self._data = bytearray()
        self._unacknowledged = 0
        self._arrived = asyncio.Event()
        self.ended = False  # the client finished sending (END_STREAM)

    def put(self, data: bytes, flow_controlled: int) -> None:
        self._data += data
        self._unacknowledged += flow_controlled
        self._arrived.set()

    def end(self) -> None:
        self.ended = True
        self._arrived.set()

    async def read(self, size: int) -> bytes:
        """``size`` bytes, or fewer where the request ended (b"": it ended before them)."""
        while len(self._data) < size and not self.ended:
            self.release()
            self._arrived.clear()
            await self._arrived.wait()
        chunk = bytes(self._data[:size])
        del self._data[:size]
        return chunk

    def release(self) -> None:
        """Acknowledge everything that arrived so far."""
        count, self._unacknowledged = self._unacknowledged, 0
        if count:
            self._acknowledge(count)


class Call:
    """What a servicer's method gets: grpclib's stream methods on one HTTP/2 stream."""

    def __init__(self, connection: _Connection, stream_id: int, method: Handler, limits: Limits):
        self.connection = connection
        self.stream_id = stream_id
        self.method = method
        self._limits = limits
        self.inbox = _Inbox(lambda count: connection.acknowledge(stream_id, count))
        self._headers_sent = False
        self.messages_sent = 0
        self.finished = False  # the status was sent

    async def recv_message(self) -> Any:
        """The next request message, or None when the client has finished sending."""
        prefix = await self.inbox.read(PREFIX.size)
        if not prefix:
            return None
        if len(prefix) < PREFIX.size:
            raise GRPCError(Status.INTERNAL, "grpc: the request ended inside a message prefix")
        compressed, length = PREFIX.unpack(prefix)
        if compressed:
            raise GRPCError(Status.UNIMPLEMENTED, "grpc: compressed messages are not supported")
        if refusal := self._limits.message_refusal(length):
            raise GRPCError(Status.RESOURCE_EXHAUSTED, refusal)
        body = await self.inbox.read(length)
        if len(body) < length:
            raise GRPCError(
                Status.INTERNAL, f"grpc: the request ended inside a message ({len(body)} of {length} bytes)"
            )
        try:
            return self.method.request_type.FromString(body)
        except DecodeError as e:
            raise GRPCError(Status.INTERNAL, f"grpc: error unmarshalling request: {e}") from None

    async def send_message(self, message: Any) -> None:
        if not isinstance(message, self.method.reply_type):
            raise TypeError(f"{type(message).__name__} is not a {self.method.reply_type.__name__}")
        if self.finished or (self.messages_sent and not self.method.cardinality.server_streaming):
            raise RuntimeError("this call cannot send another message")
        if not self._headers_sent:
            self.connection.send_headers(self.stream_id, [(":status", "200"), ("content-type", CONTENT_TYPE)])
            self._headers_sent = True
        body = message.SerializeToString()
        await self.connection.send_data(self.stream_id, PREFIX.pack(False, len(body)) + body)
        self.messages_sent += 1

    async def send_trailing_metadata(self, *, status: Status = Status.OK, status_message: str | None = None) -> None:
        """End the call with ``status`` (grpclib's name for it)."""
        self.finish(status, status_message or "")

    def finish(self, status: Status, message: str = "") -> None:
        if self.finished:
            return
        self.finished = True
        self.connection.send_status(
            self.stream_id, status_headers(status, message, http_status=None if self._headers_sent else 200)
        )


class _Running(NamedTuple):
    call: Call
    task: asyncio.Task
    streaming: bool  # counted as a watch stream


# -- one connection ------------------------------------------------------------------------------


class _Connection(asyncio.Protocol):
    """One client's HTTP/2 connection: h2's events to calls, calls' answers to h2."""

    def __init__(self, server: Server):
        self._server = server
        self._h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self._transport: asyncio.Transport | None = None
        self._calls: dict[int, _Running] = {}  # by stream
        self._writable = asyncio.Event()
        self._writable.set()
        self._window = asyncio.Event()  # replaced after each wake-up: senders wait for more window
        self.closed = False
        self.peer_pid: int | None = None  # the client's process on a Unix socket (0: outside our PID namespace)

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family == socket.AF_UNIX:
            credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            self.peer_pid = struct.unpack("3i", credentials)[0]
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # answers are small: no Nagle delay
        self._h2.initiate_connection()
        window = self._server.limits.window
        if window != DEFAULT_WINDOW:
            self._h2.increment_flow_control_window(window - DEFAULT_WINDOW)
            self._h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self._server.connections.add(self)
        self._flush()

    def data_received(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as e:
            log.info("closing a gRPC connection that broke HTTP/2", error=f"{type(e).__name__}: {e}")
            self._flush()  # h2's GOAWAY
            if self._transport is not None:  # always: data comes after connection_made
                self._transport.close()
            return
        for event in events:
            self._handle(event)
        self._flush()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for stream_id in list(self._calls):
            self._cancel(stream_id)
        self._server.connections.discard(self)
        self._writable.set()
        self._wake_senders()

    def cancel_calls(self) -> None:
        """The server stops: the calls under way end now, unanswered."""
        for stream_id in list(self._calls):
            self._cancel(stream_id)
        self._flush()

    # h2's side

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self._start(event.stream_id, event.headers)
        elif isinstance(event, h2.events.DataReceived):
            self._received(event.stream_id, event.data, event.flow_controlled_length)
        elif isinstance(event, h2.events.StreamEnded):
            if event.stream_id in self._calls:
                self._calls[event.stream_id].call.inbox.end()
        elif isinstance(event, h2.events.StreamReset):
            self._cancel(event.stream_id)
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self._wake_senders()
        elif isinstance(event, h2.events.ConnectionTerminated):
            if self._transport is not None:  # always: events come after connection_made
                self._transport.close()  # the client's GOAWAY: connection_lost cancels what is left

    def _start(self, stream_id: int, raw_headers: list[tuple[bytes, bytes]]) -> None:
        if self._server.closing:
            self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
            return
        headers = {bytes(k).decode("latin-1"): bytes(v).decode("latin-1") for k, v in raw_headers}
        if refusal := request_refusal(headers, self._server.mapping):
            http_status, status, message = refusal
            self._refuse(stream_id, status, message, http_status)
            return
        method = self._server.mapping[headers[":path"]]
        streaming = method.cardinality.server_streaming
        # Before any of the request is read, so a call over the caps costs nothing more.
        if rejection := self._server.admission.enter(streaming):
            self._refuse(stream_id, Status.RESOURCE_EXHAUSTED, rejection)
            return
        call = Call(self, stream_id, method, self._server.limits)
        timeout = timeout_seconds(headers["grpc-timeout"]) if "grpc-timeout" in headers else None
        task = asyncio.get_running_loop().create_task(
            self._server.serve(call, method, timeout), name=f"grpc {headers[':path']}"
        )
        self._calls[stream_id] = _Running(call, task, streaming)
        self._server.tasks.add(task)
        task.add_done_callback(self._server.tasks.discard)

    def _refuse(self, stream_id: int, status: Status, message: str, http_status: int = 200) -> None:
        self.send_status(stream_id, status_headers(status, message, http_status))

    def _received(self, stream_id: int, data: bytes, flow_controlled: int) -> None:
        running = self._calls.get(stream_id)
        if running is not None:
            running.call.inbox.put(data, flow_controlled)
        elif flow_controlled:  # a stream answered already: its bytes count against the connection only
            self.acknowledge(stream_id, flow_controlled)

    def _cancel(self, stream_id: int) -> None:
        """The call ends now (its task may still be unwinding): its places and window are free."""
        running = self._calls.pop(stream_id, None)
        if running is not None:
            self._forget(running)
            running.task.cancel()

    def ended(self, call: Call) -> None:
        """The call's task is done (unless cancelled first, the call is still counted)."""
        running = self._calls.get(call.stream_id)
        if running is not None and running.call is call:
            del self._calls[call.stream_id]
            self._forget(running)
        self._flush()

    def _forget(self, running: _Running) -> None:
        self._server.admission.leave(running.streaming)
        running.call.inbox.release()  # what it left unread counts against the connection's window

    # for calls

    def acknowledge(self, stream_id: int, count: int) -> None:
        if not self.closed:
            self._h2.acknowledge_received_data(count, stream_id)
            self._flush()

    def send_headers(self, stream_id: int, headers: list[tuple[str, str]]) -> None:
        if self.closed:
            raise StreamGone()
        try:
            self._h2.send_headers(stream_id, headers)
        except h2.exceptions.ProtocolError:
            raise StreamGone() from None
        self._flush()

    async def send_data(self, stream_id: int, data: bytes) -> None:
        """All of ``data``, as the client's window and the transport's buffer allow."""
        view = memoryview(data)
        while view:
            await self._writable.wait()
            window = self._window
            if self.closed or stream_id not in self._calls:
                raise StreamGone()
            try:
                size = min(len(view), self._h2.local_flow_control_window(stream_id), self._h2.max_outbound_frame_size)
                if size > 0:
                    self._h2.send_data(stream_id, bytes(view[:size]))
            except h2.exceptions.ProtocolError:
                raise StreamGone() from None
            if size <= 0:
                await window.wait()
                continue
            view = view[size:]
            self._flush()

    def send_status(self, stream_id: int, headers: list[tuple[str, str]]) -> None:
        """The call's last headers, then RST_STREAM NO_ERROR where the client is still sending
        (h2 refuses the reset of a stream both sides ended: nothing was left to stop)."""
        if self.closed:
            return
        try:
            self._h2.send_headers(stream_id, headers, end_stream=True)
        except h2.exceptions.ProtocolError:
            return  # reset by the client meanwhile
        try:
            self._h2.reset_stream(stream_id)
        except h2.exceptions.StreamClosedError:
            pass
        self._flush()

    def _wake_senders(self) -> None:
        self._window.set()
        self._window = asyncio.Event()

    def _flush(self) -> None:
        data = self._h2.data_to_send()
        if data and not self.closed and self._transport is not None:
            self._transport.write(data)


# -- the server ----------------------------------------------------------------------------------


class Server:
    """gRPC on a Unix socket (``path``) or a listening socket (``sock``), with ``limits``."""

    def __init__(self, handlers: Collection[Any], limits: Limits):
        self.mapping: dict[str, Handler] = {}
        for handler in handlers:
            self.mapping.update(handler.__mapping__())
        self.limits = limits
        self.admission: Admission = limits.admission()
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task] = set()
        self._listener: asyncio.AbstractServer | None = None
        self._closed = asyncio.Event()
        self.path: str | None = None  # the Unix socket it listens on, if any

    def clients(self) -> list[int | None]:
        """The process of each open connection's client (``_Connection.peer_pid``)."""
        return [c.peer_pid for c in self.connections if not c.closed]

    @property
    def closing(self) -> bool:
        return self._closed.is_set()

    async def start(self, *, path: str | None = None, sock: socket.socket | None = None) -> None:
        loop = asyncio.get_running_loop()
        if path is not None:
            self.path = path
            self._listener = await loop.create_unix_server(lambda: _Connection(self), path)
        elif sock is not None:
            self._listener = await loop.create_server(lambda: _Connection(self), sock=sock)
        else:
            raise ValueError("Server.start needs a path or a socket")

    def close(self) -> None:
        if self._listener is None:
            raise RuntimeError("the gRPC server was not started")
        self._closed.set()
        self._listener.close()
        for connection in list(self.connections):
            connection.cancel_calls()

    async def wait_closed(self) -> None:
        """Until ``close()`` and every call's task is done."""
        await self._closed.wait()
        if self.tasks:
            await asyncio.wait(set(self.tasks))

    async def serve(self, call: Call, method: Handler, timeout: float | None) -> None:
        """One call: the servicer's method, then its status."""
        try:
            status = await self._run(call, method, timeout)
            if status is not None:
                call.finish(*status)
        finally:
            call.connection.ended(call)

    async def _run(self, call: Call, method: Handler, timeout: float | None) -> tuple[Status, str] | None:
        """The status the call ends with (None: the client is gone, nothing to answer)."""
        deadline = asyncio.timeout(timeout)
        try:
            async with deadline:
                await method.func(call)
        except StreamGone:
            return None
        except GRPCError as e:
            return e.status, e.message or ""
        except Exception as e:  # a servicer's bug answers UNKNOWN, as grpclib did
            if isinstance(e, TimeoutError) and deadline.expired():
                return Status.DEADLINE_EXCEEDED, "Deadline Exceeded"
            log.exception("gRPC method failed", method=method.func.__qualname__)
            return Status.UNKNOWN, "Internal Server Error"
        if not (call.messages_sent or call.finished or method.cardinality.server_streaming):
            log.error("gRPC method returned without an answer", method=method.func.__qualname__)
            return Status.UNKNOWN, "Internal Server Error"
        return Status.OK, ""
