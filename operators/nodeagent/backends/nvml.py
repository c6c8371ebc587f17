"""NVIDIA GPUs through NVML (nvidia-ml-py, imported as ``pynvml``).

Devices and attributes follow NVIDIA's DRA driver, so CEL written for it works unchanged:
``gpu-<minor>`` with type, uuid, productName, brand, architecture, cudaComputeCapability,
driverVersion, cudaDriverVersion (versions), ``resource.kubernetes.io/pciBusID`` (and ``pcieRoot`` where sysfs shows it), capacity
``memory``; with MIG on, ``gpu-<minor>-mig-<profileId>-<placementStart>-<placementSize>`` with
type "mig", uuid, parentUUID, profile and the parent's attributes.

NVML is initialised once; its blocking event wait runs in a thread of its own. Any object with
pynvml's function names can stand in for the library (the tests use a fake).
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import threading
from typing import Any

from ..health import ECC, LOST, XID, HealthEvent
from .base import BackendError, Inventory

_WAIT_MS = 1000
_ARCHITECTURES = {"KEPLER": "Kepler", "MAXWELL": "Maxwell", "PASCAL": "Pascal", "VOLTA": "Volta",
                  "TURING": "Turing", "AMPERE": "Ampere", "ADA": "Ada Lovelace", "HOPPER": "Hopper",
                  "BLACKWELL": "Blackwell", "RUBIN": "Rubin"}


def semver(text: str) -> str:
    """"550.54.15" -> "550.54.15", "12.4" -> "12.4.0", "9.0" -> "9.0.0" (NVIDIA normalises the same way)."""
    parts = [str(int(p)) for p in re.findall(r"\d+", text)[:3]]
    return ".".join((parts + ["0", "0", "0"])[:3])


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def pcie_root(bus_id: str, sysfs: str = "/sys") -> str | None:
    """The PCIe root complex of a device (``pci0000:00``) from sysfs, as Kubernetes'
    standard attribute names it; None where sysfs does not show it (the attribute is omitted)."""
    try:
        path = os.path.realpath(os.path.join(sysfs, "bus", "pci", "devices", bus_id))
    except OSError:
        return None
    for part in path.split(os.sep):
        if re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", part):
            return part
    return None


def profile_name(profile: Any) -> str:
    """``3g.40gb``: NVML's own profile name where it has one, else slices and memory rounded up."""
    name = _text(getattr(profile, "name", "") or "")
    if name:
        return name.removeprefix("MIG ").strip()
    return f"{profile.sliceCount}g.{math.ceil(profile.memorySizeMB / 1024)}gb"


