"""NVIDIA GPUs through NVML (nvidia-ml-py, imported as ``pynvml``).

Devices and attributes follow NVIDIA's DRA driver (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin,
``deviceinfo.go`` GetDevice and ``nvlib.go`` getGpuInfo/getMigDevices), so CEL written for it works
unchanged: ``gpu-<minor>`` with type, uuid, productName, brand, architecture, cudaComputeCapability,
driverVersion, cudaDriverVersion (versions), ``resource.kubernetes.io/pciBusID`` (and ``pcieRoot``
and ``numaNode`` where sysfs shows them, see ``deviceattribute``), capacity ``memory``; with MIG
on, ``gpu-<minor>-mig-<profileId>-<start>-<size>`` with type "mig", uuid, parentUUID, profile and
the parent's attributes, capacities memory,
multiprocessors, copyEngines, decoders, encoders, jpegEngines, ofaEngines and one
``memorySlice<i>`` per memory slice it spans. A GPU with MIG on is not published whole.

MIG profiles are read as NVIDIA's driver reads them: ``nvmlDeviceGetGpuInstanceProfileInfo`` over
every profile *index* (NVML_GPU_INSTANCE_PROFILE_*), skipping NotSupported/InvalidArgument, and a
MIG device's GPU instance matched by the profile *ID* the call returns.

NVML is initialised once; its blocking event wait runs in a thread of its own (``nvml_events``).
Any object with pynvml's function names can stand in for the library (the tests use a strict model
of NVML, tests/nvmlmodel).
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import structlog

from ..health import HealthEvent
from . import deviceattribute, nvml_names
from .base import BackendError, Inventory
from .nvml_events import EventMonitor, GpuView

log = structlog.stdlib.get_logger("operators.nodeagent.nvml")

# How long close() waits for the event thread: it sees the stop within one nvmlEventSetWait
# (nvml_events.WAIT_MS, 1 s); more only if NVML itself hangs.
MONITOR_STOP_SECONDS = 5.0

# Re-exported for callers of the old module layout.
semver = nvml_names.semver
pcie_root = deviceattribute.pcie_root


@dataclass
class _Discovery:
    """What one discovery found: device details for CDI and health, GPU views for the event loop."""

    info: dict[str, dict[str, Any]] = field(default_factory=dict)  # device name -> minor, uuid, index, gi, ci
    gpus: dict[str, GpuView] = field(default_factory=dict)  # GPU UUID -> view
    devices_by_index: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    fingerprint: Any = None


class NvmlBackend:
    name = "nvml"

    def __init__(
        self,
        driver: str,
        nvml: Any = None,
        dev_root: str = "/dev",
        proc_root: str = "/proc",
        refresh_interval: float = 30.0,
        sysfs_root: str = "/sys",
    ):
        if nvml is None:
            import pynvml  # the real library; fails only without the package

            nvml = pynvml
        self.nvml = nvml
        self.driver = driver
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise BackendError(
                f"NVML could not be initialised ({e}): install the NVIDIA driver and make libnvidia-ml.so.1 "
                "visible to the agent (NVIDIA container toolkit or a host mount), or choose the simulated "
                "backend with DRA_NODEAGENT_BACKEND=simulated"
            ) from e
        self.dev_root = dev_root
        self.proc_root = proc_root
        self.sysfs_root = sysfs_root
        self.refresh_interval = refresh_interval
        self._stop = threading.Event()
        self._monitor_done = threading.Event()  # no event thread inside NVML
        self._monitor_done.set()
        self._state = _Discovery()

    # -- discovery ---------------------------------------------------------------------------

    def _mig_enabled(self, handle: Any) -> bool:
        """go-nvlib (*device).IsMigEnabled: NotSupported means a GPU that cannot do MIG."""
        try:
            current, _pending = self.nvml.nvmlDeviceGetMigMode(handle)
        except self.nvml.NVMLError_NotSupported:
            return False
        return current == self.nvml.NVML_DEVICE_MIG_ENABLE

    def _profiles(self, handle: Any) -> dict[int, tuple[int, Any]]:
        """Profile ID -> (profile index, GpuInstanceProfileInfo) for every profile this GPU offers."""
        nvml = self.nvml
        profiles = {}
        for index in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except (nvml.NVMLError_NotSupported, nvml.NVMLError_InvalidArgument):
                continue
            profiles[info.id] = (index, info)
        return profiles

    def _mig_handles(self, handle: Any) -> list[tuple[int, Any]]:
        nvml = self.nvml
        found = []
        for mig_index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                found.append((mig_index, nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig_index)))
            except (nvml.NVMLError_NotFound, nvml.NVMLError_InvalidArgument):
                continue  # an empty MIG slot
        return found

    def _read_gpu(
        self, index: int, handle: Any, driver_version: str, cuda_version: str, state: _Discovery, inventory: Inventory
    ) -> list[dict[str, Any]]:
        nvml = self.nvml
        text = nvml_names.text
        minor = nvml.nvmlDeviceGetMinorNumber(handle)
        gpu_uuid = text(nvml.nvmlDeviceGetUUID(handle))
        major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        bus_id = text(nvml.nvmlDeviceGetPciInfo_v3(handle).busId).lower()[-12:]  # 0000:3b:00.0
        memory = nvml.nvmlDeviceGetMemoryInfo(handle).total
        common = {
            "productName": {"string": text(nvml.nvmlDeviceGetName(handle))},
            "brand": {"string": nvml_names.brand(nvml.nvmlDeviceGetBrand(handle))},
            "architecture": {"string": nvml_names.architecture(nvml.nvmlDeviceGetArchitecture(handle))},
            "cudaComputeCapability": {"version": nvml_names.semver(f"{major}.{minor_cc}")},
            "driverVersion": {"version": driver_version},
            "cudaDriverVersion": {"version": cuda_version},
            # pciBusID always (as NVIDIA's driver); pcieRoot and numaNode where sysfs has them.
            deviceattribute.PCI_BUS_ID: {"string": bus_id},
            **deviceattribute.pci_attributes(bus_id, self.sysfs_root),
        }
        name = f"gpu-{minor}"
        if not self._mig_enabled(handle):
            state.info[name] = {"minor": minor, "uuid": gpu_uuid, "index": index}
            state.gpus[gpu_uuid] = GpuView(uuid=gpu_uuid, index=index, minor=minor, mig=False, devices=[name])
            return [
                {
                    "name": name,
                    "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid}, **common},
                    "capacity": {"memory": {"value": str(memory)}},
                }
            ]
        view = GpuView(uuid=gpu_uuid, index=index, minor=minor, mig=True, devices=[])
        profiles = self._profiles(handle)
        devices = []
        for mig_index, mig in self._mig_handles(handle):
            gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
            ci_id = nvml.nvmlDeviceGetComputeInstanceId(mig)
            gi = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id))
            mig_uuid = text(nvml.nvmlDeviceGetUUID(mig))
            if gi.profileId not in profiles:
                inventory.errors.append(
                    f"MIG device {mig_uuid} on {name}: GPU instance profile ID {gi.profileId} "
                    "is none of the profiles NVML lists for this GPU; not published"
                )
                continue
            profile_index, profile = profiles[gi.profileId]
            start, size = gi.placement.start, gi.placement.size
            mig_name = f"{name}-mig-{gi.profileId}-{start}-{size}"
            capacity = {
                "multiprocessors": {"value": str(profile.multiprocessorCount)},
                "copyEngines": {"value": str(profile.copyEngineCount)},
                "decoders": {"value": str(profile.decoderCount)},
                "encoders": {"value": str(profile.encoderCount)},
                "jpegEngines": {"value": str(profile.jpegCount)},
                "ofaEngines": {"value": str(profile.ofaCount)},
                "memory": {"value": str(profile.memorySizeMB * 2**20)},
                **{f"memorySlice{i}": {"value": "1"} for i in range(start, start + size)},
            }
            devices.append(
                {
                    "name": mig_name,
                    "attributes": {
                        "type": {"string": "mig"},
                        "uuid": {"string": mig_uuid},
                        "parentUUID": {"string": gpu_uuid},
                        "profile": {"string": nvml_names.mig_profile_name(profile_index, profile.memorySizeMB, memory)},
                        **common,
                    },
                    "capacity": capacity,
                }
            )
            view.devices.append(mig_name)
            view.instances[(gi_id, ci_id)] = mig_name
            state.info[mig_name] = {
                "minor": minor,
                "uuid": mig_uuid,
                "index": index,
                "mig_index": mig_index,
                "gi": gi_id,
                "ci": ci_id,
                "parent_uuid": gpu_uuid,
            }
        state.gpus[gpu_uuid] = view
        return devices

    def discover(self) -> Inventory:
        nvml = self.nvml
        inventory = Inventory()
        driver_version = nvml_names.semver(nvml_names.text(nvml.nvmlSystemGetDriverVersion()))
        cuda = nvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda_version = f"{cuda // 1000}.{(cuda % 1000) // 10}.0"
        previous = self._state
        state = _Discovery()
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                devices = self._read_gpu(index, handle, driver_version, cuda_version, state, inventory)
            except nvml.NVMLError_GpuIsLost:
                # Lost but still on the bus: keep what was known of it (tainted gpu-lost by the
                # event loop) until it answers again or leaves the bus.
                devices = previous.devices_by_index.get(index, [])
                for device in devices:
                    state.info[device["name"]] = previous.info[device["name"]]
                for view in previous.gpus.values():
                    if view.index == index:
                        state.gpus[view.uuid] = view
                log.warning(
                    "GPU lost; keeping its devices from the last discovery",
                    index=index,
                    devices=[d["name"] for d in devices],
                )
            state.devices_by_index[index] = devices
            inventory.devices.extend(devices)
        state.fingerprint = self.fingerprint()
        self._state = state
        return inventory

    def fingerprint(self) -> tuple:
        """What changes when GPUs leave or join the bus or MIG is reconfigured (cheap NVML calls)."""
        nvml = self.nvml
        seen = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml_names.text(nvml.nvmlDeviceGetUUID(handle))
                migs = (
                    tuple(nvml_names.text(nvml.nvmlDeviceGetUUID(m)) for _, m in self._mig_handles(handle))
                    if self._mig_enabled(handle)
                    else ()
                )
            except nvml.NVMLError_GpuIsLost:
                uuid, migs = f"lost:{index}", ()
            seen.append((uuid, migs))
        return tuple(seen)

    # -- health ------------------------------------------------------------------------------

    def healthy(self, device: str) -> bool:
        info = self._state.info.get(device)
        if info is None:
            return False
        try:
            handle = self.nvml.nvmlDeviceGetHandleByUUID(info.get("parent_uuid", info["uuid"]))
            self.nvml.nvmlDeviceGetMemoryInfo(handle)
            return True
        except self.nvml.NVMLError:
            return False

    def observe_node(self, node: dict[str, Any]) -> None:
        pass

    # -- CDI -----------------------------------------------------------------------------------

    def _char_major(self, name: str) -> int | None:
        """The character device major of a driver from /proc/devices (``nvidia-caps``)."""
        try:
            with open(os.path.join(self.proc_root, "devices")) as f:
                in_char = False
                for line in f:
                    if line.startswith("Character devices"):
                        in_char = True
                    elif line.startswith("Block devices"):
                        in_char = False
                    elif in_char and line.split()[1:] == [name]:
                        return int(line.split()[0])
        except (OSError, ValueError, IndexError):
            return None
        return None

    def _capability_minor(self, minor: int, *parts: str) -> int | None:
        """MIG access capabilities: ``DeviceFileMinor: N`` in
        /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access."""
        path = os.path.join(self.proc_root, "driver", "nvidia", "capabilities", f"gpu{minor}", "mig", *parts, "access")
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("DeviceFileMinor:"):
                        return int(line.split(":", 1)[1])
        except (OSError, ValueError):
            return None
        return None

    def container_edits(
        self,
        device: str,
        claim: dict[str, str],
        share_id: str | None,
        admin_access: bool,
        config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The GPU's /dev/nvidia<minor> (major 195, as the NVIDIA driver registers it); for a MIG
        device also its GPU and compute instance capability nodes, with the ``nvidia-caps``
        major from /proc/devices and the minors from /proc/driver/nvidia/capabilities. The
        visible-devices variable is set once per claim (``claim_edits``)."""
        info = self._state.info[device]
        nodes = [{"path": f"/dev/nvidia{info['minor']}", "type": "c", "major": 195, "minor": info["minor"]}]
        if "gi" in info:
            caps_major = self._char_major("nvidia-caps")
            for parts in ((f"gi{info['gi']}",), (f"gi{info['gi']}", f"ci{info['ci']}")):
                cap = self._capability_minor(info["minor"], *parts)
                if cap is None:
                    continue
                node: dict[str, Any] = {"path": f"/dev/nvidia-caps/nvidia-cap{cap}"}
                if caps_major is not None:
                    node.update(type="c", major=caps_major, minor=cap)
                nodes.append(node)
        edits: dict[str, Any] = {"deviceNodes": nodes}
        env = [f"{name}={value}" for name, value in sorted(((config or {}).get("env") or {}).items())]
        if env:
            edits["env"] = env
        return edits

    # -- sharing (opaque configuration) -------------------------------------------------------

    def apply_config(self, device: str, config: dict[str, Any] | None) -> None:
        """The sharing of NVIDIA's GpuConfig where NVML can apply it: ``Exclusive`` sets the GPU's
        compute mode to EXCLUSIVE_PROCESS (one process at a time), ``TimeSlicing`` to DEFAULT
        (processes share the GPU by time slices). The time-slice length has no NVML call (NVIDIA's
        driver runs ``nvidia-smi compute-policy --set-timeslice``), so an interval other than
        Default is refused; so is sharing a MIG device (NVML sets compute modes of whole GPUs).
        Without a sharing configuration the compute mode is left alone."""
        sharing = (config or {}).get("sharing")
        if not sharing:
            return
        info = self._state.info[device]
        if "mig_index" in info:
            raise BackendError(
                f"sharing.strategy {sharing['strategy']}: MIG devices cannot be shared or made "
                "exclusive through NVML compute modes; leave sharing out for MIG devices"
            )
        interval = (sharing.get("timeSlicingConfig") or {}).get("interval", "Default")
        if interval != "Default":
            raise BackendError(
                f"sharing.timeSlicingConfig.interval {interval}: NVML has no call for the "
                "time-slice length (nvidia-smi compute-policy --set-timeslice); use Default"
            )
        nvml = self.nvml
        mode = (
            nvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
            if sharing["strategy"] == "Exclusive"
            else nvml.NVML_COMPUTEMODE_DEFAULT
        )
        try:
            nvml.nvmlDeviceSetComputeMode(nvml.nvmlDeviceGetHandleByUUID(info["uuid"]), mode)
        except nvml.NVMLError as e:
            raise BackendError(f"setting the compute mode for sharing.strategy {sharing['strategy']}: {e}") from e

    def release_config(self, device: str, config: dict[str, Any] | None) -> None:
        """An exclusive GPU goes back to the DEFAULT compute mode when its claim is unprepared."""
        sharing = (config or {}).get("sharing") or {}
        info = self._state.info.get(device)
        if sharing.get("strategy") != "Exclusive" or info is None or "mig_index" in info:
            return
        nvml = self.nvml
        try:
            nvml.nvmlDeviceSetComputeMode(nvml.nvmlDeviceGetHandleByUUID(info["uuid"]), nvml.NVML_COMPUTEMODE_DEFAULT)
        except nvml.NVMLError as e:
            raise BackendError(f"resetting the compute mode: {e}") from e

    def claim_edits(self, devices: list[str]) -> dict[str, Any] | None:
        """``NVIDIA_VISIBLE_DEVICES`` naming every GPU and MIG UUID of one claim, once (CDI keeps
        only the last value of a variable set more than once)."""
        uuids = [self._state.info[d]["uuid"] for d in devices if d in self._state.info]
        return {"env": [f"NVIDIA_VISIBLE_DEVICES={','.join(uuids)}"]} if uuids else None

    def toolkit_names(self, device: str) -> list[str]:
        """The names the NVIDIA Container Toolkit's CDI spec may give this device: its UUID, then
        its index (``<gpu>`` or ``<gpu>:<mig>``), as ``nvidia-ctk cdi generate`` names them."""
        info = self._state.info[device]
        index = f"{info['index']}:{info['mig_index']}" if "mig_index" in info else str(info["index"])
        return [info["uuid"], index]

    def common_edits(self) -> dict[str, Any] | None:
        """The control device nodes present on the host."""
        present = [
            name
            for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
            if os.path.exists(os.path.join(self.dev_root, name))
        ]
        return {"deviceNodes": [{"path": f"/dev/{name}"} for name in present]} if present else None

    # -- events --------------------------------------------------------------------------------

    async def watch(self, events: asyncio.Queue[HealthEvent], changed: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        self._stop.clear()

        def put(event: HealthEvent) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        def wake() -> None:
            loop.call_soon_threadsafe(changed.set)

        monitor = EventMonitor(
            self.nvml,
            gpus=lambda: self._state.gpus,
            fingerprint=self.fingerprint,
            known_fingerprint=lambda: self._state.fingerprint,
            put=put,
            changed=wake,
            stop=self._stop,
            refresh_interval=self.refresh_interval,
        )

        def run() -> None:
            try:
                monitor.run()
            finally:
                self._monitor_done.set()

        self._monitor_done.clear()
        try:
            await asyncio.to_thread(run)
        finally:
            self._stop.set()  # a cancelled watch leaves its thread running until it sees this

    def close(self) -> None:
        """Stop the event thread, then shut NVML down. Cancelling ``watch`` does not wait for its
        thread, which may be inside ``nvmlEventSetWait`` (up to a second): shutting NVML down under
        it made every GPU look lost at each agent stop. NVIDIA's plugin waits likewise
        (cmd/gpu-kubelet-plugin/device_health.go, ``nvmlDeviceHealthMonitor.Stop``: ``wg.Wait``,
        then ``Shutdown``)."""
        self._stop.set()
        if not self._monitor_done.wait(MONITOR_STOP_SECONDS):
            log.warning("NVML event thread still running at shutdown", waited=MONITOR_STOP_SECONDS)
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
