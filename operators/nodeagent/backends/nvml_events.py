"""NVML's event loop for the nvml backend: registration, waiting, lost GPUs, inventory changes.

It runs in a thread of its own (``nvmlEventSetWait_v2`` blocks) and reports through two callbacks:
``put(HealthEvent)`` and ``changed()`` (discovery may find something new).

Following NVIDIA's DRA driver (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/device_health.go,
``registerEventsForDevices`` and ``run``), where this differs:

- The mask registered per GPU is the wanted types (XID, double- and single-bit ECC) intersected
  with ``nvmlDeviceGetSupportedEventTypes``: NVML refuses a whole mask holding a type the GPU
  does not support (ECC events on a GPU without ECC or with ECC off). A GPU that supports none of
  them is reported unmonitored (logged), not lost.
- ``nvmlEventSetWait`` does not say which GPU is lost when it raises GpuIsLost, and raises it on
  every call while that GPU stays registered. Each registered GPU is probed; the lost ones get
  one LOST event per device (one per state change, not per wait) and the event set is rebuilt
  without them, so the others stay monitored and nothing spins. Errors are retried with an
  exponential back-off (0.5 s to 30 s).
- An event for a whole GPU (GPU instance 0xFFFFFFFF) of a GPU with MIG on concerns every MIG
  device on it; an event for a GPU instance (compute instance 0xFFFFFFFF) every MIG device of
  that instance. NVIDIA's driver looks the whole GPU up and, as it is not published while MIG is
  on, drops the event.
- Every ``refresh_interval`` seconds the lost GPUs are probed again (one that answers is
  registered again) and the inventory's fingerprint is compared with discovery's: MIG
  reconfiguration, a GPU gone from the bus or back set ``changed``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from ..health import ECC, LOST, XID, HealthEvent

log = structlog.stdlib.get_logger("operators.nodeagent.nvml")

FULL = 0xFFFFFFFF
WAIT_MS = 1000
BACKOFF = (0.5, 30.0)


@dataclass
class GpuView:
    """One GPU as the last discovery saw it."""

    uuid: str
    index: int
    minor: int
    mig: bool
    devices: list[str]  # published names (the GPU, or its MIG devices)
    instances: dict[tuple[int, int], str] = field(default_factory=dict)  # (gi, ci) -> MIG device name


def affected(gpu: GpuView, gi: int, ci: int) -> list[str]:
    """The published devices an event for (GPU instance ``gi``, compute instance ``ci``) concerns."""
    if gi == FULL:
        return list(gpu.devices)
    if ci == FULL:
        return [name for (g, _), name in sorted(gpu.instances.items()) if g == gi]
    name = gpu.instances.get((gi, ci))
    return [name] if name else []


def health_events(nvml: Any, event: Any, gpu: GpuView) -> list[HealthEvent]:
    """An NVML event as health events for the devices it concerns."""
    if event.eventType == nvml.nvmlEventTypeXidCriticalError:
        kind, value = XID, str(event.eventData)
    elif event.eventType == nvml.nvmlEventTypeDoubleBitEccError:
        kind, value = ECC, "double-bit"
    elif event.eventType == nvml.nvmlEventTypeSingleBitEccError:
        kind, value = ECC, "single-bit"
    else:
        return []
    return [HealthEvent(device, kind, value) for device in affected(gpu, event.gpuInstanceId, event.computeInstanceId)]


class Backoff:
    def __init__(self, first: float = BACKOFF[0], most: float = BACKOFF[1]):
        self.first, self.most, self.current = first, most, 0.0

    def next(self) -> float:
        self.current = self.first if not self.current else min(self.most, self.current * 2)
        return self.current

    def reset(self) -> None:
        self.current = 0.0


class EventMonitor:
    def __init__(
        self,
        nvml: Any,
        gpus: Callable[[], dict[str, GpuView]],
        fingerprint: Callable[[], Any],
        known_fingerprint: Callable[[], Any],
        put: Callable[[HealthEvent], None],
        changed: Callable[[], None],
        stop: threading.Event,
        refresh_interval: float,
    ):
        self.nvml = nvml
        self.gpus = gpus
        self.fingerprint = fingerprint
        self.known_fingerprint = known_fingerprint
        self.put = put
        self.changed = changed
        self.stop = stop
        self.refresh_interval = refresh_interval
        self.wanted = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeSingleBitEccError
        )
        self.registered: set[str] = set()
        self.unmonitored: set[str] = set()
        self.lost: set[str] = set()
        self.event_set: Any = None
        self.backoff = Backoff()

    # -- registration --------------------------------------------------------------------------

    def _new_event_set(self) -> None:
        if self.event_set is not None:
            try:
                self.nvml.nvmlEventSetFree(self.event_set)
            except self.nvml.NVMLError as e:
                log.warning("freeing the NVML event set failed", error=str(e))
        self.event_set = self.nvml.nvmlEventSetCreate()
        self.registered = set()
        self.unmonitored = set()

    def _register(self, gpus: dict[str, GpuView]) -> None:
        nvml = self.nvml
        for uuid, gpu in gpus.items():
            if uuid in self.registered or uuid in self.lost or uuid in self.unmonitored:
                continue
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                mask = self.wanted & nvml.nvmlDeviceGetSupportedEventTypes(handle)
                if not mask:
                    self.unmonitored.add(uuid)
                    log.warning("GPU supports none of the health events; not monitored", gpu=uuid)
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, mask, self.event_set)
                self.registered.add(uuid)
            except nvml.NVMLError_GpuIsLost:
                self._mark_lost(gpu)
            except nvml.NVMLError_NotFound:
                continue  # gone from the bus: the next discovery drops it
            except nvml.NVMLError as e:
                self.unmonitored.add(uuid)
                log.warning("cannot register health events; GPU not monitored", gpu=uuid, error=str(e))

    def _answers(self, uuid: str) -> bool:
        try:
            self.nvml.nvmlDeviceGetMemoryInfo(self.nvml.nvmlDeviceGetHandleByUUID(uuid))
            return True
        except self.nvml.NVMLError:
            return False

    def _mark_lost(self, gpu: GpuView) -> None:
        if gpu.uuid in self.lost:
            return
        self.lost.add(gpu.uuid)
        log.warning("GPU lost", gpu=gpu.uuid, minor=gpu.minor, devices=gpu.devices)
        for device in gpu.devices:
            self.put(HealthEvent(device, LOST))

    def _on_gpu_lost(self, gpus: dict[str, GpuView]) -> None:
        """nvmlEventSetWait said a GPU is lost, not which: probe, then rebuild the set without it."""
        newly = [g for u, g in gpus.items() if u in self.registered and not self._answers(u)]
        for gpu in newly:
            self._mark_lost(gpu)
        if newly:
            self._new_event_set()
            self._register(gpus)
            self.backoff.reset()
        else:
            self._sleep(self.backoff.next())

    # -- refresh -------------------------------------------------------------------------------

    def _refresh(self, gpus: dict[str, GpuView]) -> None:
        back = [u for u in self.lost if self._answers(u)]
        for uuid in back:
            self.lost.discard(uuid)
            log.info("lost GPU answers again", gpu=uuid)
        if back:
            self._new_event_set()  # its registration died with it
            self._register(gpus)
            self.changed()
            return
        try:
            now = self.fingerprint()
        except self.nvml.NVMLError as e:
            log.debug("inventory fingerprint failed", error=str(e))
            return
        if now != self.known_fingerprint():
            # GPUs gone or back, MIG reconfigured: a GPU that left the bus lost its registration,
            # it is registered again when discovery finds it back.
            self.registered &= {uuid for uuid, _migs in now}
            self.changed()

    # -- the loop ------------------------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        self.stop.wait(seconds)

    def run(self) -> None:
        nvml = self.nvml
        self._new_event_set()
        next_refresh = time.monotonic() + self.refresh_interval
        try:
            while not self.stop.is_set():
                gpus = self.gpus()
                self._register(gpus)
                if time.monotonic() >= next_refresh:
                    next_refresh = time.monotonic() + self.refresh_interval
                    self._refresh(gpus)
                    continue
                if not self.registered:
                    self._sleep(min(self.refresh_interval, WAIT_MS / 1000))
                    continue
                wait_ms = int(max(1, min(WAIT_MS, (next_refresh - time.monotonic()) * 1000)))
                try:
                    event = nvml.nvmlEventSetWait_v2(self.event_set, wait_ms)
                except nvml.NVMLError_Timeout:
                    self.backoff.reset()
                    continue
                except nvml.NVMLError_GpuIsLost:
                    self._on_gpu_lost(gpus)
                    continue
                except nvml.NVMLError as e:
                    delay = self.backoff.next()
                    log.warning("waiting for NVML events failed, retrying", error=str(e), retry_in=delay)
                    self._sleep(delay)
                    continue
                self.backoff.reset()
                try:
                    uuid = nvml.nvmlDeviceGetUUID(event.device)
                except nvml.NVMLError as e:
                    log.warning("event of a device whose UUID cannot be read", error=str(e))
                    continue
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                gpu = gpus.get(uuid)
                if gpu is None:
                    continue
                for health_event in health_events(nvml, event, gpu):
                    self.put(health_event)
        finally:
            try:
                nvml.nvmlEventSetFree(self.event_set)
            except nvml.NVMLError:
                pass
