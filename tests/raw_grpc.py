"""A gRPC client on raw HTTP/2 (the h2 library), for what well-behaved clients never send: a
length prefix far larger than the message that follows, a thousand streams at once. It keeps to
HTTP/2 flow control, as a real attacker's client must (the server would close the connection)."""

from __future__ import annotations

import asyncio
import struct

import h2.config
import h2.connection
import h2.events
import h2.exceptions


def frame(body: bytes, declared: int | None = None) -> bytes:
    """A gRPC message: uncompressed, with a length prefix of ``declared`` (default: the body's)."""
    return struct.pack(">?I", False, len(body) if declared is None else declared) + body


class Call:
    def __init__(self) -> None:
        self.data = bytearray()  # the response's gRPC messages, prefixes included
        self.status: str | None = None  # grpc-status of the trailers (or of a trailers-only answer)
        self.message = ""
        self.reset = False
        self.done = asyncio.Event()  # trailers or a reset arrived

    @property
    def answered(self) -> bool:
        return bool(self.data) or self.done.is_set()


class RawGrpc:
    """One HTTP/2 connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.calls: dict[int, Call] = {}
        self.changed = asyncio.Event()  # anything arrived (window updates included)
        self.closed = False
        self.h2.initiate_connection()
        self._flush()
        self._reading = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, host: str = "127.0.0.1", port: int | None = None, path: str | None = None) -> RawGrpc:
        if path is not None:
            reader, writer = await asyncio.open_unix_connection(path)
        else:
            reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65536):
                for event in self.h2.receive_data(data):
                    self._event(event)
                self._flush()
                self.changed.set()
        except (ConnectionError, h2.exceptions.ProtocolError):
            pass
        finally:
            self.closed = True
            for call in self.calls.values():
                call.done.set()
            self.changed.set()

    def _event(self, event: h2.events.Event) -> None:
        call = self.calls.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)) and call is not None:
            headers = dict(event.headers)
            if "grpc-status" in headers:
                call.status, call.message = headers["grpc-status"], headers.get("grpc-message", "")
                call.done.set()
        elif isinstance(event, h2.events.DataReceived):
            if call is not None:
                call.data += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamReset) and call is not None:
            call.reset = True
            call.done.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closed = True

    def start(self, method: str, message: bytes = b"", *, end: bool = True) -> int:
        """Open a call of ``method`` (``/package.Service/Method``) sending ``message`` (a whole gRPC
        message, see ``frame``; b"" sends nothing yet); its stream id."""
        stream_id = self.h2.get_next_available_stream_id()
        self.h2.send_headers(
            stream_id,
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", "localhost"),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            ],
            end_stream=end and not message,
        )
        self.calls[stream_id] = Call()
        if message:
            self.h2.send_data(stream_id, message, end_stream=end)  # small: within the initial window
        self._flush()
        return stream_id

    async def send(self, stream_id: int, data: bytes | int, *, end: bool = True) -> int:
        """Send ``data`` (bytes, or that many zero bytes) on the stream as fast as flow control
        lets, stopping early once the server answers the call; then end the stream (``end``).
        The bytes sent."""
        call, sent = self.calls[stream_id], 0
        total = data if isinstance(data, int) else len(data)
        zeros = bytes(self.h2.max_outbound_frame_size)
        while sent < total and not call.answered and not self.closed:
            size = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size, total - sent)
            if size <= 0:
                self.changed.clear()
                await self.changed.wait()
                continue
            try:
                self.h2.send_data(stream_id, zeros[:size] if isinstance(data, int) else data[sent : sent + size])
            except h2.exceptions.StreamClosedError:
                break
            sent += size
            self._flush()
            await self.writer.drain()
        if end and not call.done.is_set() and not self.closed:
            try:
                self.h2.end_stream(stream_id)
                self._flush()
            except h2.exceptions.StreamClosedError:
                pass
        return sent

    def reset(self, stream_id: int) -> None:
        """Cancel the call (RST_STREAM CANCEL, as a client whose deadline passed)."""
        self.h2.reset_stream(stream_id, error_code=8)
        self._flush()

    async def close(self) -> None:
        self._reading.cancel()
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
