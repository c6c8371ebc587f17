"""The node's prepared claims: what NodePrepareResources and NodeUnprepareResources do, the CDI
specs they write and the checkpoint that records them, as dra-example-driver keeps its
``DeviceState`` (state.go) apart from the gRPC side (driver.go). Nothing here knows gRPC: the
servicers (``servicers``) turn kubelet's messages into plain data and call ``DeviceState``, and
tests call it directly.

Calls are served one at a time (as Go's helper does), also across instances of the agent during
a rolling update; the checkpoint and the CDI specs are the state, so a restarted agent carries on
where the last one stopped.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...core.api.kube import ApiError, ConnectionLost
from ...core.api.resources import RESOURCE_CLAIMS
from ...core.logging import get_logger
from ...core.machinery.events import WARNING, EventRecorder
from ..backends.base import BackendError
from . import cdi, checkpoint, device_status, durable, metadata, reconcile, toolkit
from .checkpoint import MetadataRecord, PreparedClaim, PreparedDevice
from .prepare import PrepareError, plan_claim

if TYPE_CHECKING:
    import structlog

    from ...core.api.kube import Kube
    from ..backends.base import DeviceBackend
    from ..metrics import Metrics

log = get_logger("operators.nodeagent.plugin")

SPEC_CHECK = 3.0  # seconds between looks at the checkpoint and our CDI specs (a few stat calls)
LOCK_POLL = 0.1  # seconds between attempts at the file lock while another instance holds it
SPEC_RESTORED = "CDISpecRestored"  # Event reason on the ResourceClaim whose spec was written again
METADATA_RESTORED = "DeviceMetadataRestored"  # ... whose device metadata file was written again
EVENT_COMPONENT = "dra-nodeagent"

# A claim as kubelet names it: {"namespace", "uid", "name"}.
ClaimRef = dict[str, str]


class Agent(Protocol):
    """What the prepared state needs of the node agent (``NodeAgent`` has all of it)."""

    driver: str
    node_name: str
    backend: DeviceBackend
    metrics: Metrics
    node: dict[str, Any] | None  # the agent's Node: where the Event about a rebuilt checkpoint goes

    def published_devices(self) -> list[dict[str, Any]]:
        """The devices the agent publishes: the only ones a claim may be prepared with."""


@dataclass(frozen=True)
class ClaimResult:
    """What NodePrepareResources answers for one claim: its devices, or why it is not prepared."""

    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class CallLock:
    """One prepare/unprepare at a time, also across instances (the Go helper's flock on
    <plugin data dir>/serialize.lock): the in-process lock, then the file lock.

    The file lock is tried without blocking and tried again every LOCK_POLL seconds: a call
    cancelled while it waits (kubelet's deadline, a closed connection) then closes its file and
    holds nothing. (A blocking flock in a thread cannot be cancelled: the thread would get the
    lock later for a caller that is gone, and hold it for good.) The holder of the in-process
    lock is the only one to touch ``_fd``."""

    def __init__(self, path: Path, logger: structlog.stdlib.BoundLogger):
        self.path = path
        self._local = asyncio.Lock()
        self._fd: int | None = None
        self._log = logger

    def locked(self) -> bool:
        return self._local.locked()

    async def __aenter__(self) -> None:
        await self._local.acquire()
        fd = None
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            await self._flock(fd)
            self._fd = fd
        except BaseException:
            if fd is not None:
                os.close(fd)  # closing drops a lock taken just before the cancellation too
            self._local.release()
            raise

    async def _flock(self, fd: int) -> None:
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not waiting:
                    waiting = True
                    self._log.info("waiting for the lock another instance holds", lock=str(self.path))
                await asyncio.sleep(LOCK_POLL)

    async def __aexit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        finally:
            self._local.release()

    async def idle(self, timeout: float) -> bool:
        """Whether the call under way (if any) ended within ``timeout`` seconds."""
        if not self._local.locked():
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._local.acquire()
        except TimeoutError:
            return False
        self._local.release()
        return True


class DeviceState:
    """Prepared claims, their CDI specs and the checkpoint, in ``data_dir`` and ``cdi_root``."""

    def __init__(
        self,
        agent: Agent,
        kube: Kube,
        *,
        data_dir: Path,
        cdi_root: Path,
        toolkit_cdi_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi"),
        nvidia_runtime: bool = False,
        device_metadata: tuple[str, ...] = (),
    ):
        """``device_metadata``: the metadata API versions a newly prepared claim's files are
        written in, newest first (``metadata``); empty: no files."""
        self.agent = agent
        self.kube = kube
        self.driver = agent.driver
        self.node = agent.node_name
        self.data_dir = Path(data_dir)
        self.cdi_root = Path(cdi_root)
        self.checkpoint_path = self.data_dir / "checkpoint.json"
        self.lock_path = self.data_dir / "serialize.lock"
        self.toolkit_cdi_dirs = list(toolkit_cdi_dirs)
        self.nvidia_runtime = nvidia_runtime
        self.device_metadata = tuple(device_metadata)
        self.prepared: dict[str, PreparedClaim] = {}
        self.events = EventRecorder(kube, EVENT_COMPONENT)
        self.log = log.bind(driver=self.driver, node=self.node)
        self._lock = CallLock(self.lock_path, self.log)
        self._seen: tuple | None = None  # what the last reconcile of the specs saw (_observe)
        self._rebuild_failures: dict[str, str] = {}  # claim UID -> why its spec cannot be built (logged once)

    def _serialized(self) -> CallLock:
        return self._lock

    async def idle(self, timeout: float) -> bool:
        """Whether a prepare or unprepare under way ended within ``timeout`` seconds (for a stop)."""
        return await self._lock.idle(timeout)

    # -- the checkpoint ----------------------------------------------------------------------

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
            await self._rebuild_checkpoint(e)
        else:
            if save:
                checkpoint.save(self.checkpoint_path, self.prepared)  # an older version is upgraded on start

    async def _rebuild_checkpoint(self, error: checkpoint.CheckpointCorrupt) -> None:
        """From our CDI specs' annotations, which record every prepared claim and device."""
        self.prepared = checkpoint.rebuild_from_cdi(cdi.read_claim_specs(self.cdi_root, self.driver))
        checkpoint.save(self.checkpoint_path, self.prepared)
        message = (
            f"checkpoint {self.checkpoint_path} is corrupt ({error}); rebuilt {len(self.prepared)} "
            f"prepared claim(s) from the CDI specs in {self.cdi_root}"
        )
        self.log.error("checkpoint corrupt, rebuilt", error=str(error), claims=len(self.prepared))
        if self.agent.node:
            await self.events.event(self.agent.node, WARNING, "CheckpointCorrupt", message)

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
        """What the spec check compares: the identity (inode, size, mtime) of the checkpoint, of
        each of our specs and of each prepared claim's metadata file, and the metadata directories."""

        def identity(path: Path) -> tuple[int, int, int] | None:
            try:
                st = path.stat()
            except FileNotFoundError:
                return None
            return st.st_ino, st.st_size, st.st_mtime_ns

        specs = cdi.spec_files(self.cdi_root, self.driver)
        return (
            identity(self.checkpoint_path),
            {uid: identity(path) for uid, path in specs.items()},
            metadata.claim_dirs(self.data_dir),
            {path: identity(path) for c in self.prepared.values() for path in self._metadata_paths(c)},
        )

    async def check_specs(self) -> None:
        """One look, without the lock; a reconcile under the lock when anything changed since the
        last one, or a prepared claim's spec is not there."""
        seen = self._observe()
        missing = any(c.devices and c.uid not in seen[1] for c in self.prepared.values()) or None in seen[3].values()
        if seen == self._seen and not missing:
            return
        async with self._serialized():
            await self._reload()
            await self._reconcile_specs()

    async def keep_specs(self) -> None:
        """Supervised: ``check_specs`` every SPEC_CHECK seconds, forever."""
        while True:
            await asyncio.sleep(SPEC_CHECK)
            await self.check_specs()

    async def _reconcile_specs(self, start: bool = False) -> None:
        """Under the lock, with the checkpoint just read: write every prepared claim's spec that is
        missing or differs, undo and remove orphan specs, and re-apply what prepare set up on the
        devices (at start, and after any repair: what removed a spec may have reset them too)."""
        files = cdi.spec_files(self.cdi_root, self.driver)
        on_disk = {uid: cdi.read_spec(path) for uid, path in files.items()}
        expected = self._expected_specs()
        plan = reconcile.plan_specs(expected, on_disk, self.prepared)
        for uid in plan.orphans:
            try:
                self._remove_orphan(files[uid], on_disk[uid])
            except OSError as e:  # tried again at the next check; never a reason not to start
                self.log.error(
                    "cannot remove the CDI spec of a claim that is not prepared", spec=str(files[uid]), error=str(e)
                )
        for uid, why in plan.write.items():
            self._restore_spec(self.prepared[uid], expected[uid], why)
        self._reconcile_metadata()
        if start or plan:
            self._reapply_configs()
        self._seen = self._observe()

    def _expected_specs(self) -> dict[str, dict[str, Any]]:
        """The spec of every prepared claim that can be built now (a claim whose device is gone
        keeps the spec it has: logged once per reason, neither rewritten nor removed)."""
        expected = {}
        for record in self.prepared.values():
            if not record.devices:
                continue  # a v1 checkpoint's entry: nothing recorded to build a spec from
            try:
                expected[record.uid] = self._build_spec(record)
                self._rebuild_failures.pop(record.uid, None)
            except PrepareError as e:
                if self._rebuild_failures.get(record.uid) != str(e):
                    self.log.warning(
                        "cannot build the CDI spec of a prepared claim",
                        uid=record.uid,
                        claim=f"{record.namespace}/{record.name}",
                        error=str(e),
                    )
                self._rebuild_failures[record.uid] = str(e)
        return expected

    def _restore_spec(self, record: PreparedClaim, spec: dict[str, Any], why: str) -> None:
        try:
            path = cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, record.uid), spec)
        except OSError as e:
            self.log.error("cannot write the CDI spec of a prepared claim again", uid=record.uid, error=str(e))
            return
        message = (
            f"the CDI spec {path} of this prepared claim {why}: written again from the node agent's "
            f"checkpoint, so its containers can start (something removed or changed it)"
        )
        self.log.warning(
            "restored the CDI spec of a prepared claim",
            claim=f"{record.namespace}/{record.name}",
            uid=record.uid,
            spec=str(path),
            reason=why,
        )
        if record.namespace and record.name:
            self.events.post(_claim_reference(record), WARNING, SPEC_RESTORED, message)

    def _reconcile_metadata(self) -> None:
        """Write every prepared claim's metadata file that is missing or unreadable (a container
        of the claim started later would fail on its mount), and remove the directories of
        claims not prepared (left by a crash between the files and the checkpoint)."""
        for record in self.prepared.values():
            paths = self._metadata_paths(record)
            if all(metadata.read_file(p) is not None for p in paths):
                continue
            try:
                files = self._build_metadata(record)
                for path, content in files.items():
                    if metadata.read_file(path) is None:
                        metadata.write_file(path, content)
                        self._metadata_restored(record, path)
            except (PrepareError, OSError) as e:  # tried again at the next check; logged once per reason
                key = f"{record.uid}/metadata"
                if self._rebuild_failures.get(key) != str(e):
                    self.log.error("cannot write the device metadata of a prepared claim", uid=record.uid, error=str(e))
                self._rebuild_failures[key] = str(e)
        wanted = {metadata.claim_dir_name(c.namespace, c.name) for c in self.prepared.values() if c.metadata}
        for name in sorted(metadata.claim_dirs(self.data_dir) - wanted):
            namespace, _, claim = name.partition("_")
            try:
                metadata.remove_claim(self.data_dir, namespace, claim)
            except OSError as e:
                self.log.error("cannot remove the device metadata of a claim that is not prepared", error=str(e))
                continue
            self.log.warning(
                "removed the device metadata of a claim that is not prepared", claim=f"{namespace}/{claim}"
            )

    def _metadata_restored(self, record: PreparedClaim, path: Path) -> None:
        message = (
            f"the device metadata file {path} of this prepared claim was missing or unreadable: written "
            f"again from the node agent's checkpoint, so its containers can start"
        )
        self.log.warning(
            "restored the device metadata of a prepared claim",
            claim=f"{record.namespace}/{record.name}",
            uid=record.uid,
            file=str(path),
        )
        if record.namespace and record.name:
            self.events.post(_claim_reference(record), WARNING, METADATA_RESTORED, message)

    def _reapply_configs(self) -> None:
        for record in self.prepared.values():
            try:
                self._apply_configs(record)
            except PrepareError as e:
                self.log.warning("configuration of a prepared claim not applied again", uid=record.uid, error=str(e))

    def _remove_orphan(self, path: Path, spec: dict[str, Any] | None) -> None:
        """A spec of ours whose claim is not prepared: undo the configuration it records (prepare
        writes the spec before it configures the devices, so the spec is the record of what may
        have been set up), then remove it."""
        for record in checkpoint.rebuild_from_cdi([spec] if spec else []).values():
            self._release_configs(record)
        durable.remove(path)
        self.log.warning("removed the CDI spec of a claim that is not prepared", spec=str(path))

    # -- prepare -----------------------------------------------------------------------------

    async def prepare(self, claims: list[ClaimRef]) -> dict[str, ClaimResult]:
        """A result for every requested claim, by UID; a claim that cannot be prepared has its
        error there and never fails the others."""
        if not claims:  # the self-check's call (and any empty one): nothing to wait for the lock for
            return {}
        results: dict[str, ClaimResult] = {}
        new: list[tuple[dict, PreparedClaim]] = []
        async with self._serialized():
            # Read inside the lock (the Go helper reads before it): a claim re-allocated or replaced
            # while this call waited is prepared as it is now, never with the allocation read before.
            fetched = await asyncio.gather(*(self._get_claim(c) for c in claims))
            await self._reload()
            for requested, claim in zip(claims, fetched, strict=True):
                results[requested["uid"]], record = self._prepare_timed(requested, claim)
                if record is not None and isinstance(claim, dict):  # prepared: the claim was read
                    new.append((claim, record))
            if new:
                checkpoint.save(self.checkpoint_path, self.prepared)
            self.agent.metrics.prepared_claims.labels(self.driver).set(len(self.prepared))
        for claim, record in new:
            await self._write_device_status(claim, record)
        return results

    def _prepare_timed(
        self, requested: ClaimRef, claim: dict | None | Exception
    ) -> tuple[ClaimResult, PreparedClaim | None]:
        started = time.monotonic()
        try:
            return self._prepare_or_reuse(requested, claim)
        finally:
            self.agent.metrics.prepare_duration.labels(self.driver).observe(time.monotonic() - started)

    def _prepare_or_reuse(
        self, requested: ClaimRef, claim: dict | None | Exception
    ) -> tuple[ClaimResult, PreparedClaim | None]:
        """The claim's result, and its record when this call prepared it (a claim prepared
        before answers what it got then: kubelet repeats prepares, after its own restarts too)."""
        ref = f"{requested['namespace']}/{requested['name']}"
        try:
            if isinstance(claim, Exception):
                raise PrepareError(f"ResourceClaim {ref}: {claim}")
            record = self.prepared.get(requested["uid"])
            new = record is None
            if record is None:
                record = self.prepared[requested["uid"]] = self._prepare_claim(requested, claim)
            else:
                self._ensure_spec(record)  # e.g. /var/run/cdi emptied by a reboot
        except PrepareError as e:
            self.agent.metrics.prepare.labels(self.driver, "error").inc()
            self.log.warning("cannot prepare claim", claim=ref, error=str(e))
            return ClaimResult(error=str(e)), None
        self.agent.metrics.prepare.labels(self.driver, "success").inc()
        self.log.info("prepared claim", claim=ref, uid=requested["uid"], devices=[d.device for d in record.devices])
        return ClaimResult(devices=record.devices), (record if new else None)

    async def _write_device_status(self, claim: dict, record: PreparedClaim) -> None:
        """status.devices with the agent's data (best effort, as the example driver: the claim is
        prepared either way)."""
        published = {d["name"]: d for d in self.agent.published_devices()}
        body = device_status.status_apply(claim, self.driver, record.devices, published)
        if self.kube is None:
            raise RuntimeError("no API server to write status.devices to")
        try:
            await self.kube.apply(RESOURCE_CLAIMS, body, field_manager=self.driver, force=True, subresource="status")
        except (ApiError, ConnectionLost) as e:
            self.log.warning("status.devices not written", claim=f"{record.namespace}/{record.name}", error=str(e))

    async def _get_claim(self, requested: ClaimRef) -> dict | None | Exception:
        if self.kube is None:
            raise RuntimeError("no API server to read the claim from")
        try:
            return await self.kube.get_or_none(RESOURCE_CLAIMS, requested["name"], requested["namespace"])
        except ApiError as e:
            return e

    def _prepare_claim(self, requested: ClaimRef, claim: dict | None) -> PreparedClaim:
        """One claim on disk and on its devices, up to (not including) the checkpoint."""
        known = {d["name"] for d in self.agent.published_devices()}
        allocations = plan_claim(
            claim, requested, driver=self.driver, node=self.node, known_devices=known, prepared=self.prepared
        )
        devices = []
        for a in allocations:
            name = cdi.device_name(requested["uid"], a.device, a.share_id)
            # The toolkit's device first, ours last: CDI applies edits in this order and the last
            # value of a variable wins, so the claim's NVIDIA_VISIBLE_DEVICES overrides the toolkit's.
            ids = [*self._toolkit_ids(a.device), cdi.qualified_id(self.driver, name)]
            devices.append(
                PreparedDevice(
                    pool=a.pool,
                    device=a.device,
                    requestNames=[a.request],
                    shareID=a.share_id,
                    adminAccess=a.admin_access,
                    cdiDeviceIDs=ids,
                    config=a.config,
                )
            )
        record = PreparedClaim(
            uid=requested["uid"], namespace=requested["namespace"], name=requested["name"], devices=devices
        )
        if self.device_metadata:
            record.metadata = MetadataRecord(
                versions=list(self.device_metadata),
                podClaimName=metadata.pod_claim_name(claim or {}),
                requests={a.request: a.allocated_as or a.request for a in allocations},
            )
        # The metadata files before the spec that mounts them; then the spec: it records each
        # device's configuration, so a crash from here until the checkpoint is saved leaves an
        # orphan spec and directory, undone by the next start (_reconcile_specs).
        try:
            self._write_metadata(record)
            path = cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, record.uid), self._build_spec(record))
        except BaseException:
            self._remove_metadata(record.namespace, record.name)
            raise
        try:
            self._apply_configs(record)
        except PrepareError:
            self._release_configs(record)
            durable.remove(path)
            self._remove_metadata(record.namespace, record.name)
            raise
        return record

    # -- what the backend does on the devices ------------------------------------------------

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
                raise PrepareError(
                    f"ResourceClaim {record.namespace}/{record.name}: device {d.device} is not "
                    f"known to the {self.agent.backend.name} backend"
                ) from e

    def _release_configs(self, record: PreparedClaim | None) -> None:
        release = getattr(self.agent.backend, "release_config", None)
        if not record or not release:
            return
        for d in record.devices:
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

    # -- CDI specs ---------------------------------------------------------------------------

    def _spec_path(self, uid: str) -> Path:
        return self.cdi_root / cdi.spec_file_name(self.driver, uid)

    def _ensure_spec(self, record: PreparedClaim) -> None:
        if any(not p.exists() for p in self._metadata_paths(record)):
            self._write_metadata(record)
        if record.devices and not self._spec_path(record.uid).exists():
            cdi.write_spec(self.cdi_root, cdi.spec_file_name(self.driver, record.uid), self._build_spec(record))

    def _build_spec(self, record: PreparedClaim) -> dict[str, Any]:
        claim = {"uid": record.uid, "namespace": record.namespace, "name": record.name}
        backend = self.agent.backend
        recorded: dict[str, Any] = {**claim, "metadata": asdict(record.metadata)} if record.metadata else claim
        mounts = self._metadata_mounts(record)
        try:
            devices = [
                {
                    # Ours, not the toolkit's ID that comes first.
                    "cdi_name": cdi.device_name(record.uid, d.device, d.shareID),
                    "edits": cdi.merge_edits(
                        backend.container_edits(d.device, claim, d.shareID, d.adminAccess, d.config), mounts.get(i)
                    ),
                    "record": {
                        "pool": d.pool,
                        "device": d.device,
                        "requestNames": d.requestNames,
                        "shareID": d.shareID,
                        "adminAccess": d.adminAccess,
                        "cdiDeviceIDs": d.cdiDeviceIDs,
                        "config": d.config,
                    },
                }
                for i, d in enumerate(record.devices)
            ]
        except KeyError as e:
            raise PrepareError(f"device {e} is not known to the {backend.name} backend") from e
        except BackendError as e:
            raise PrepareError(f"the {backend.name} backend cannot prepare: {e}") from e
        return cdi.build_claim_spec(
            self.driver,
            recorded,
            devices,
            cdi.merge_edits(backend.common_edits(), self._claim_edits([d.device for d in record.devices])),
        )

    # -- device metadata files ----------------------------------------------------------------

    def _metadata_paths(self, record: PreparedClaim) -> list[Path]:
        """The host files a prepared claim's spec mounts (none without a metadata record)."""
        if not record.metadata:
            return []
        requests = dict.fromkeys(r for d in record.devices for r in d.requestNames)
        return [metadata.host_path(self.data_dir, record.namespace, record.name, r) for r in requests]

    def _metadata_mounts(self, record: PreparedClaim) -> dict[int, dict[str, Any]]:
        """containerEdits by device index: each request's file on its first device, as upstream's
        helper adds its metadata CDI device to the first device of each request (draplugin.go,
        NodePrepareResources), so only containers that use the request see it."""
        if not record.metadata:
            return {}
        edits: dict[int, dict[str, Any]] = {}
        seen: set[str] = set()
        for i, d in enumerate(record.devices):
            for request in d.requestNames:
                if request in seen:
                    continue
                seen.add(request)
                host = metadata.host_path(self.data_dir, record.namespace, record.name, request)
                inside = metadata.container_path(self.driver, record.name, request, record.metadata.podClaimName)
                edits.setdefault(i, {"mounts": []})["mounts"].append(metadata.mount(host, inside))
        return edits

    def _build_metadata(self, record: PreparedClaim) -> dict[Path, str]:
        """Each request's file content: its devices with the attributes the agent publishes."""
        if not record.metadata:
            return {}
        published = {d["name"]: d for d in self.agent.published_devices()}
        by_request: dict[str, list[dict[str, Any]]] = {}
        for d in record.devices:
            if d.device not in published:
                raise PrepareError(f"device {d.device} is not published by the {self.agent.backend.name} backend")
            entry = {"pool": d.pool, "name": d.device, "attributes": published[d.device].get("attributes")}
            for request in d.requestNames:
                by_request.setdefault(request, []).append(entry)
        claim = {"namespace": record.namespace, "name": record.name, "uid": record.uid}
        return {
            metadata.host_path(self.data_dir, record.namespace, record.name, request): metadata.encode_stream(
                metadata.build_device_metadata(
                    self.driver,
                    claim,
                    record.metadata.requests.get(request, request),
                    devices,
                    pod_claim=record.metadata.podClaimName,
                ),
                tuple(record.metadata.versions),
            )
            for request, devices in by_request.items()
        }

    def _write_metadata(self, record: PreparedClaim) -> None:
        for path, content in self._build_metadata(record).items():
            metadata.write_file(path, content)

    def _remove_metadata(self, namespace: str, name: str) -> None:
        """A claim's directory, unless a prepared claim of the same name still uses it (one that
        replaced it: the directory is named by namespace and name, as upstream names it)."""
        if any(c.metadata and (c.namespace, c.name) == (namespace, name) for c in self.prepared.values()):
            return
        metadata.remove_claim(self.data_dir, namespace, name)

    def _claim_edits(self, devices: list[str]) -> dict[str, Any] | None:
        """What the backend sets once per claim (NVIDIA_VISIBLE_DEVICES with all its devices)."""
        claim_edits = getattr(self.agent.backend, "claim_edits", None)
        return claim_edits(devices) if claim_edits else None

    # -- unprepare ---------------------------------------------------------------------------

    async def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        """An error for every requested claim, by UID ("" = done); claims not prepared are fine."""
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
                results[requested["uid"]] = self._undo(requested, removed.pop(requested["uid"], None))
        return results

    def _undo(self, requested: ClaimRef, record: PreparedClaim | None) -> str:
        uid = requested["uid"]
        try:
            durable.remove(self._spec_path(uid))
            self._release_configs(record)
        except OSError as e:
            self.agent.metrics.unprepare.labels(self.driver, "error").inc()
            return f"removing the CDI spec of claim {uid}: {e}"
        try:
            self._remove_metadata(requested["namespace"], requested["name"])
        except OSError as e:  # as upstream's helper: the claim's unprepare fails, kubelet retries
            self.agent.metrics.unprepare.labels(self.driver, "error").inc()
            return f"removing the device metadata of claim {uid}: {e}"
        self.agent.metrics.unprepare.labels(self.driver, "success").inc()
        self.log.info("unprepared claim", claim=f"{requested['namespace']}/{requested['name']}", uid=uid)
        return ""


def _claim_reference(record: PreparedClaim) -> dict[str, Any]:
    """A prepared claim as the involved object of an Event."""
    return {
        "apiVersion": RESOURCE_CLAIMS.group_version,
        "kind": "ResourceClaim",
        "metadata": {"name": record.name, "namespace": record.namespace, "uid": record.uid},
    }
