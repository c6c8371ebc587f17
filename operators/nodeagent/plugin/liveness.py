"""gRPC health checking of the kubelet plugin, behind the node agent's liveness.

A gRPC server can stop answering while the process and its asyncio tasks look fine (a socket
file deleted under it, a wedged call holding the lock): nothing in the process notices, and
kubelet's calls fail until someone restarts the Pod. So the agent calls its own sockets as kubelet
does, every ``period`` seconds: ``GetInfo`` on the registration socket and an empty
``NodePrepareResources`` on the DRA socket (what dra-example-driver's health check calls). After
``failures`` misses in a row the supervisor reports a problem: the HTTP liveness probe (kopf's
/healthz) answers 500, and the standard ``grpc.health.v1.Health`` service (grpclib's messages),
served on a TCP port for kubelet's ``grpc`` probe, answers NOT_SERVING for ``""`` and ``liveness``.
Either probe then restarts the container, and the fresh agent serves new sockets. ``readiness``
answers SERVING only once kubelet has also confirmed the plugin's registration.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from grpclib.client import Channel
from grpclib.const import Status
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from grpclib.health.v1 import health_grpc, health_pb2

from ...core.logging import get_logger
from . import grpc_limits
from .grpc_server import Server
from .kubeletapi import dra_v1_grpc, dra_v1_pb2, pluginregistration_v1_grpc, pluginregistration_v1_pb2

log = get_logger("operators.nodeagent.liveness")

SERVICES = ("", "liveness")  # "" = the server as a whole (grpc_health_probe's default)
READINESS = "readiness"  # also: kubelet has confirmed the plugin's registration
# The value type of the enum (an int NewType in grpclib's stubs), for annotations.
ServingStatus: TypeAlias = "health_pb2.HealthCheckResponse.ServingStatus.ValueType"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


async def call_sockets(registration: Path, dra: Path, timeout: float) -> str:
    """ "" when both sockets answer kubelet's calls, else what failed."""
    calls = (
        (
            registration,
            "GetInfo",
            lambda ch: pluginregistration_v1_grpc.RegistrationStub(ch).GetInfo(
                pluginregistration_v1_pb2.InfoRequest(), timeout=timeout
            ),
        ),
        (
            dra,
            "NodePrepareResources",
            lambda ch: dra_v1_grpc.DRAPluginStub(ch).NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(), timeout=timeout
            ),
        ),
    )
    for path, method, call in calls:
        channel = Channel(path=str(path))
        try:
            # The connection is part of the call: a socket file gone or nobody listening is a miss.
            async with asyncio.timeout(timeout):
                await call(channel)
        except GRPCError as e:
            return f"{method} on {path} failed: {e.status.name}: {e.message}"
        except TimeoutError:
            return f"{method} on {path} failed: DEADLINE_EXCEEDED: no answer within {timeout}s"
        except (OSError, ProtocolError, StreamTerminatedError) as e:
            return f"{method} on {path} failed: UNAVAILABLE: {type(e).__name__}: {e}"
        finally:
            channel.close()
    return ""


