"""The kubelet plugin: registration and the DRA service (v1 and v1beta1) on Unix sockets.

kubelet finds ``<registry dir>/<driver>-reg.sock``, asks GetInfo, then calls
NodePrepareResources/NodeUnprepareResources on ``<plugins dir>/<driver>/dra.sock``. Calls are
served one at a time (as Go's helper does); state lives in the checkpoint and the CDI specs, so a
restarted agent carries on where the last one stopped.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Server

from ...core.events import WARNING, EventRecorder
from ...core.kube import ApiError, ConnectionLost, Kube
from ...core.resources import RESOURCE_CLAIMS
from ..backends.base import BackendError
from . import cdi, checkpoint, coexistence, device_status, grpc_limits, health_service, sockets, toolkit
from .checkpoint import PreparedClaim, PreparedDevice
from .kubeletapi import (dra_v1_grpc, dra_v1_pb2, dra_v1beta1_grpc, dra_v1beta1_pb2, pluginregistration_v1_grpc,
                         pluginregistration_v1_pb2)
from .prepare import PrepareError, plan_claim

if TYPE_CHECKING:
    from ...core.supervisor import Supervisor

log = structlog.stdlib.get_logger("operators.nodeagent.plugin")

PLUGIN_TYPE = "DRAPlugin"
# kubelet takes the first entry of ours it knows: v1 first; v1beta1 for kubelets that still ask for it.
# The health services are optional; kubelet 1.37 watches health only where they are listed.
SUPPORTED_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin", *health_service.SERVICES]
MAX_SOCKET_PATH = sockets.MAX_SOCKET_PATH  # sun_path is 108 bytes with the terminating NUL
REGISTRATION_CHECK = 5.0  # seconds between checks that our registration socket is still there
STOP_GRACE = 2.0  # seconds a call under way may take to finish when the agent stops


class KubeletPlugin:
    def __init__(self, agent: Any, kube: Kube, *, registry_dir: str, plugins_dir: str, cdi_root: str,
                 toolkit_cdi_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi"), nvidia_runtime: bool = False,
                 pod_uid: str = ""):
        self.agent = agent
        self.kube = kube
        self.driver = agent.driver
        self.node = agent.node_name
        self.data_dir = Path(plugins_dir) / self.driver
        # Unique per instance with a Pod UID, so two instances can run during a rolling update.
        self.pod_uid = pod_uid
        self.dra_socket = self.data_dir / sockets.dra_name(str(self.data_dir), pod_uid)
        self.registration_socket = Path(registry_dir) / sockets.registration_name(registry_dir, self.driver, pod_uid)
        self.lock_path = self.data_dir / "serialize.lock"
        self.cdi_root = Path(cdi_root)
        self.checkpoint_path = self.data_dir / "checkpoint.json"
        self.toolkit_cdi_dirs = list(toolkit_cdi_dirs)
        self.nvidia_runtime = nvidia_runtime
        self.prepared: dict[str, PreparedClaim] = {}
        self.registration: tuple[bool, str] | None = None
        self.events = EventRecorder(kube, "dra-nodeagent")
        self._lock = asyncio.Lock()
        self._servers: list[Server] = []
        self.health_feed = health_service.HealthFeed()
        self.log = log.bind(driver=self.driver, node=self.node)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, supervisor: "Supervisor | None" = None) -> None:
        for path in (self.dra_socket, self.registration_socket):
            if len(str(path)) > MAX_SOCKET_PATH:
                raise ValueError(f"socket path {path} is longer than {MAX_SOCKET_PATH} characters; "
                                 "choose shorter kubelet directories or a shorter driver name")
        # Never take over another driver's directory (NVIDIA's uses the same name by default).
        coexistence.check(self.driver, self.checkpoint_path, [self.dra_socket, self.registration_socket])
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.registration_socket.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_sockets()
        async with self._serialized():
            await self._load_checkpoint()
        # The DRA service first: kubelet may call it right after registration.
        dra = grpc_limits.server([_DraV1(self), _DraV1beta1(self),
                                  *health_service.services(self.agent, self.health_feed)])
        self.agent.health_listeners.append(self.health_feed.changed)
        await self._listen(dra, self.dra_socket)
        await self._serve_registration()
        self.log.info("kubelet plugin serving", registration=str(self.registration_socket),
                      endpoint=str(self.dra_socket), prepared_claims=len(self.prepared))
        if supervisor is not None:
            # A gRPC server that ends by itself is not restarted in place: the process exits and
            # kubelet re-registers the fresh one.
            supervisor.spawn("kubelet-plugin-dra", functools.partial(self._serve_until_stopped, self._servers[0]),
                             restart=False)
            supervisor.spawn("kubelet-plugin-registration", self._keep_registered)

    async def _serve_registration(self) -> None:
        await self._listen(grpc_limits.server([_Registration(self)]), self.registration_socket)

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

    def _serialized(self):
        """One prepare/unprepare at a time, also across instances (the Go helper's flock on
        <plugin data dir>/serialize.lock): the in-process lock, then the file lock."""
        plugin = self

        class _Lock:
            async def __aenter__(self):
                await plugin._lock.acquire()
                try:
                    self.fd = os.open(plugin.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                    await asyncio.to_thread(fcntl.flock, self.fd, fcntl.LOCK_EX)
                except BaseException:
                    plugin._lock.release()
                    raise

            async def __aexit__(self, *exc):
                try:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                    os.close(self.fd)
                finally:
                    plugin._lock.release()

        return _Lock()

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
        """Give a prepare or unprepare under way ``grace`` seconds to finish (it holds the call
        lock), then close: grpclib's close() cancels the calls still open (health streams)."""
        if grace and self._lock.locked():
            try:
                await asyncio.wait_for(self._lock.acquire(), timeout=grace)
                self._lock.release()
            except asyncio.TimeoutError:
                self.log.warning("a kubelet call did not finish before the stop", grace=grace)
        server.close()
        await server.wait_closed()

    async def stop(self) -> None:
        await self.health_feed.close(grace=STOP_GRACE)
        # Registration first, so kubelet stops sending calls before the service goes.
        for server in reversed(self._servers):
            await self._close(server, grace=STOP_GRACE)
        self._servers = []
        for path in (self.registration_socket, self.dra_socket):
            path.unlink(missing_ok=True)

    async def _reload(self) -> None:
        """Another instance may have prepared or unprepared since: the checkpoint on disk is the
        truth, read under the lock at the start of every call (as the Go helper requires)."""
        await self._load_checkpoint(save=False)

    async def _load_checkpoint(self, save: bool = True) -> None:
        try:
            self.prepared = checkpoint.load(self.checkpoint_path)
        except checkpoint.CheckpointCorrupt as e:
            self.prepared = checkpoint.rebuild_from_cdi(cdi.read_claim_specs(self.cdi_root, self.driver))
            checkpoint.save(self.checkpoint_path, self.prepared)
            message = (f"checkpoint {self.checkpoint_path} is corrupt ({e}); rebuilt {len(self.prepared)} "
                       f"prepared claim(s) from the CDI specs in {self.cdi_root}")
            self.log.error("checkpoint corrupt, rebuilt", error=str(e), claims=len(self.prepared))
            if self.agent.node:
                await self.events.event(self.agent.node, WARNING, "CheckpointCorrupt", message)
        else:
            if save:
                checkpoint.save(self.checkpoint_path, self.prepared)  # an older version is upgraded on start

    # -- the DRA service ---------------------------------------------------------------------

    async def prepare(self, claims: list[dict[str, str]]) -> dict[str, tuple[list[PreparedDevice], str]]:
        """uid -> (devices, error) for every requested claim."""
        if not claims:  # the self-check's call (and any empty one): nothing to wait for the lock for
            return {}
        fetched = await asyncio.gather(*(self._get_claim(c) for c in claims))
        results: dict[str, tuple[list[PreparedDevice], str]] = {}
        new: list[tuple[dict, PreparedClaim]] = []
        async with self._serialized():
            await self._reload()
            changed = False
            for requested, claim in zip(claims, fetched):
                started = time.monotonic()
                try:
                    if isinstance(claim, Exception):
                        raise PrepareError(f"ResourceClaim {requested['namespace']}/{requested['name']}: {claim}")
                    record = self.prepared.get(requested["uid"])
                    if record is None:
                        record = self._prepare_claim(requested, claim)
                        self.prepared[record.uid] = record
                        new.append((claim, record))
                        changed = True
                    else:
                        self._ensure_spec(record)  # e.g. /var/run/cdi emptied by a reboot
                    results[requested["uid"]] = (record.devices, "")
                    self.agent.metrics.prepare.labels(self.driver, "success").inc()
                    self.log.info("prepared claim", claim=f"{requested['namespace']}/{requested['name']}",
                                  uid=requested["uid"], devices=[d.device for d in record.devices])
                except PrepareError as e:
                    results[requested["uid"]] = ([], str(e))
                    self.agent.metrics.prepare.labels(self.driver, "error").inc()
                    self.log.warning("cannot prepare claim", claim=f"{requested['namespace']}/{requested['name']}",
                                     error=str(e))
                self.agent.metrics.prepare_duration.labels(self.driver).observe(time.monotonic() - started)
            if changed:
                checkpoint.save(self.checkpoint_path, self.prepared)
            self.agent.metrics.prepared_claims.labels(self.driver).set(len(self.prepared))
        for claim, record in new:
            await self._write_device_status(claim, record)
        return results

    async def _write_device_status(self, claim: dict, record: PreparedClaim) -> None:
        """status.devices with the agent's data (best effort, as the example driver: the claim is
        prepared either way)."""
        published = {d["name"]: d for d in self.agent.published_devices()}
        body = device_status.status_apply(claim, self.driver, record.devices, published)
        try:
            await self.kube.apply(RESOURCE_CLAIMS, body, field_manager=self.driver, force=True, subresource="status")
        except (ApiError, ConnectionLost) as e:
            self.log.warning("status.devices not written", claim=f"{record.namespace}/{record.name}", error=str(e))

    async def _get_claim(self, requested: dict[str, str]) -> dict | None | Exception:
        try:
            return await self.kube.get_or_none(RESOURCE_CLAIMS, requested["name"], requested["namespace"])
        except ApiError as e:
            return e

    def _prepare_claim(self, requested: dict[str, str], claim: dict | None) -> PreparedClaim:
        known = {d["name"] for d in self.agent.published_devices()}
        allocations = plan_claim(claim, requested, driver=self.driver, node=self.node, known_devices=known,
                                 prepared=self.prepared)
        devices = []
        for a in allocations:
            name = cdi.device_name(requested["uid"], a.device, a.share_id)
            # The toolkit's device first, ours last: CDI applies edits in this order and the last
            # value of a variable wins, so the claim's NVIDIA_VISIBLE_DEVICES overrides the toolkit's.
            ids = [*self._toolkit_ids(a.device), cdi.qualified_id(self.driver, name)]
            devices.append(PreparedDevice(pool=a.pool, device=a.device, requestNames=[a.request],
                                          shareID=a.share_id, adminAccess=a.admin_access, cdiDeviceIDs=ids,
                                          config=a.config))
        record = PreparedClaim(uid=requested["uid"], namespace=requested["namespace"], name=requested["name"],
                               devices=devices)
        self._apply_configs(record)
        self._write_spec(record)
        return record

    def _apply_configs(self, record: PreparedClaim) -> None:
        """What a backend does on the device for a configuration (NVML: the compute mode)."""
        apply = getattr(self.agent.backend, "apply_config", None)
        if apply is None:
            return
        for d in record.devices:
            try:
                apply(d.device, d.config)
            except BackendError as e:
                raise PrepareError(f"ResourceClaim {record.namespace}/{record.name}: device {d.device}: {e}") from e

    def _release_configs(self, record: PreparedClaim | None) -> None:
        release = getattr(self.agent.backend, "release_config", None)
        for d in (record.devices if record and release else []):
            try:
                release(d.device, d.config)
            except BackendError as e:  # the device may be gone; unprepare must still succeed
                self.log.warning("configuration not undone", device=d.device, error=str(e))

    def _toolkit_ids(self, device: str) -> list[str]:
        """The NVIDIA Container Toolkit's CDI ID for a device of a backend that needs the toolkit."""
        names_of = getattr(self.agent.backend, "toolkit_names", None)
        candidates = names_of(device) if names_of else None
        if candidates is None:
            return []  # this backend's devices need nothing of the toolkit
        names = toolkit.device_names(self.toolkit_cdi_dirs)
        if names is None:
            if self.nvidia_runtime:
                return []  # nvidia-container-runtime injects the driver for NVIDIA_VISIBLE_DEVICES
            raise PrepareError(toolkit.missing_message(self.toolkit_cdi_dirs))
        try:
            return [toolkit.toolkit_id(candidates, names, device)]
        except toolkit.ToolkitMissing as e:
            raise PrepareError(str(e)) from e

    def _spec_path(self, uid: str) -> Path:
        return self.cdi_root / cdi.spec_file_name(self.driver, uid)

    def _ensure_spec(self, record: PreparedClaim) -> None:
        if record.devices and not self._spec_path(record.uid).exists():
            self._write_spec(record)

    def _write_spec(self, record: PreparedClaim) -> None:
        claim = {"uid": record.uid, "namespace": record.namespace, "name": record.name}
        try:
            devices = [{
                # Ours, not the toolkit's ID that comes first.
                "cdi_name": cdi.device_name(record.uid, d.device, d.shareID),
                "edits": self.agent.backend.container_edits(d.device, claim, d.shareID, d.adminAccess, d.config),
                "record": {"pool": d.pool, "device": d.device, "requestNames": d.requestNames, "shareID": d.shareID,
                           "adminAccess": d.adminAccess, "cdiDeviceIDs": d.cdiDeviceIDs, "config": d.config},
            } for d in record.devices]
        except KeyError as e:
            raise PrepareError(f"device {e} is not known to the {self.agent.backend.name} backend") from e
        except BackendError as e:
            raise PrepareError(f"the {self.agent.backend.name} backend cannot prepare: {e}") from e
        spec = cdi.build_claim_spec(self.driver, claim, devices, cdi.merge_edits(
            self.agent.backend.common_edits(), self._claim_edits([d.device for d in record.devices])))
        cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, record.uid), spec)

    def _claim_edits(self, devices: list[str]) -> dict[str, Any] | None:
        """What the backend sets once per claim (NVIDIA_VISIBLE_DEVICES with all its devices)."""
        claim_edits = getattr(self.agent.backend, "claim_edits", None)
        return claim_edits(devices) if claim_edits else None

    async def unprepare(self, claims: list[dict[str, str]]) -> dict[str, str]:
        """uid -> error ("" = done) for every requested claim; unknown claims are fine."""
        results: dict[str, str] = {}
        async with self._serialized():
            await self._reload()
            for requested in claims:
                try:
                    self._spec_path(requested["uid"]).unlink(missing_ok=True)
                    self._release_configs(self.prepared.pop(requested["uid"], None))
                    results[requested["uid"]] = ""
                    self.agent.metrics.unprepare.labels(self.driver, "success").inc()
                    self.log.info("unprepared claim", claim=f"{requested['namespace']}/{requested['name']}",
                                  uid=requested["uid"])
                except OSError as e:
                    results[requested["uid"]] = f"removing the CDI spec of claim {requested['uid']}: {e}"
                    self.agent.metrics.unprepare.labels(self.driver, "error").inc()
            checkpoint.save(self.checkpoint_path, self.prepared)
            self.agent.metrics.prepared_claims.labels(self.driver).set(len(self.prepared))
        return results


