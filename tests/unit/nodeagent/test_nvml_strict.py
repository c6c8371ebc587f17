"""The nvml backend against the strict NVML model (tests/nvmlmodel): discovery on machines modelled
on real hardware, event registration, a lost GPU, parent-level events on MIG GPUs, brand names,
inventory refresh. The discovery tests run against the real library too where a GPU exists
(test_real_nvml_discovery_contract)."""

from __future__ import annotations

import asyncio

import pynvml
import pytest
import yaml

from operators.nodeagent.backends.nvml import NvmlBackend
from operators.nodeagent.health import LOST, XID
from tests.nvmlmodel import dgx_a100_mixed_mig, geforce_workstation, h100_box, no_ecc_workstation
from tests.nvmlmodel.model import FULL
from tests.paths import ROOT

GOLDEN = ROOT / "tests" / "golden" / "nodeagent"
DRIVER = "gpu.nvidia.com"

# go-nvlib pkg/nvlib/device/device.go, (*device).GetBrandAsString
GO_NVLIB_BRANDS = {
    pynvml.NVML_BRAND_UNKNOWN: "Unknown",
    pynvml.NVML_BRAND_QUADRO: "Quadro",
    pynvml.NVML_BRAND_TESLA: "Tesla",
    pynvml.NVML_BRAND_NVS: "NVS",
    pynvml.NVML_BRAND_GRID: "Grid",
    pynvml.NVML_BRAND_GEFORCE: "GeForce",
    pynvml.NVML_BRAND_TITAN: "Titan",
    pynvml.NVML_BRAND_NVIDIA_VAPPS: "NvidiaVApps",
    pynvml.NVML_BRAND_NVIDIA_VPC: "NvidiaVPC",
    pynvml.NVML_BRAND_NVIDIA_VCS: "NvidiaVCS",
    pynvml.NVML_BRAND_NVIDIA_VWS: "NvidiaVWS",
    pynvml.NVML_BRAND_NVIDIA_CLOUD_GAMING: "NvidiaCloudGaming",
    pynvml.NVML_BRAND_QUADRO_RTX: "QuadroRTX",
    pynvml.NVML_BRAND_NVIDIA_RTX: "NvidiaRTX",
    pynvml.NVML_BRAND_NVIDIA: "Nvidia",
    pynvml.NVML_BRAND_GEFORCE_RTX: "GeForceRTX",
    pynvml.NVML_BRAND_TITAN_RTX: "TitanRTX",
}


def backend(model, **attrs) -> NvmlBackend:
    # The model's GPUs are in no sysfs (so the golden files do not depend on this machine's
    # /sys); pcieRoot and numaNode from sysfs are tested in test_deviceattribute.py.
    b = NvmlBackend(DRIVER, nvml=model, sysfs_root="/nonexistent-sysfs")
    for key, value in attrs.items():
        setattr(b, key, value)
    return b


def by_name(inventory) -> dict[str, dict]:
    return {d["name"]: d for d in inventory.devices}


class Watch:
    """The backend's watch() as a task, with its events collected."""

    def __init__(self, b: NvmlBackend):
        self.backend = b
        self.queue: asyncio.Queue = asyncio.Queue()
        self.changed = asyncio.Event()
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> Watch:
        self.task = asyncio.create_task(self.backend.watch(self.queue, self.changed))
        await asyncio.sleep(0.2)  # registration
        return self

    async def __aexit__(self, *exc) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        self.backend.close()

    def drain(self) -> list:
        out = []
        while not self.queue.empty():
            out.append(self.queue.get_nowait())
        return out

    async def next(self, timeout: float = 5.0):
        return await asyncio.wait_for(self.queue.get(), timeout)


# -- discovery -------------------------------------------------------------------------------


def test_dgx_a100_mixed_mig_devices_as_nvidia_names_them():
    """Profile IDs 9, 14, 19, 5, 20 are not profile indices: each MIG device reads its own profile."""
    devices = by_name(backend(dgx_a100_mixed_mig()).discover())
    assert list(devices) == [f"gpu-{i}" for i in range(6)] + [
        "gpu-6-mig-9-0-4",
        "gpu-6-mig-14-4-2",
        "gpu-6-mig-19-6-1",
        "gpu-7-mig-5-0-4",
        "gpu-7-mig-14-4-2",
        "gpu-7-mig-20-6-1",
    ]
    profiles = {n: d["attributes"]["profile"]["string"] for n, d in devices.items() if "mig" in n}
    assert profiles == {
        "gpu-6-mig-9-0-4": "3g.20gb",
        "gpu-6-mig-14-4-2": "2g.10gb",
        "gpu-6-mig-19-6-1": "1g.5gb",
        "gpu-7-mig-5-0-4": "4g.20gb",
        "gpu-7-mig-14-4-2": "2g.10gb",
        "gpu-7-mig-20-6-1": "1g.5gb+me",
    }
    small = devices["gpu-6-mig-19-6-1"]["capacity"]
    assert small["memory"] == {"value": str(4864 * 2**20)} and small["multiprocessors"] == {"value": "14"}
    me = devices["gpu-7-mig-20-6-1"]["capacity"]
    assert (me["decoders"], me["jpegEngines"], me["ofaEngines"]) == ({"value": "1"},) * 3
    assert devices["gpu-7-mig-5-0-4"]["capacity"]["multiprocessors"] == {"value": "56"}
    assert devices["gpu-0"]["attributes"]["brand"] == {"string": "Nvidia"}


