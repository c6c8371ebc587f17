"""kubelet's DRAResourceHealth service (v1, and v1alpha1 for kubelets that ask for it): a stream
of the agent's device health.

kubelet 1.37 opens the stream only for plugins that list the service in GetInfo's
``supported_versions`` and prefers v1 (k8s.io/kubernetes v1.37.1
pkg/kubelet/cm/dra/plugin/dra_plugin_manager.go ``RegisterPlugin``/``pickHealthService``, the
order of ``healthServicesSupportedByKubelet`` in dra_plugin.go); it re-opens it 5 s after it ends.
Each message is a full snapshot; kubelet stamps every reported device with the time it received
it and reads a device as Unknown once that is older than the device's
``health_check_timeout_seconds`` (pkg/kubelet/cm/dra/healthinfo.go ``updateHealthInfo``,
``getHealthInfo``). So the stream sends a snapshot when it opens, at every change of health or
inventory, and again every ``RESEND`` seconds, well inside ``TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any, Protocol

from . import health_report
from .kubeletapi import dra_health_v1_grpc, dra_health_v1_pb2, dra_health_v1alpha1_grpc, dra_health_v1alpha1_pb2

SERVICES = ["v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]
TIMEOUT = 30  # seconds kubelet trusts a report (its own default, DefaultHealthTimeout)
RESEND = 10.0  # seconds between snapshots when nothing changes

if TYPE_CHECKING:
    import structlog

    from ..health import HealthTracker


class HealthSource(Protocol):
    """What the stream reads of the node agent (``NodeAgent`` has it)."""

    node_name: str
    health: HealthTracker  # its taints say which devices are unhealthy
    log: structlog.stdlib.BoundLogger

    def published_devices(self) -> list[dict[str, Any]]:
        """The devices the agent publishes: the ones kubelet hears about."""


class HealthFeed:
    """Who wants to know that health changed: one event per open stream."""

    def __init__(self) -> None:
        self._listeners: set[asyncio.Event] = set()
        self.closed = False

    def subscribe(self) -> asyncio.Event:
        event = asyncio.Event()
        self._listeners.add(event)
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        self._listeners.discard(event)

    def changed(self) -> None:
        for event in self._listeners:
            event.set()

    async def close(self, grace: float) -> None:
        """End the open streams (the agent stops): each returns, so kubelet sees the stream end
        (and opens a new one to the next agent) instead of a stream cancelled without an end,
        which is all the server's close() can do. Waits up to ``grace`` seconds for them."""
        self.closed = True
        self.changed()
        deadline = asyncio.get_running_loop().time() + grace
        while self._listeners and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)

    @property
    def streams(self) -> int:
        return len(self._listeners)


class _HealthStream:
    """The stream, for either version: each version's class names its messages (``pb2``) and takes
    its gRPC method path from its own generated base, which must come after this class."""

    pb2: Any = dra_health_v1_pb2

    def __init__(self, agent: HealthSource, feed: HealthFeed, resend: float = RESEND, timeout: int = TIMEOUT):
        self.agent = agent
        self.feed = feed
        self.resend = resend
        self.timeout = timeout

    def _snapshot(self) -> list[health_report.DeviceReport]:
        names = [d["name"] for d in self.agent.published_devices()]
        return health_report.device_reports(names, self.agent.node_name, self.agent.health.taints)

    def _message(self, reports: list[health_report.DeviceReport]):
        now = int(time.time())
        return self.pb2.NodeWatchResourcesResponse(
            devices=[
                self.pb2.DeviceHealth(
                    device=self.pb2.DeviceIdentifier(pool_name=r.pool, device_name=r.device),
                    health=getattr(self.pb2, r.health),
                    last_updated_time=now,
                    health_check_timeout_seconds=self.timeout,
                    message=r.message,
                )
                for r in reports
            ]
        )

    async def NodeWatchResources(self, stream) -> None:
        await stream.recv_message()  # empty; kubelet sends it once
        changed = self.feed.subscribe()
        log = self.agent.log.bind(service=type(self).__name__)
        log.info("kubelet watches device health")
        last: list[health_report.DeviceReport] | None = None
        sent = 0.0
        try:
            while not self.feed.closed:
                reports = self._snapshot()
                if reports != last or time.monotonic() - sent >= self.resend:
                    if reports != last:
                        log.info(
                            "device health reported",
                            unhealthy=[r.device for r in reports if r.health != health_report.HEALTHY],
                        )
                    await stream.send_message(self._message(reports))
                    last, sent = reports, time.monotonic()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, self.resend - (time.monotonic() - sent))):
                        await changed.wait()
                changed.clear()
        finally:
            self.feed.unsubscribe(changed)
            log.info("kubelet stopped watching device health")


class _HealthV1(_HealthStream, dra_health_v1_grpc.DRAResourceHealthBase):
    pb2 = dra_health_v1_pb2


class _HealthV1alpha1(_HealthStream, dra_health_v1alpha1_grpc.DRAResourceHealthBase):
    pb2 = dra_health_v1alpha1_pb2


def services(agent: HealthSource, feed: HealthFeed, resend: float = RESEND) -> list[Any]:
    """Both versions' services, for the plugin's gRPC server (``grpc_limits.server``)."""
    return [_HealthV1(agent, feed, resend), _HealthV1alpha1(agent, feed, resend)]
