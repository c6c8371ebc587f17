"""The kubelet plugin's transport: its Unix sockets, registration with kubelet and the gRPC
servers of the DRA service (v1 and v1beta1) and the device health stream.

kubelet finds ``<registry dir>/<driver>-reg.sock``, asks GetInfo, then calls
NodePrepareResources/NodeUnprepareResources on ``<plugins dir>/<driver>/dra.sock``. What those
calls do to the node is ``DeviceState``'s (``state``); the servicers (``servicers``) only convert
messages; this module keeps the sockets served.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ...core.logging import get_logger
from . import coexistence, grpc_limits, health_service, servicers, sockets
from .state import Agent, DeviceState

if TYPE_CHECKING:
    from ...core.api.kube import Kube
    from ...core.machinery.supervisor import Supervisor
    from .grpc_server import Server

log = get_logger("operators.nodeagent.plugin")

MAX_SOCKET_PATH = sockets.MAX_SOCKET_PATH  # sun_path is 108 bytes with the terminating NUL
REGISTRATION_CHECK = 5.0  # seconds between checks that our registration socket is still there
STOP_GRACE = 2.0  # seconds a call under way may take to finish when the agent stops
CLOSE_TIMEOUT = 5.0  # seconds the cancelled calls may take to unwind before the stop goes on


class PluginAgent(Agent, health_service.HealthSource, Protocol):
    """What the plugin needs of the node agent (``NodeAgent`` has all of it): what the prepared
    state and the health stream need, and where to hear that device health changed."""

    health_listeners: list[Callable[[], None]]


class KubeletPlugin:
    def __init__(
        self,
        agent: PluginAgent,
        kube: Kube,
        *,
        registry_dir: str,
        plugins_dir: str,
        cdi_root: str,
        toolkit_cdi_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi"),
        nvidia_runtime: bool = False,
        pod_uid: str = "",
        device_metadata: tuple[str, ...] = (),
    ):
        self.agent = agent
        self.driver = agent.driver
        self.node = agent.node_name
        self.data_dir = Path(plugins_dir) / self.driver
        self.state = DeviceState(
            agent,
            kube,
            data_dir=self.data_dir,
            cdi_root=Path(cdi_root),
            toolkit_cdi_dirs=toolkit_cdi_dirs,
            nvidia_runtime=nvidia_runtime,
            device_metadata=device_metadata,
        )
        # Unique per instance with a Pod UID, so two instances can run during a rolling update.
        self.pod_uid = pod_uid
        self.dra_socket = self.data_dir / sockets.dra_name(str(self.data_dir), pod_uid)
        self.registration_socket = Path(registry_dir) / sockets.registration_name(registry_dir, self.driver, pod_uid)
        self.registration: tuple[bool, str] | None = None  # what kubelet last said of our registration
        self._unconfirmed_logged = False
        self._servers: list[Server] = []
        self.health_feed = health_service.HealthFeed()
        self.log = log.bind(driver=self.driver, node=self.node)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, supervisor: Supervisor | None = None) -> None:
        self._check_socket_paths()
        # Never take over another driver's directory (NVIDIA's uses the same name by default).
        coexistence.check(self.driver, self.state.checkpoint_path, [self.dra_socket, self.registration_socket])
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_sockets()
        await self.state.recover()
        # The DRA service first: kubelet may call it right after registration.
        dra = grpc_limits.server(
            [
                servicers.DraV1(self.state),
                servicers.DraV1beta1(self.state),
                *health_service.services(self.agent, self.health_feed),
            ]
        )
        self.agent.health_listeners.append(self.health_feed.changed)
        await self._listen(dra, self.dra_socket)
        await self._serve_registration()
        self.log.info(
            "kubelet plugin serving",
            registration=str(self.registration_socket),
            endpoint=str(self.dra_socket),
            prepared_claims=len(self.state.prepared),
        )
        if supervisor is not None:
            # A gRPC server that ends by itself is not restarted in place: the process exits and
            # kubelet re-registers the fresh one.
            supervisor.spawn(
                "kubelet-plugin-dra", functools.partial(self._serve_until_stopped, self._servers[0]), restart=False
            )
            supervisor.spawn("kubelet-plugin-registration", self._keep_registered)
            supervisor.spawn("kubelet-plugin-cdi-specs", self.state.keep_specs)

    def _check_socket_paths(self) -> None:
        for path in (self.dra_socket, self.registration_socket):
            if len(str(path)) > MAX_SOCKET_PATH:
                raise ValueError(
                    f"socket path {path} is longer than {MAX_SOCKET_PATH} characters; "
                    "choose shorter kubelet directories or a shorter driver name"
                )

    async def stop(self) -> None:
        """Registration first, so kubelet stops sending calls before the service goes. Each
        socket is removed as soon as its server stops listening, as the Go helper's listener
        removes it, and whatever fails or hangs after that: a socket left behind is a registration
        kubelet keeps seeing after the agent is gone (once in a rolling update's test run)."""
        try:
            await self.health_feed.close(grace=STOP_GRACE)
            for server in reversed(self._servers):
                await self._close(server, grace=STOP_GRACE)
        finally:
            self._servers = []
            for path in (self.registration_socket, self.dra_socket):
                path.unlink(missing_ok=True)

    # -- registration ------------------------------------------------------------------------

    async def _serve_registration(self) -> None:
        registration = servicers.Registration(self.driver, str(self.dra_socket), self._registration_status)
        await self._listen(grpc_limits.server([registration]), self.registration_socket)

    def registered(self) -> bool:
        """Whether kubelet has this instance registered now, for readiness (a rolling update
        removes the old agent once the new one is ready). kubelet's word alone is not enough:
        when its NotifyRegistrationStatus call times out (5 s, pluginmanager operation_generator.go
        ``notifyTimeoutDuration``) kubelet drops the registration it has just made, and tries
        again later, while a busy agent may still read the late "registered". kubelet keeps a
        gRPC connection to the DRA socket of every plugin it has registered (dra_plugin_manager.go
        ``add`` connects at once and reconnects on every ``ConnEnd``; ``remove`` closes it), so
        registered means both: kubelet said so, and a client other than this process (whose own
        self-check also calls the socket) holds a connection to the DRA socket."""
        if not (self.registration and self.registration[0]) or not self._servers:
            return False
        kubelet = [pid for pid in self._servers[0].clients() if pid != os.getpid()]
        if not kubelet and not self._unconfirmed_logged:
            self._unconfirmed_logged = True
            self.log.warning(
                "kubelet said the plugin is registered but holds no connection to its DRA socket; "
                "not ready until kubelet registers it again",
                endpoint=str(self.dra_socket),
            )
        elif kubelet:
            self._unconfirmed_logged = False
        return bool(kubelet)

    def _registration_status(self, registered: bool, error: str) -> None:
        self.registration = (registered, error)
        if registered:
            self.log.info("registered with kubelet")
        else:
            self.log.error("kubelet refused the registration", error=error)

    async def _keep_registered(self) -> None:
        """A registration socket deleted by someone (a cleanup, an operator's mistake) deregisters
        the plugin in kubelet: serve it again under the same name, and kubelet registers it anew."""
        while True:
            await asyncio.sleep(REGISTRATION_CHECK)
            if len(self._servers) < 2:
                continue
            if self.registration_socket.is_socket():
                continue
            self.log.warning("registration socket gone, serving it again", socket=str(self.registration_socket))
            await self._close(self._servers.pop(), grace=0)
            await self._serve_registration()

    # -- sockets -----------------------------------------------------------------------------

    def _remove_stale_sockets(self) -> None:
        """Sockets of earlier instances of this driver that nobody serves any more (a killed Pod
        leaves them; kubelet would keep dialling them, kubernetes#132660)."""
        candidates = [(self.registration_socket.parent, "registration"), (self.data_dir, "dra")]
        for directory, kind in candidates:
            for path in sorted(directory.iterdir()) if directory.is_dir() else []:
                if not sockets.is_ours(path.name, self.driver, kind) or not path.is_socket():
                    continue
                if coexistence.socket_answers(path):
                    continue  # another instance's (rolling update), alive
                path.unlink(missing_ok=True)
                self.log.info("removed a stale socket", socket=str(path))

    async def _serve_until_stopped(self, server: Server) -> None:
        # Shielded: the supervisor cancels its tasks before kopf's cleanup calls stop(), which
        # closes the server; cancelling the wait must not cancel the server's own closing.
        await asyncio.shield(server.wait_closed())
        if self._servers:
            raise RuntimeError("gRPC server terminated")

    async def _listen(self, server: Server, path: Path) -> None:
        path.unlink(missing_ok=True)  # a stale socket of our own from a previous run
        await server.start(path=str(path))
        self._servers.append(server)

    async def _close(self, server: Server, grace: float) -> None:
        """Give a prepare or unprepare under way ``grace`` seconds to finish (it holds the state's
        call lock), then close: the server cancels the calls still open (health streams)."""
        if grace and not await self.state.idle(grace):
            self.log.warning("a kubelet call did not finish before the stop", grace=grace)
        server.close()
        for path in (self.registration_socket, self.dra_socket):
            if server.path == str(path):
                path.unlink(missing_ok=True)
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await server.wait_closed()
        except TimeoutError:
            self.log.warning("gRPC calls still unwinding after the stop", calls=len(server.tasks))
