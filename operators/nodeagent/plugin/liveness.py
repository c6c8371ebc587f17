"""gRPC health checking of the kubelet plugin, behind the node agent's liveness.

A gRPC server can stop answering while the process and its asyncio tasks look fine (a socket
file deleted under it, a wedged call holding the lock): nothing in the process notices, and
kubelet's calls fail until someone restarts the Pod. So the agent calls its own sockets as kubelet
does, every ``period`` seconds: ``GetInfo`` on the registration socket and an empty
``NodePrepareResources`` on the DRA socket (what dra-example-driver's health check calls). After
``failures`` misses in a row the supervisor reports a problem: the HTTP liveness probe (kopf's
/healthz) answers 500, and the standard ``grpc.health.v1.Health`` service (grpcio-health-checking),
served on a TCP port for kubelet's ``grpc`` probe, answers NOT_SERVING for ``""`` and ``liveness``.
Either probe then restarts the container, and the fresh agent serves new sockets. ``readiness``
answers SERVING only once kubelet has also confirmed the plugin's registration.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from .kubeletapi import dra_v1_pb2, dra_v1_pb2_grpc, pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc

log = structlog.stdlib.get_logger("operators.nodeagent.liveness")

SERVICES = ("", "liveness")  # "" = the server as a whole (grpc_health_probe's default)
READINESS = "readiness"  # also: kubelet has confirmed the plugin's registration
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def call_sockets(registration: Path, dra: Path, timeout: float) -> str:
    """"" when both sockets answer kubelet's calls, else what failed."""
    calls = (
        (registration, "GetInfo", lambda ch: pluginregistration_v1_pb2_grpc.RegistrationStub(ch).GetInfo(
            pluginregistration_v1_pb2.InfoRequest(), timeout=timeout)),
        (dra, "NodePrepareResources", lambda ch: dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(), timeout=timeout)),
    )
    for path, method, call in calls:
        try:
            async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
                await call(channel)
        except grpc.aio.AioRpcError as e:
            return f"{method} on {path} failed: {e.code().name}: {e.details()}"
    return ""


class SelfCheck:
    """Calls the plugin's sockets periodically; a supervisor check and the gRPC health status."""

    def __init__(self, sockets: Callable[[], tuple[Path, Path]] | None, other_problems: Callable[[], list[str]], *,
                 period: float = 10.0, timeout: float = 5.0, failures: int = 3,
                 registered: Callable[[], bool] = lambda: True):
        self.sockets = sockets
        self.other_problems = other_problems
        self.registered = registered
        self.period, self.timeout, self.failures = period, timeout, failures
        self.missed = 0
        self.last_error = ""
        self.servicer = _Servicer(self)
        self._server: grpc.aio.Server | None = None

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
        # No SO_REUSEPORT (grpc's default): a second agent on the same port must fail, not take
        # half of the probes.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self.servicer, server)
        try:
            bound = server.add_insecure_port(f"[::]:{port}")
        except RuntimeError:  # grpcio raises where older versions returned 0
            bound = 0
        if not bound:
            raise OSError(f"cannot listen on port {port} for gRPC health checking "
                          "(DRA_NODEAGENT_GRPC_HEALTH_PORT); is another process using it?")
        await self._publish()
        await server.start()
        self._server = server
        log.info("gRPC health service serving", port=bound, services=list(SERVICES))
        return bound

    async def stop(self) -> None:
        if self._server is not None:
            await self.servicer.enter_graceful_shutdown()
            await self._server.stop(grace=1)
            self._server = None


class _Servicer(health.aio.HealthServicer):
    """Answers from the state at the time of the call: a self-check task that died (the
    supervisor reports it) must not leave an old SERVING behind."""

    def __init__(self, owner: SelfCheck):
        super().__init__()
        self._owner = owner

    async def Check(self, request, context):
        await self._owner._publish()
        return await super().Check(request, context)