def _claims(request: Any) -> list[dict[str, str]]:
    return [{"namespace": c.namespace, "uid": c.uid, "name": c.name} for c in request.claims]


class _Dra:
    """The DRA service, for either version: each version's class names its messages (``pb2``)
    and takes its gRPC method paths from its own generated base, which must come after this one."""

    pb2: Any = dra_v1_pb2

    def __init__(self, plugin: KubeletPlugin):
        self.plugin = plugin

    def _device(self, d: PreparedDevice):
        device = self.pb2.Device(request_names=d.requestNames, pool_name=d.pool, device_name=d.device,
                                 cdi_device_ids=d.cdiDeviceIDs)
        if d.shareID:
            device.share_id = d.shareID
        return device

    async def NodePrepareResources(self, stream) -> None:
        request = await stream.recv_message()
        response = self.pb2.NodePrepareResourcesResponse()
        for uid, (devices, error) in (await self.plugin.prepare(_claims(request))).items():
            entry = response.claims[uid]
            if error:
                entry.error = error
            else:
                entry.devices.extend(self._device(d) for d in devices)
        await stream.send_message(response)

    async def NodeUnprepareResources(self, stream) -> None:
        request = await stream.recv_message()
        response = self.pb2.NodeUnprepareResourcesResponse()
        for uid, error in (await self.plugin.unprepare(_claims(request))).items():
            response.claims[uid].error = error  # an empty entry is success
        await stream.send_message(response)