def test_dgx_a100_golden_devices():
    """The discovered devices equal tests/golden/nodeagent/dgx-a100-mixed-mig.devices.yaml
    (input: dgx-a100-mixed-mig.input.yaml; UPDATE_GOLDEN=1 rewrites the output)."""
    import os

    devices = backend(dgx_a100_mixed_mig()).discover().devices
    path = GOLDEN / "dgx-a100-mixed-mig.devices.yaml"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(yaml.safe_dump(devices, sort_keys=True))
    assert devices == yaml.safe_load(path.read_text())


def test_geforce_card_without_mig_support_is_discovered():
    """nvmlDeviceGetMigMode raises NotSupported on GPUs that cannot do MIG."""
    [gpu] = backend(geforce_workstation()).discover().devices
    assert gpu["name"] == "gpu-0"
    assert gpu["attributes"]["brand"] == {"string": "GeForce"}
    assert gpu["attributes"]["architecture"] == {"string": "Ada Lovelace"}


def test_brand_names_are_go_nvlibs():
    model = geforce_workstation()
    b = backend(model)
    for value, name in GO_NVLIB_BRANDS.items():
        model.gpus[0].brand = value
        assert by_name(b.discover())["gpu-0"]["attributes"]["brand"] == {"string": name}, value


def test_h100_box_without_mig_publishes_whole_gpus():
    devices = by_name(backend(h100_box()).discover())
    assert list(devices) == [f"gpu-{i}" for i in range(8)]


# -- events ----------------------------------------------------------------------------------


async def test_gpu_without_ecc_is_monitored_for_xids_and_not_lost():
    """The event mask comes from nvmlDeviceGetSupportedEventTypes: no ECC types where there is no ECC."""
    model = no_ecc_workstation()
    b = backend(model)
    b.discover()
    async with Watch(b) as w:
        assert not [e for e in w.drain() if e.kind == LOST]
        model.xid(1, 79)
        event = await w.next()
        assert (event.device, event.kind, event.value) == ("gpu-1", XID, "79")


async def test_lost_gpu_one_event_per_state_change_and_back_off():
    model = h100_box()
    b = backend(model)
    b.discover()
    async with Watch(b) as w:
        before = model.calls["nvmlEventSetWait_v2"]
        model.lose(3)
        await asyncio.sleep(1.5)
        waits = model.calls["nvmlEventSetWait_v2"] - before
        events = w.drain()
    assert [(e.device, e.kind) for e in events] == [("gpu-3", LOST)]
    assert waits < 20, f"{waits} waits in 1.5 s: the event thread spins on GpuIsLost"


async def test_close_waits_for_the_event_thread_before_shutting_nvml_down():
    """As the agent stops: the watch task cancelled, then close(). NVML shut down under a
    thread still in nvmlEventSetWait made every GPU look lost (CI's log showed eight 'GPU lost'
    warnings from a test's teardown)."""
    model = h100_box()
    b = backend(model)
    b.discover()
    waiting = 0
    at_shutdown: list[int] = []
    wait, shutdown = model.nvmlEventSetWait_v2, model.nvmlShutdown

    def counted_wait(event_set, timeout_ms):
        nonlocal waiting
        waiting += 1
        try:
            return wait(event_set, timeout_ms)
        finally:
            waiting -= 1

    def recorded_shutdown():
        at_shutdown.append(waiting)
        shutdown()

    model.nvmlEventSetWait_v2, model.nvmlShutdown = counted_wait, recorded_shutdown
    async with Watch(b) as w:
        while not waiting:  # the thread is inside the wait (1 s at most per call)
            await asyncio.sleep(0.01)
    assert at_shutdown == [0]
    assert not [e for e in w.drain() if e.kind == LOST]


async def test_parent_level_event_on_a_mig_gpu_reaches_its_mig_devices():
    model = dgx_a100_mixed_mig()
    b = backend(model)
    b.discover()
    async with Watch(b) as w:
        model.xid(6, 79)  # the whole GPU: GPU and compute instance 0xFFFFFFFF
        got = {(await w.next()).device for _ in range(3)}
        assert got == {"gpu-6-mig-9-0-4", "gpu-6-mig-14-4-2", "gpu-6-mig-19-6-1"}
        model.xid(7, 48, gi=5, ci=FULL)  # one GPU instance, all its compute instances
        assert (await w.next()).device == "gpu-7-mig-14-4-2"
        model.xid(7, 43, gi=13, ci=0)
        event = await w.next()
        assert (event.device, event.value) == ("gpu-7-mig-20-6-1", "43")
        await asyncio.sleep(0.3)
        assert not w.drain()


# -- inventory refresh -----------------------------------------------------------------------


async def test_mig_reconfiguration_is_noticed_without_a_restart():
    from tests.nvmlmodel.model import MigInstance

    model = dgx_a100_mixed_mig()
    b = backend(model, refresh_interval=0.2)
    b.discover()
    async with Watch(b) as w:
        model.reconfigure(
            7,
            [
                MigInstance(
                    gi_id=0,
                    ci_id=0,
                    profile_index=pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
                    placement_start=0,
                    placement_size=8,
                    uuid="MIG-7g-0000-4000-8000-000000000007",
                )
            ],
        )
        await asyncio.wait_for(w.changed.wait(), 5)
        names = list(by_name(b.discover()))
    assert "gpu-7-mig-0-0-8" in names and not [n for n in names if n.startswith("gpu-7-mig-5")]


async def test_gpu_off_the_bus_and_back_is_noticed_and_republished():
    model = h100_box()
    b = backend(model, refresh_interval=0.2)
    b.discover()
    async with Watch(b) as w:
        model.remove(5)
        await asyncio.wait_for(w.changed.wait(), 5)
        w.changed.clear()
        assert "gpu-5" not in by_name(b.discover())
        model.restore(5)
        await asyncio.wait_for(w.changed.wait(), 5)
        assert "gpu-5" in by_name(b.discover())


async def test_lost_gpu_keeps_its_devices_and_comes_back():
    model = h100_box()
    b = backend(model, refresh_interval=0.2)
    b.discover()
    async with Watch(b) as w:
        model.lose(2)
        assert (await w.next()).device == "gpu-2"
        assert not b.healthy("gpu-2")
        assert "gpu-2" in by_name(b.discover())  # still published (tainted gpu-lost), not a failed discovery
        w.changed.clear()
        model.restore(2)
        await asyncio.wait_for(w.changed.wait(), 5)
        assert b.healthy("gpu-2")
        # Events are registered again once the monitor saw it come back (its refresh, in a thread):
        # an XID before that is lost, as with real NVML, so inject until one arrives.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            model.xid(2, 31)
            try:
                event = await w.next(timeout=0.5)
                break
            except TimeoutError:
                assert loop.time() < deadline, "no XID event from gpu-2 after it came back"
        assert (event.device, event.value) == ("gpu-2", "31")


# -- the same discovery contract on real hardware ---------------------------------------------


def test_real_nvml_discovery_contract():
    """Runs where NVML finds a GPU; the strict-model twins above always run."""
    try:
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as e:
        pytest.skip(f"needs an NVIDIA GPU and its driver (NVML: {e}); the strict-model tests cover this here")
    if count == 0:
        pytest.skip("needs an NVIDIA GPU: NVML reports none")
    b = NvmlBackend(DRIVER)
    devices = b.discover().devices
    assert devices and all(d["name"].startswith("gpu-") for d in devices)
    assert all(d["attributes"]["brand"]["string"] in GO_NVLIB_BRANDS.values() for d in devices)
    for d in devices:
        if d["attributes"]["type"]["string"] == "mig":
            assert d["attributes"]["profile"]["string"].split("+")[0].endswith("gb")
        # numaNode as the kernel reports it, absent for -1 (no NUMA affinity).
        bus_id = d["attributes"]["resource.kubernetes.io/pciBusID"]["string"]
        with open(f"/sys/bus/pci/devices/{bus_id}/numa_node") as f:
            kernel = int(f.read())
        expected = {"int": kernel} if kernel >= 0 else None
        assert d["attributes"].get("resource.kubernetes.io/numaNode") == expected, d["name"]
        root = d["attributes"].get("resource.kubernetes.io/pcieRoot")  # none where upstream finds none
        assert root is None or root["string"].startswith("pci"), d["name"]
    b.close()
