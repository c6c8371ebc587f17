"""What a caller of the node agent's gRPC servers (registration, DRA with health, grpc.health.v1)
can make the agent hold: every server is built here, on our own ``grpc_server``.

- A received message over ``MAX_RECEIVE_MESSAGE`` (4 MiB) is refused with RESOURCE_EXHAUSTED from
  its 5-byte length prefix, before its body is read, as grpc-go (kubelet's library) does
  (google.golang.org/grpc v1.83 server.go ``defaultServerMaxReceiveMessageSize``, rpc_util.go
  ``parser.recvMsg``, whose message text this repeats). grpclib's server reads whatever length the
  prefix declares and has no setting for it (vmagamedov/grpclib#195): hence ``grpc_server``.
- HTTP/2 flow-control windows of ``WINDOW`` bytes (the protocol's initial 65,535, grpc-go's too,
  internal/transport/defaults.go): what a peer may send before the agent reads it, per stream and
  per connection.
- At most ``MAX_CALLS`` calls at once per server (h2 already allows 100 streams per connection,
  but connections are not counted), of which at most ``MAX_WATCHES`` long-lived streams (Watch,
  NodeWatchResources), so streams can never take the places of kubelet's unary calls. A call over
  either cap is refused with RESOURCE_EXHAUSTED before its request is read.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from .grpc_server import Server

MAX_RECEIVE_MESSAGE = 4 * 1024 * 1024
WINDOW = 65535
MAX_CALLS = 100
MAX_WATCHES = 10


def message_refusal(declared: int, limit: int = MAX_RECEIVE_MESSAGE) -> str:
    """Why a message declaring ``declared`` bytes is refused ("" when it is not): grpc-go's text."""
    return f"grpc: received message larger than max ({declared} vs. {limit})" if declared > limit else ""


class Admission:
    """The calls under way on one server (pure bookkeeping): ``enter`` says why a new one is
    refused, or "" and counts it; ``leave`` uncounts it."""

    def __init__(self, max_calls: int = MAX_CALLS, max_watches: int = MAX_WATCHES):
        self.max_calls, self.max_watches = max_calls, max_watches
        self.calls = self.watches = 0

    def enter(self, streaming: bool) -> str:
        if self.calls >= self.max_calls:
            return f"too many calls at once on this server (limit {self.max_calls}); retry later"
        if streaming and self.watches >= self.max_watches:
            return f"too many open watch streams on this server (limit {self.max_watches}); retry later"
        self.calls += 1
        self.watches += streaming
        return ""

    def leave(self, streaming: bool) -> None:
        self.calls -= 1
        self.watches -= streaming


@dataclass(frozen=True)
class Limits:
    """One server's limits, as ``grpc_server`` applies them."""

    max_message: int = MAX_RECEIVE_MESSAGE
    max_calls: int = MAX_CALLS
    max_watches: int = MAX_WATCHES
    window: int = WINDOW

    def message_refusal(self, declared: int) -> str:
        return message_refusal(declared, self.max_message)

    def admission(self) -> Admission:
        return Admission(self.max_calls, self.max_watches)


def server(
    handlers: Collection[Any],
    *,
    max_message: int = MAX_RECEIVE_MESSAGE,
    max_calls: int = MAX_CALLS,
    max_watches: int = MAX_WATCHES,
) -> Server:
    """A gRPC server for ``handlers`` (grpclib-generated service bases) with the limits above."""
    return Server(handlers, Limits(max_message, max_calls, max_watches, WINDOW))