class NvmlBackend:
    name = "nvml"

    def __init__(self, driver: str, nvml: Any = None, dev_root: str = "/dev", proc_root: str = "/proc"):
        if nvml is None:
            import pynvml as nvml  # the real library; fails only without the package
        self.nvml = nvml
        self.driver = driver
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise BackendError(
                f"NVML could not be initialised ({e}): install the NVIDIA driver and make libnvidia-ml.so.1 "
                "visible to the agent (NVIDIA container toolkit or a host mount), or choose the simulated "
                "backend with DRA_NODEAGENT_BACKEND=simulated") from e
        self.dev_root = dev_root
        self.proc_root = proc_root
        self._stop = threading.Event()
        self._info: dict[str, dict[str, Any]] = {}      # device name -> minor, uuid, gi, ci
        self._gpu_uuids: dict[str, str] = {}            # device name -> GPU UUID (health checks)
        self._names_by_uuid: dict[str, str] = {}
        self._mig_by_instance: dict[tuple[str, int, int], str] = {}

    # -- discovery ---------------------------------------------------------------------------

    def _brand(self, handle: Any) -> str:
        value = self.nvml.nvmlDeviceGetBrand(handle)
        for name in dir(self.nvml):
            if name.startswith("NVML_BRAND_") and name != "NVML_BRAND_COUNT" and getattr(self.nvml, name) == value:
                return name[len("NVML_BRAND_"):].replace("_", " ").title().replace(" ", "")
        return "Unknown"

    def _architecture(self, handle: Any) -> str:
        value = self.nvml.nvmlDeviceGetArchitecture(handle)
        for key, label in _ARCHITECTURES.items():
            if getattr(self.nvml, f"NVML_DEVICE_ARCH_{key}", None) == value:
                return label
        return "Unknown"

    def discover(self) -> Inventory:
        nvml = self.nvml
        inventory = Inventory()
        driver_version = semver(_text(nvml.nvmlSystemGetDriverVersion()))
        cuda = nvml.nvmlSystemGetCudaDriverVersion_v2()
        cuda_version = f"{cuda // 1000}.{(cuda % 1000) // 10}.0"
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            minor = nvml.nvmlDeviceGetMinorNumber(handle)
            gpu_uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            bus_id = _text(nvml.nvmlDeviceGetPciInfo_v3(handle).busId).lower()[-12:]  # 0000:3b:00.0
            common = {
                "productName": {"string": _text(nvml.nvmlDeviceGetName(handle))},
                "brand": {"string": self._brand(handle)},
                "architecture": {"string": self._architecture(handle)},
                "cudaComputeCapability": {"version": semver(f"{major}.{minor_cc}")},
                "driverVersion": {"version": driver_version},
                "cudaDriverVersion": {"version": cuda_version},
                "resource.kubernetes.io/pciBusID": {"string": bus_id},
            }
            if root := pcie_root(bus_id):
                common["resource.kubernetes.io/pcieRoot"] = {"string": root}
            name = f"gpu-{minor}"
            self._gpu_uuids[name] = gpu_uuid
            self._names_by_uuid[gpu_uuid] = name
            mig_current, _ = nvml.nvmlDeviceGetMigMode(handle)
            self._info[name] = {"minor": minor, "uuid": gpu_uuid}
            if mig_current != nvml.NVML_DEVICE_MIG_ENABLE:
                inventory.devices.append({
                    "name": name,
                    "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu_uuid}, **common},
                    "capacity": {"memory": {"value": str(nvml.nvmlDeviceGetMemoryInfo(handle).total)}},
                })
                continue
            for mig_index in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, mig_index)
                except nvml.NVMLError:
                    continue  # an empty MIG slot
                gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
                ci_id = nvml.nvmlDeviceGetComputeInstanceId(mig)
                info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id))
                profile = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, info.profileId)
                mig_name = f"{name}-mig-{info.profileId}-{info.placement.start}-{info.placement.size}"
                mig_uuid = _text(nvml.nvmlDeviceGetUUID(mig))
                self._gpu_uuids[mig_name] = gpu_uuid
                self._mig_by_instance[(gpu_uuid, gi_id, ci_id)] = mig_name
                self._info[mig_name] = {"minor": minor, "uuid": mig_uuid, "gi": gi_id, "ci": ci_id}
                inventory.devices.append({
                    "name": mig_name,
                    "attributes": {"type": {"string": "mig"}, "uuid": {"string": mig_uuid},
                                   "parentUUID": {"string": gpu_uuid},
                                   "profile": {"string": profile_name(profile)}, **common},
                    "capacity": {"memory": {"value": str(profile.memorySizeMB * 2**20)},
                                 "multiprocessors": {"value": str(profile.multiprocessorCount)}},
                })
        return inventory

    # -- health ------------------------------------------------------------------------------

    def healthy(self, device: str) -> bool:
        gpu_uuid = self._gpu_uuids.get(device)
        if gpu_uuid is None:
            return False
        try:
            handle = self.nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
            self.nvml.nvmlDeviceGetMemoryInfo(handle)
            return True
        except self.nvml.NVMLError:
            return False

    def observe_node(self, node: dict[str, Any]) -> None:
        pass

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

    def container_edits(self, device: str, claim: dict[str, str], share_id: str | None,
                        admin_access: bool) -> dict[str, Any]:
        """The GPU's /dev/nvidia<minor>; for a MIG device also its GPU and compute instance
        capability nodes; NVIDIA_VISIBLE_DEVICES naming the GPU or MIG UUID."""
        info = self._info[device]
        nodes = [{"path": f"/dev/nvidia{info['minor']}"}]
        if "gi" in info:
            for parts in ((f"gi{info['gi']}",), (f"gi{info['gi']}", f"ci{info['ci']}")):
                cap = self._capability_minor(info["minor"], *parts)
                if cap is not None:
                    nodes.append({"path": f"/dev/nvidia-caps/nvidia-cap{cap}"})
        return {"env": [f"NVIDIA_VISIBLE_DEVICES={info['uuid']}"], "deviceNodes": nodes}

    def common_edits(self) -> dict[str, Any] | None:
        """The control device nodes present on the host."""
        present = [name for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
                   if os.path.exists(os.path.join(self.dev_root, name))]
        return {"deviceNodes": [{"path": f"/dev/{name}"} for name in present]} if present else None

    def _event_loop(self, put) -> None:
        nvml = self.nvml
        event_set = nvml.nvmlEventSetCreate()
        mask = (nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
                | nvml.nvmlEventTypeSingleBitEccError)
        try:
            for gpu_uuid in sorted(set(self._gpu_uuids.values())):
                try:
                    handle = nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
                    nvml.nvmlDeviceRegisterEvents(handle, mask, event_set)
                except nvml.NVMLError:
                    put(HealthEvent(self._names_by_uuid.get(gpu_uuid, gpu_uuid), LOST))
            while not self._stop.is_set():
                try:
                    event = nvml.nvmlEventSetWait_v2(event_set, _WAIT_MS)
                except nvml.NVMLError as e:
                    if isinstance(e, getattr(nvml, "NVMLError_Timeout", ())):
                        continue
                    if isinstance(e, getattr(nvml, "NVMLError_GpuIsLost", ())):
                        for name in self._gpu_uuids:
                            put(HealthEvent(name, LOST))
                    continue
                gpu_uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
                device = self._mig_by_instance.get((gpu_uuid, event.gpuInstanceId, event.computeInstanceId)) \
                    or self._names_by_uuid.get(gpu_uuid)
                if device is None:
                    continue
                if event.eventType == nvml.nvmlEventTypeXidCriticalError:
                    put(HealthEvent(device, XID, str(event.eventData)))
                elif event.eventType == nvml.nvmlEventTypeDoubleBitEccError:
                    put(HealthEvent(device, ECC, "double-bit"))
                elif event.eventType == nvml.nvmlEventTypeSingleBitEccError:
                    put(HealthEvent(device, ECC, "single-bit"))
        finally:
            nvml.nvmlEventSetFree(event_set)

    async def watch(self, events: asyncio.Queue[HealthEvent], changed: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()

        def put(event: HealthEvent) -> None:
            loop.call_soon_threadsafe(events.put_nowait, event)

        self._stop.clear()
        thread = asyncio.to_thread(self._event_loop, put)
        try:
            await thread
        finally:
            self._stop.set()

    def close(self) -> None:
        self._stop.set()
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass
