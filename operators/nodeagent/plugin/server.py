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

from ...core.machinery.events import WARNING, EventRecorder
from ...core.api.kube import ApiError, ConnectionLost, Kube
from ...core.api.resources import RESOURCE_CLAIMS
from ..backends.base import BackendError
from . import (cdi, checkpoint, coexistence, device_status, durable, grpc_limits, health_service, reconcile,
               sockets, toolkit)
from .checkpoint import PreparedClaim, PreparedDevice
from .kubeletapi import (dra_v1_grpc, dra_v1_pb2, dra_v1beta1_grpc, dra_v1beta1_pb2, pluginregistration_v1_grpc,
                         pluginregistration_v1_pb2)
from .prepare import PrepareError, plan_claim

if TYPE_CHECKING:
    from ...core.machinery.supervisor import Supervisor

log = structlog.stdlib.get_logger("operators.nodeagent.plugin")

PLUGIN_TYPE = "DRAPlugin"
# kubelet takes the first entry of ours it knows: v1 first; v1beta1 for kubelets that still ask for it.
# The health services are optional; kubelet 1.37 watches health only where they are listed.
SUPPORTED_SERVICES = ["v1.DRAPlugin", "v1beta1.DRAPlugin", *health_service.SERVICES]
MAX_SOCKET_PATH = sockets.MAX_SOCKET_PATH  # sun_path is 108 bytes with the terminating NUL
REGISTRATION_CHECK = 5.0  # seconds between checks that our registration socket is still there
STOP_GRACE = 2.0  # seconds a call under way may take to finish when the agent stops
SPEC_CHECK = 3.0  # seconds between looks at the checkpoint and our CDI specs (a few stat calls)
LOCK_POLL = 0.1  # seconds between attempts at the file lock while another instance holds it
SPEC_RESTORED = "CDISpecRestored"  # Event reason on the ResourceClaim whose spec was written again


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
        self._seen: tuple | None = None  # what the last reconcile of the specs saw (_observe)
        self._rebuild_failures: dict[str, str] = {}  # claim UID -> why its spec cannot be built (logged once)

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
        await self.recover()
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
            supervisor.spawn("kubelet-plugin-cdi-specs", self._keep_specs)

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
        <plugin data dir>/serialize.lock): the in-process lock, then the file lock.

        The file lock is tried without blocking and tried again every LOCK_POLL seconds: a call
        cancelled while it waits (kubelet's deadline, a closed connection) then closes its file
        and holds nothing. (A blocking flock in a thread cannot be cancelled: the thread would
        get the lock later for a caller that is gone, and hold it for good.)"""
        plugin = self

        class _Lock:
            async def __aenter__(self):
                await plugin._lock.acquire()
                fd = None
                try:
                    fd = os.open(plugin.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
                    waiting = False
                    while True:
                        try:
                            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                            break
                        except BlockingIOError:
                            if not waiting:
                                waiting = True
                                plugin.log.info("waiting for the lock another instance holds",
                                                lock=str(plugin.lock_path))
                            await asyncio.sleep(LOCK_POLL)
                    self.fd = fd
                except BaseException:
                    if fd is not None:
                        os.close(fd)  # closing drops a lock taken just before the cancellation too
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
            if not self.checkpoint_path.exists() and cdi.spec_files(self.cdi_root, self.driver):
                # Removed by someone: read as empty, every spec would be an orphan and be removed.
                raise checkpoint.CheckpointCorrupt("it is missing while CDI specs of prepared claims exist")
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

    # -- prepared state, level-triggered -----------------------------------------------------
    #
    # kubelet asks for a prepare only when it creates a Pod's sandbox; a spec lost while the
    # sandbox lives (a cleanup, a toolkit reinstall rewriting the CDI directory, kubernetes#141433)
    # would fail every later container start of that Pod with "unresolvable CDI devices". So the
    # agent keeps the specs as its checkpoint says they should be: at start and whenever one of
    # them (or the checkpoint) changes, under the same lock as prepare and unprepare.

    async def recover(self) -> None:
        """At start: the checkpoint read (rebuilt when lost), every prepared claim's spec as it
        should be, orphans undone, and what prepare set up on the devices applied again."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        async with self._serialized():
            await self._load_checkpoint()
            await self._reconcile_specs(start=True)

    def _observe(self) -> tuple:
        """What the spec check compares: the identity (inode, size, mtime) of the checkpoint and
        of each of our specs."""
        def identity(path: Path) -> tuple[int, int, int] | None:
            try:
                st = path.stat()
            except FileNotFoundError:
                return None
            return st.st_ino, st.st_size, st.st_mtime_ns

        specs = cdi.spec_files(self.cdi_root, self.driver)
        return identity(self.checkpoint_path), {uid: identity(path) for uid, path in specs.items()}

    async def check_specs(self) -> None:
        """One look, without the lock; a reconcile under the lock when anything changed since the
        last one, or a prepared claim's spec is not there."""
        seen = self._observe()
        missing = any(c.devices and c.uid not in seen[1] for c in self.prepared.values())
        if seen == self._seen and not missing:
            return
        async with self._serialized():
            await self._reload()
            await self._reconcile_specs()

    async def _keep_specs(self) -> None:
        while True:
            await asyncio.sleep(SPEC_CHECK)
            await self.check_specs()

    async def _reconcile_specs(self, start: bool = False) -> None:
        """Under the lock, with the checkpoint just read: write every prepared claim's spec that is
        missing or differs, undo and remove orphan specs, and re-apply what prepare set up on the
        devices (at start, and after any repair: what removed a spec may have reset them too)."""
        files = cdi.spec_files(self.cdi_root, self.driver)
        on_disk = {uid: cdi.read_spec(path) for uid, path in files.items()}
        expected = {}
        for record in self.prepared.values():
            if not record.devices:
                continue  # a v1 checkpoint's entry: nothing recorded to build a spec from
            try:
                expected[record.uid] = self._build_spec(record)
                self._rebuild_failures.pop(record.uid, None)
            except PrepareError as e:
                if self._rebuild_failures.get(record.uid) != str(e):
                    self.log.warning("cannot build the CDI spec of a prepared claim", uid=record.uid,
                                     claim=f"{record.namespace}/{record.name}", error=str(e))
                self._rebuild_failures[record.uid] = str(e)
        plan = reconcile.plan_specs(expected, on_disk, self.prepared)
        for uid in plan.orphans:
            try:
                self._remove_orphan(files[uid], on_disk[uid])
            except OSError as e:  # tried again at the next check; never a reason not to start
                self.log.error("cannot remove the CDI spec of a claim that is not prepared", spec=str(files[uid]),
                               error=str(e))
        for uid, why in plan.write.items():
            record = self.prepared[uid]
            try:
                path = cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, uid), expected[uid])
            except OSError as e:
                self.log.error("cannot write the CDI spec of a prepared claim again", uid=uid, error=str(e))
                continue
            message = (f"the CDI spec {path} of this prepared claim {why}: written again from the node agent's "
                       f"checkpoint, so its containers can start (something removed or changed it)")
            self.log.warning("restored the CDI spec of a prepared claim", claim=f"{record.namespace}/{record.name}",
                             uid=uid, spec=str(path), reason=why)
            if record.namespace and record.name:
                self.events.post(_claim_reference(record), WARNING, SPEC_RESTORED, message)
        if start or plan:
            for record in self.prepared.values():
                try:
                    self._apply_configs(record)
                except PrepareError as e:
                    self.log.warning("configuration of a prepared claim not applied again", uid=record.uid,
                                     error=str(e))
        self._seen = self._observe()

    def _remove_orphan(self, path: Path, spec: dict[str, Any] | None) -> None:
        """A spec of ours whose claim is not prepared: undo the configuration it records (prepare
        writes the spec before it configures the devices, so the spec is the record of what may
        have been set up), then remove it."""
        for record in checkpoint.rebuild_from_cdi([spec] if spec else []).values():
            self._release_configs(record)
        durable.remove(path)
        self.log.warning("removed the CDI spec of a claim that is not prepared", spec=str(path))

    # -- the DRA service ---------------------------------------------------------------------

    async def prepare(self, claims: list[dict[str, str]]) -> dict[str, tuple[list[PreparedDevice], str]]:
        """uid -> (devices, error) for every requested claim."""
        if not claims:  # the self-check's call (and any empty one): nothing to wait for the lock for
            return {}
        results: dict[str, tuple[list[PreparedDevice], str]] = {}
        new: list[tuple[dict, PreparedClaim]] = []
        async with self._serialized():
            # Read inside the lock (the Go helper reads before it): a claim re-allocated or replaced
            # while this call waited is prepared as it is now, never with the allocation read before.
            fetched = await asyncio.gather(*(self._get_claim(c) for c in claims))
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
        # The spec first: it records each device's configuration, so a crash from here until the
        # checkpoint is saved leaves an orphan spec, undone by the next start (_reconcile_specs).
        path = cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, record.uid), self._build_spec(record))
        try:
            self._apply_configs(record)
        except PrepareError:
            self._release_configs(record)
            durable.remove(path)
            raise
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
            except KeyError as e:  # gone since it was prepared (a GPU lost): nothing to configure
                raise PrepareError(f"ResourceClaim {record.namespace}/{record.name}: device {d.device} is not "
                                   f"known to the {self.agent.backend.name} backend") from e

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
            cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, record.uid), self._build_spec(record))

    def _build_spec(self, record: PreparedClaim) -> dict[str, Any]:
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
        return cdi.build_claim_spec(self.driver, claim, devices, cdi.merge_edits(
            self.agent.backend.common_edits(), self._claim_edits([d.device for d in record.devices])))

    def _claim_edits(self, devices: list[str]) -> dict[str, Any] | None:
        """What the backend sets once per claim (NVIDIA_VISIBLE_DEVICES with all its devices)."""
        claim_edits = getattr(self.agent.backend, "claim_edits", None)
        return claim_edits(devices) if claim_edits else None

    async def unprepare(self, claims: list[dict[str, str]]) -> dict[str, str]:
        """uid -> error ("" = done) for every requested claim; unknown claims are fine."""
        results: dict[str, str] = {}
        async with self._serialized():
            await self._reload()
            removed = {r["uid"]: self.prepared.get(r["uid"]) for r in claims}
            for uid in removed:
                self.prepared.pop(uid, None)
            # The checkpoint first: a crash from here on leaves orphan specs, undone by the next start.
            checkpoint.save(self.checkpoint_path, self.prepared)
            self.agent.metrics.prepared_claims.labels(self.driver).set(len(self.prepared))
            for requested in claims:
                uid = requested["uid"]
                try:
                    durable.remove(self._spec_path(uid))
                    self._release_configs(removed.pop(uid, None))
                    results[uid] = ""
                    self.agent.metrics.unprepare.labels(self.driver, "success").inc()
                    self.log.info("unprepared claim", claim=f"{requested['namespace']}/{requested['name']}", uid=uid)
                except OSError as e:
                    results[uid] = f"removing the CDI spec of claim {uid}: {e}"
                    self.agent.metrics.unprepare.labels(self.driver, "error").inc()
        return results


def _claim_reference(record: PreparedClaim) -> dict[str, Any]:
    """A prepared claim as the involved object of an Event."""
    return {"apiVersion": RESOURCE_CLAIMS.group_version, "kind": "ResourceClaim",
            "metadata": {"name": record.name, "namespace": record.namespace, "uid": record.uid}}


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