class SelfCheck:
    """Calls the plugin's sockets periodically; a supervisor check and the gRPC health status."""

    def __init__(
        self,
        sockets: Callable[[], tuple[Path, Path]] | None,
        other_problems: Callable[[], list[str]],
        *,
        period: float = 10.0,
        timeout: float = 5.0,
        failures: int = 3,
        registered: Callable[[], bool] = lambda: True,
    ):
        self.sockets = sockets
        self.other_problems = other_problems
        self.registered = registered
        self.period, self.timeout, self.failures = period, timeout, failures
        self.missed = 0
        self.last_error = ""
        self.servicer = _Servicer(self)
        self._server: Server | None = None

    def problem(self) -> str:
        """For the supervisor (and so for /healthz)."""
        if self.missed >= self.failures:
            return f"kubelet plugin does not answer ({self.missed} checks in a row): {self.last_error}"
        return ""

    async def check_once(self) -> str:
        if self.sockets is None:  # no kubelet plugin in this agent: nothing to call
            await self._publish()
            return ""
        error = await call_sockets(*self.sockets(), self.timeout)
        if error:
            self.missed += 1
            self.last_error = error
            log.warning("kubelet plugin self-check failed", error=error, missed=self.missed, limit=self.failures)
        elif self.missed:
            log.info("kubelet plugin answers again", missed=self.missed)
            self.missed = 0
        await self._publish()
        return error

    async def run(self) -> None:
        """Supervised: the checks, forever."""
        while True:
            await self.check_once()
            await asyncio.sleep(self.period)

    async def _publish(self) -> None:
        status = NOT_SERVING if self.other_problems() else SERVING
        for service in SERVICES:
            await self.servicer.set(service, status)
        # A DaemonSet rolling update removes the old agent once the new one is ready: ready only
        # once kubelet has registered it, or kubelet would be left without the driver between
        # the old one's deregistration and the new one's registration.
        await self.servicer.set(READINESS, status if self.registered() else NOT_SERVING)

    async def serve(self, port: int) -> int:
        """The grpc.health.v1 service on ``port`` (0: any free one); returns the port bound."""
        # One socket for IPv4 and IPv6 (kubelet probes the Pod's IP, either family), and no
        # SO_REUSEPORT: a second agent on the same port must fail, not take half of the probes.
        try:
            if socket.has_dualstack_ipv6():
                sock = socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True)
            else:
                sock = socket.create_server(("0.0.0.0", port))  # noqa: S104 - in a pod: the kubelet probes the pod IP
        except OSError as e:
            raise OSError(
                f"cannot listen on port {port} for gRPC health checking "
                f"(DRA_NODEAGENT_GRPC_HEALTH_PORT): {e.strerror}; is another process using it?"
            ) from e
        bound = sock.getsockname()[1]
        await self._publish()
        server = grpc_limits.server([self.servicer])
        await server.start(sock=sock)
        self._server = server
        log.info("gRPC health service serving", port=bound, services=list(SERVICES))
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            await self.servicer.enter_graceful_shutdown()
            self._server.close()  # cancels the open Watch streams, which have NOT_SERVING by now
            await self._server.wait_closed()
            self._server = None


class _Servicer(health_grpc.HealthBase):
    """grpc.health.v1 as grpcio's reference servicer behaves (status per service, NOT_FOUND for
    Check of an unknown one, Watch streams every change, NOT_SERVING for good once shutting
    down), but Check answers from the state at the time of the call: a self-check task that died
    (the supervisor reports it) must not leave an old SERVING behind. grpclib's own Health
    service caches its checks' results instead, hence this one."""

    def __init__(self, owner: SelfCheck):
        self._owner = owner
        self._status: dict[str, ServingStatus] = {}
        self._watchers: dict[asyncio.Event, ServingStatus | None] = {}  # a Watch stream's wake-up -> status sent
        self._shutting_down = False

    async def set(self, service: str, status: ServingStatus) -> None:
        if self._shutting_down or self._status.get(service) == status:
            return
        self._status[service] = status
        self._notify()

    async def enter_graceful_shutdown(self, grace: float = 1.0) -> None:
        """NOT_SERVING for every service from now on; Watch streams get it and end within ``grace``."""
        self._status = dict.fromkeys(self._status, NOT_SERVING)
        self._shutting_down = True
        self._notify()
        deadline = asyncio.get_running_loop().time() + grace
        while self._watchers and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    def _notify(self) -> None:
        for event in self._watchers:
            event.set()

    async def Check(self, stream) -> None:
        request = await stream.recv_message()
        await self._owner._publish()
        status = self._status.get(request.service)
        if status is None:
            raise GRPCError(Status.NOT_FOUND, f"unknown service {request.service!r}")
        await stream.send_message(health_pb2.HealthCheckResponse(status=status))

    async def Watch(self, stream) -> None:
        request = await stream.recv_message()
        changed = asyncio.Event()
        self._watchers[changed] = None
        try:
            while True:
                status = self._status.get(request.service, SERVICE_UNKNOWN)
                if status != self._watchers[changed]:
                    await stream.send_message(health_pb2.HealthCheckResponse(status=status))
                    self._watchers[changed] = status
                if self._shutting_down:
                    return  # the stream ends with its last status (the server's close() would only cut it off)
                await changed.wait()
                changed.clear()
        finally:
            del self._watchers[changed]