class _DraV1(_Dra, dra_v1_grpc.DRAPluginBase):
    pb2 = dra_v1_pb2


class _DraV1beta1(_Dra, dra_v1beta1_grpc.DRAPluginBase):
    """Same service for kubelets that ask for v1beta1 (no share_id there)."""

    pb2 = dra_v1beta1_pb2

    def _device(self, d: PreparedDevice):
        return self.pb2.Device(request_names=d.requestNames, pool_name=d.pool, device_name=d.device,
                               cdi_device_ids=d.cdiDeviceIDs)


class _Registration(pluginregistration_v1_grpc.RegistrationBase):
    def __init__(self, plugin: KubeletPlugin):
        self.plugin = plugin

    async def GetInfo(self, stream) -> None:
        await stream.recv_message()
        await stream.send_message(pluginregistration_v1_pb2.PluginInfo(
            type=PLUGIN_TYPE, name=self.plugin.driver, endpoint=str(self.plugin.dra_socket),
            supported_versions=SUPPORTED_SERVICES))

    async def NotifyRegistrationStatus(self, stream) -> None:
        request = await stream.recv_message()
        self.plugin.registration = (request.plugin_registered, request.error)
        if request.plugin_registered:
            self.plugin.log.info("registered with kubelet")
        else:
            self.plugin.log.error("kubelet refused the registration", error=request.error)
            raise GRPCError(Status.UNKNOWN, f"registration failed: {request.error}")
        await stream.send_message(pluginregistration_v1_pb2.RegistrationStatusResponse())
