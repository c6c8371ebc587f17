"""The strict NVML model: nvidia-ml-py's (``pynvml``) function names, argument semantics and error
classes over an in-memory machine, strict where real NVML is strict.

What it enforces (NVML API reference, nvml.h of the 5xx drivers, as nvidia-ml-py 13.615 wraps it):

- Every call before ``nvmlInit`` raises Uninitialized.
- ``nvmlDeviceGetGpuInstanceProfileInfo(device, profile)`` takes a profile *index*
  (``NVML_GPU_INSTANCE_PROFILE_*``, 0 .. ``NVML_GPU_INSTANCE_PROFILE_COUNT``-1): anything outside
  that range is InvalidArgument, an index the GPU does not offer NotSupported. The returned
  ``id`` is the profile *ID* (19 for an A100's 1g.5gb), the number ``nvmlGpuInstanceGetInfo``
  reports as ``profileId`` and MIG device names carry.
- MIG calls on a GPU that is not MIG-capable raise NotSupported (``nvmlDeviceGetMigMode``,
  ``nvmlDeviceGetMaxMigDeviceCount``, ...); instance queries on a GPU with MIG off InvalidArgument;
  ``nvmlDeviceGetGpuInstanceId``/``ComputeInstanceId`` on a full GPU's handle NotSupported, and
  full-GPU queries (minor number, PCI info, events) on a MIG device's handle NotSupported.
- ``nvmlDeviceRegisterEvents`` refuses the whole mask with NotSupported when it holds any type
  ``nvmlDeviceGetSupportedEventTypes`` does not report (ECC types on a GPU without ECC or with
  ECC off); it is refused on MIG device handles.
- ``nvmlEventSetWait_v2`` returns an event of a registered type, raises Timeout after the timeout,
  and raises GpuIsLost at once, on every call, while a registered GPU is lost (as the real library
  does: it does not say which GPU).
- A lost GPU answers GpuIsLost to every query; a GPU that fell off the bus for good is no longer
  enumerated (``nvmlDeviceGetCount`` shrinks, its UUID is NotFound).

Handles are opaque objects, so a test cannot pass a minor number or a tuple where NVML wants a
handle. ``calls`` counts every call by name (to measure loops).

Fault injection (tests only, not NVML): ``xid``, ``ecc``, ``lose``, ``restore``, ``remove``,
``reconfigure``.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

FULL = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId of an event that is not a MIG instance's
ECC_EVENTS = pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
BASE_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypePState | pynvml.nvmlEventTypeClock


@dataclass(frozen=True)
class Profile:
    """A GPU instance profile as ``nvmlDeviceGetGpuInstanceProfileInfo`` reports it."""

    index: int  # NVML_GPU_INSTANCE_PROFILE_*: what the call takes
    id: int  # the profile ID: what it returns and GpuInstanceInfo.profileId says
    name: str  # "MIG 1g.5gb"
    slice_count: int
    instance_count: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpegs: int
    ofas: int
    memory_mb: int


@dataclass
class MigInstance:
    """One MIG device: a GPU instance with one compute instance spanning it."""

    gi_id: int
    ci_id: int
    profile_index: int
    placement_start: int
    placement_size: int
    uuid: str


@dataclass
class Gpu:
    index: int
    minor: int
    uuid: str
    name: str
    brand: int
    arch: int
    cc: tuple[int, int]
    memory: int  # bytes
    bus_id: str  # "00000000:07:00.0", as NVML spells it
    ecc: bool = True  # ECC supported and enabled
    mig_capable: bool = False
    mig_enabled: bool = False
    profiles: dict[int, Profile] = field(default_factory=dict)  # by index
    instances: list[MigInstance] = field(default_factory=list)
    max_mig_devices: int = 7
    state: str = "ok"  # "ok", "lost" (GpuIsLost), "gone" (not enumerated)
    compute_mode: int = 0  # NVML_COMPUTEMODE_DEFAULT


class _Handle:
    """nvmlDevice_t: a full GPU or one MIG device."""

    def __init__(self, gpu: Gpu, mig: MigInstance | None = None):
        self.gpu, self.mig = gpu, mig

    def __repr__(self) -> str:
        return f"<nvmlDevice {self.gpu.uuid}{' mig ' + self.mig.uuid if self.mig else ''}>"


class _GpuInstanceHandle:
    def __init__(self, gpu: Gpu, mig: MigInstance):
        self.gpu, self.mig = gpu, mig


class _EventSet:
    def __init__(self):
        self.masks: dict[str, int] = {}  # GPU UUID -> registered mask
        self.queue: collections.deque = collections.deque()
        self.freed = False


class StrictNVML:
    def __init__(self, gpus: list[Gpu], driver_version: str = "550.54.15", cuda: int = 12040):
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda = cuda
        self.initialised = 0
        self.calls: collections.Counter[str] = collections.Counter()
        self._sets: list[_EventSet] = []
        self._cond = threading.Condition()
        for name in dir(pynvml):  # constants and error classes, exactly as the real module has them
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))

    # -- fault injection (tests) -------------------------------------------------------------

    def gpu(self, minor: int) -> Gpu:
        return next(g for g in self.gpus if g.minor == minor)

    def xid(self, minor: int, xid: int, gi: int = FULL, ci: int = FULL) -> None:
        self._emit(self.gpu(minor), pynvml.nvmlEventTypeXidCriticalError, xid, gi, ci)

    def ecc(self, minor: int, double: bool = True) -> None:
        kind = pynvml.nvmlEventTypeDoubleBitEccError if double else pynvml.nvmlEventTypeSingleBitEccError
        self._emit(self.gpu(minor), kind, 0, FULL, FULL)

    def lose(self, minor: int) -> None:
        with self._cond:
            self.gpu(minor).state = "lost"
            self._cond.notify_all()

    def remove(self, minor: int) -> None:
        """Fallen off the bus for good: no longer enumerated."""
        with self._cond:
            self.gpu(minor).state = "gone"
            for event_set in self._sets:
                event_set.masks.pop(self.gpu(minor).uuid, None)
            self._cond.notify_all()

    def restore(self, minor: int) -> None:
        """Back after a reset or re-plug: enumerated and answering again, its event registrations gone."""
        with self._cond:
            gpu = self.gpu(minor)
            gpu.state = "ok"
            for event_set in self._sets:
                event_set.masks.pop(gpu.uuid, None)
            self._cond.notify_all()

    def reconfigure(self, minor: int, instances: list[MigInstance], mig_enabled: bool = True) -> None:
        gpu = self.gpu(minor)
        if mig_enabled and not gpu.mig_capable:
            raise ValueError("this GPU cannot do MIG")
        gpu.mig_enabled, gpu.instances = mig_enabled, list(instances)

    def _emit(self, gpu: Gpu, kind: int, data: int, gi: int, ci: int) -> None:
        with self._cond:
            for event_set in self._sets:
                if event_set.masks.get(gpu.uuid, 0) & kind:
                    event_set.queue.append(
                        SimpleNamespace(
                            device=_Handle(gpu), eventType=kind, eventData=data, gpuInstanceId=gi, computeInstanceId=ci
                        )
                    )
            self._cond.notify_all()

    # -- checks ------------------------------------------------------------------------------

    def _call(self, name: str) -> None:
        self.calls[name] += 1
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()

    @staticmethod
    def _alive(gpu: Gpu) -> Gpu:
        if gpu.state == "lost":
            raise pynvml.NVMLError_GpuIsLost()
        if gpu.state == "gone":
            raise pynvml.NVMLError_GpuIsLost()  # a stale handle of a GPU that went away
        return gpu

    def _full(self, handle: Any) -> Gpu:
        """A full GPU's handle (MIG device handles are NotSupported for full-GPU queries)."""
        if not isinstance(handle, _Handle):
            raise pynvml.NVMLError_InvalidArgument()
        if handle.mig is not None:
            raise pynvml.NVMLError_NotSupported()
        return self._alive(handle.gpu)

    def _any(self, handle: Any) -> Gpu:
        if not isinstance(handle, _Handle):
            raise pynvml.NVMLError_InvalidArgument()
        return self._alive(handle.gpu)

    def _mig_capable(self, handle: Any) -> Gpu:
        gpu = self._full(handle)
        if not gpu.mig_capable:
            raise pynvml.NVMLError_NotSupported()
        return gpu

    def _enumerated(self) -> list[Gpu]:
        return [g for g in self.gpus if g.state != "gone"]

    # -- system ------------------------------------------------------------------------------

    def nvmlInit(self):
        self.calls["nvmlInit"] += 1
        self.initialised += 1

    def nvmlShutdown(self):
        self._call("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        self._call("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self):
        self._call("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda

    def nvmlDeviceGetCount(self):
        self._call("nvmlDeviceGetCount")
        return len(self._enumerated())

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("nvmlDeviceGetHandleByIndex")
        gpus = self._enumerated()
        if not isinstance(index, int) or not 0 <= index < len(gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return _Handle(self._alive(gpus[index]))

    def nvmlDeviceGetHandleByUUID(self, uuid):
        self._call("nvmlDeviceGetHandleByUUID")
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self._enumerated():
            if gpu.uuid == uuid:
                return _Handle(self._alive(gpu))
            for mig in gpu.instances if gpu.mig_enabled else ():
                if mig.uuid == uuid:
                    return _Handle(self._alive(gpu), mig)
        raise pynvml.NVMLError_NotFound()

    # -- device queries ----------------------------------------------------------------------

    def nvmlDeviceGetIndex(self, handle):
        self._call("nvmlDeviceGetIndex")
        gpu = self._full(handle)
        return self._enumerated().index(gpu)

    def nvmlDeviceGetMinorNumber(self, handle):
        self._call("nvmlDeviceGetMinorNumber")
        return self._full(handle).minor

    def nvmlDeviceGetUUID(self, handle):
        self._call("nvmlDeviceGetUUID")
        gpu = self._any(handle)
        return handle.mig.uuid if handle.mig else gpu.uuid

    def nvmlDeviceGetName(self, handle):
        self._call("nvmlDeviceGetName")
        return self._any(handle).name

    def nvmlDeviceGetBrand(self, handle):
        self._call("nvmlDeviceGetBrand")
        return self._full(handle).brand

    def nvmlDeviceGetArchitecture(self, handle):
        self._call("nvmlDeviceGetArchitecture")
        return self._full(handle).arch

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        self._call("nvmlDeviceGetCudaComputeCapability")
        return self._any(handle).cc

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._call("nvmlDeviceGetMemoryInfo")
        gpu = self._any(handle)
        if handle.mig is not None:
            profile = gpu.profiles[handle.mig.profile_index]
            return SimpleNamespace(total=profile.memory_mb * 2**20, free=profile.memory_mb * 2**20, used=0)
        return SimpleNamespace(total=gpu.memory, free=gpu.memory, used=0)

    def nvmlDeviceGetComputeMode(self, handle):
        self._call("nvmlDeviceGetComputeMode")
        return self._full(handle).compute_mode

    def nvmlDeviceSetComputeMode(self, handle, mode):
        """Whole GPUs only (a MIG device handle is NotSupported); EXCLUSIVE_THREAD's support was
        removed, so only DEFAULT, PROHIBITED and EXCLUSIVE_PROCESS are valid."""
        self._call("nvmlDeviceSetComputeMode")
        gpu = self._full(handle)
        if mode not in (
            pynvml.NVML_COMPUTEMODE_DEFAULT,
            pynvml.NVML_COMPUTEMODE_PROHIBITED,
            pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
        ):
            raise pynvml.NVMLError_InvalidArgument()
        gpu.compute_mode = mode

    def nvmlDeviceGetPciInfo_v3(self, handle):
        self._call("nvmlDeviceGetPciInfo_v3")
        return SimpleNamespace(busId=self._full(handle).bus_id.encode())  # a c_char array: bytes

    # -- MIG ---------------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, handle):
        self._call("nvmlDeviceGetMigMode")
        gpu = self._mig_capable(handle)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        self._call("nvmlDeviceGetMaxMigDeviceCount")
        return self._mig_capable(handle).max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        self._call("nvmlDeviceGetMigDeviceHandleByIndex")
        gpu = self._mig_capable(handle)
        if not gpu.mig_enabled or not 0 <= index < gpu.max_mig_devices:
            raise pynvml.NVMLError_InvalidArgument()
        if index >= len(gpu.instances):
            raise pynvml.NVMLError_NotFound()
        return _Handle(gpu, gpu.instances[index])

    def nvmlDeviceIsMigDeviceHandle(self, handle):
        self._call("nvmlDeviceIsMigDeviceHandle")
        self._any(handle)
        return int(handle.mig is not None)

    def nvmlDeviceGetGpuInstanceId(self, handle):
        self._call("nvmlDeviceGetGpuInstanceId")
        self._any(handle)
        if handle.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.mig.gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle):
        self._call("nvmlDeviceGetComputeInstanceId")
        self._any(handle)
        if handle.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.mig.ci_id

    def nvmlDeviceGetGpuInstanceById(self, handle, gi_id):
        self._call("nvmlDeviceGetGpuInstanceById")
        gpu = self._mig_capable(handle)
        if not gpu.mig_enabled:
            raise pynvml.NVMLError_InvalidArgument()
        for mig in gpu.instances:
            if mig.gi_id == gi_id:
                return _GpuInstanceHandle(gpu, mig)
        raise pynvml.NVMLError_NotFound()

    def nvmlGpuInstanceGetInfo(self, gi):
        self._call("nvmlGpuInstanceGetInfo")
        if not isinstance(gi, _GpuInstanceHandle):
            raise pynvml.NVMLError_InvalidArgument()
        self._alive(gi.gpu)
        return SimpleNamespace(
            device=_Handle(gi.gpu),
            id=gi.mig.gi_id,
            profileId=gi.gpu.profiles[gi.mig.profile_index].id,
            placement=SimpleNamespace(start=gi.mig.placement_start, size=gi.mig.placement_size),
        )

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle, profile, version=2):
        self._call("nvmlDeviceGetGpuInstanceProfileInfo")
        gpu = self._mig_capable(handle)
        if not isinstance(profile, int) or not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise pynvml.NVMLError_InvalidArgument()
        if version not in (1, 2):
            raise pynvml.NVMLError_FunctionNotFound()
        info = gpu.profiles.get(profile)
        if info is None:
            raise pynvml.NVMLError_NotSupported()
        result = SimpleNamespace(
            id=info.id,
            isP2pSupported=0,
            sliceCount=info.slice_count,
            instanceCount=info.instance_count,
            multiprocessorCount=info.multiprocessors,
            copyEngineCount=info.copy_engines,
            decoderCount=info.decoders,
            encoderCount=info.encoders,
            jpegCount=info.jpegs,
            ofaCount=info.ofas,
            memorySizeMB=info.memory_mb,
        )
        if version == 2:
            result.version = pynvml.nvmlGpuInstanceProfileInfo_v2
            result.name = info.name.encode()
        return result

    # -- events ------------------------------------------------------------------------------

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        self._call("nvmlDeviceGetSupportedEventTypes")
        gpu = self._full(handle)
        return BASE_EVENTS | (ECC_EVENTS if gpu.ecc else 0)

    def nvmlEventSetCreate(self):
        self._call("nvmlEventSetCreate")
        event_set = _EventSet()
        with self._cond:
            self._sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(self, handle, mask, event_set):
        self._call("nvmlDeviceRegisterEvents")
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self._full(handle)
        supported = BASE_EVENTS | (ECC_EVENTS if gpu.ecc else 0)
        if mask & ~supported:
            raise pynvml.NVMLError_NotSupported()
        with self._cond:
            event_set.masks[gpu.uuid] = event_set.masks.get(gpu.uuid, 0) | mask

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        self._call("nvmlEventSetWait_v2")
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise pynvml.NVMLError_InvalidArgument()
        with self._cond:
            deadline_ok = self._cond.wait_for(
                lambda: event_set.queue or self._lost_registered(event_set), timeout=timeout_ms / 1000
            )
            if self._lost_registered(event_set):
                raise pynvml.NVMLError_GpuIsLost()
            if not deadline_ok or not event_set.queue:
                raise pynvml.NVMLError_Timeout()
            return event_set.queue.popleft()

    nvmlEventSetWait = nvmlEventSetWait_v2

    def _lost_registered(self, event_set: _EventSet) -> bool:
        return any(g.state == "lost" and g.uuid in event_set.masks for g in self.gpus)

    def nvmlEventSetFree(self, event_set):
        self._call("nvmlEventSetFree")
        if not isinstance(event_set, _EventSet) or event_set.freed:
            raise pynvml.NVMLError_InvalidArgument()
        with self._cond:
            event_set.freed = True
            self._sets.remove(event_set)
