"""A fake NVML: pynvml's function names and constants over an in-memory machine, so that the
``nvml`` backend runs through its real code without a GPU. Constants and error classes are
pynvml's own (the package imports without a GPU)."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

GIB = 2**30


@dataclass
class FakeMig:
    gi_id: int
    ci_id: int
    profile_id: int
    placement_start: int
    placement_size: int
    slice_count: int
    memory_mb: int
    multiprocessors: int
    uuid: str


@dataclass
class FakeGpu:
    minor: int
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory: int = 80 * GIB
    bus_id: str = ""
    brand: int = pynvml.NVML_BRAND_NVIDIA
    arch: int = pynvml.NVML_DEVICE_ARCH_HOPPER
    cc: tuple[int, int] = (9, 0)
    migs: list[FakeMig] = field(default_factory=list)
    lost: bool = False


class FakeNVML:
    def __init__(self, gpus: list[FakeGpu], driver_version: str = "570.124.06", cuda: int = 12080):
        self.gpus = gpus
        self.driver_version = driver_version
        self.cuda = cuda
        self.initialised = False
        self.events: "queue.Queue[SimpleNamespace]" = queue.Queue()
        self.registered: set[str] = set()
        for name in dir(pynvml):  # constants and error classes, exactly as the real module has them
            if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
                setattr(self, name, getattr(pynvml, name))

    # -- helpers for tests -------------------------------------------------------------------

    def inject_xid(self, minor: int, xid: int, gi: int = 0xFFFFFFFF, ci: int = 0xFFFFFFFF) -> None:
        self.events.put(SimpleNamespace(device=("gpu", minor), eventType=pynvml.nvmlEventTypeXidCriticalError,
                                        eventData=xid, gpuInstanceId=gi, computeInstanceId=ci))

    def _gpu(self, handle) -> FakeGpu:
        minor = handle[1]
        gpu = next(g for g in self.gpus if g.minor == minor)
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        return gpu

    # -- pynvml's API ------------------------------------------------------------------------

    def nvmlInit(self):
        self.initialised = True

    def nvmlShutdown(self):
        self.initialised = False

    def nvmlSystemGetDriverVersion(self):
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.cuda

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", self.gpus[index].minor)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                if gpu.lost:
                    raise pynvml.NVMLError_GpuIsLost()
                return ("gpu", gpu.minor)
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceGetMinorNumber(self, handle):
        return self._gpu(handle).minor

    def nvmlDeviceGetUUID(self, handle):
        if handle[0] == "mig":
            return self._mig(handle).uuid
        return self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle).name

    def nvmlDeviceGetBrand(self, handle):
        return self._gpu(handle).brand

    def nvmlDeviceGetArchitecture(self, handle):
        return self._gpu(handle).arch

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        return self._gpu(handle).cc

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        return SimpleNamespace(total=self._gpu(handle).memory)

    def nvmlDeviceGetPciInfo_v3(self, handle):
        gpu = self._gpu(handle)
        return SimpleNamespace(busId=gpu.bus_id or f"00000000:{0x18 + 0x10 * gpu.minor:02X}:00.0")

    def nvmlDeviceGetMigMode(self, handle):
        enabled = pynvml.NVML_DEVICE_MIG_ENABLE if self._gpu(handle).migs else pynvml.NVML_DEVICE_MIG_DISABLE
        return enabled, enabled

    def nvmlDeviceGetMaxMigDeviceCount(self, handle):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index):
        gpu = self._gpu(handle)
        if index >= len(gpu.migs):
            raise pynvml.NVMLError_NotFound()
        return ("mig", gpu.minor, index)

    def _mig(self, handle) -> FakeMig:
        return self._gpu(("gpu", handle[1])).migs[handle[2]]

    def nvmlDeviceGetGpuInstanceId(self, handle):
        return self._mig(handle).gi_id

    def nvmlDeviceGetComputeInstanceId(self, handle):
        return self._mig(handle).ci_id

    def nvmlDeviceGetGpuInstanceById(self, handle, gi_id):
        gpu = self._gpu(handle)
        return next(("gi", gpu.minor, i) for i, m in enumerate(gpu.migs) if m.gi_id == gi_id)

    def nvmlGpuInstanceGetInfo(self, gi):
        mig = self._gpu(("gpu", gi[1])).migs[gi[2]]
        return SimpleNamespace(id=mig.gi_id, profileId=mig.profile_id,
                               placement=SimpleNamespace(start=mig.placement_start, size=mig.placement_size))

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle, profile, version=2):
        mig = next(m for m in self._gpu(handle).migs if m.profile_id == profile)
        return SimpleNamespace(id=profile, sliceCount=mig.slice_count, memorySizeMB=mig.memory_mb,
                               multiprocessorCount=mig.multiprocessors)

    def nvmlEventSetCreate(self):
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle, mask, event_set):
        self.registered.add(self._gpu(handle).uuid)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        try:
            event = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise pynvml.NVMLError_Timeout() from None
        return event

    def nvmlEventSetFree(self, event_set):
        pass


def eight_gpu_machine() -> FakeNVML:
    """Eight H100s; GPU 7 with MIG on (two 3g.40gb and one 1g.10gb instances)."""
    gpus = [FakeGpu(minor=i, uuid=f"GPU-{i:08x}-0000-4000-8000-00000000000{i}") for i in range(8)]
    gpus[7].migs = [
        FakeMig(gi_id=1, ci_id=0, profile_id=9, placement_start=0, placement_size=4, slice_count=3,
                memory_mb=40192, multiprocessors=60, uuid="MIG-70000000-0000-4000-8000-000000000001"),
        FakeMig(gi_id=2, ci_id=0, profile_id=9, placement_start=4, placement_size=4, slice_count=3,
                memory_mb=40192, multiprocessors=60, uuid="MIG-70000000-0000-4000-8000-000000000002"),
        FakeMig(gi_id=9, ci_id=0, profile_id=19, placement_start=6, placement_size=1, slice_count=1,
                memory_mb=9856, multiprocessors=16, uuid="MIG-70000000-0000-4000-8000-000000000009"),
    ]
    return FakeNVML(gpus)
