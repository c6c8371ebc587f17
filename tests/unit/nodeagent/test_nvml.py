"""The nvml backend's small pieces: version normalisation, the message without NVML, and the
eight-H100 machine the older tests used (now played by the strict NVML model). The strict-model
tests of discovery, events and refresh are in test_nodeagent_nvml_strict.py."""

import asyncio

import pynvml
import pytest

from operators.nodeagent.backends import BackendError
from operators.nodeagent.backends.nvml import NvmlBackend, semver
from operators.nodeagent.health import XID
from tests.nvmlmodel import eight_gpu_machine


def test_eight_h100s_one_with_mig():
    inv = NvmlBackend("gpu.nvidia.com", nvml=eight_gpu_machine()).discover()
    names = [d["name"] for d in inv.devices]
    assert names == [f"gpu-{i}" for i in range(7)] + ["gpu-7-mig-9-0-4", "gpu-7-mig-9-4-4", "gpu-7-mig-19-6-1"]
    gpu = inv.devices[0]
    assert gpu["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert gpu["attributes"]["architecture"] == {"string": "Hopper"}
    assert gpu["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu["attributes"]["driverVersion"] == {"version": "570.124.6"}
    assert gpu["attributes"]["cudaDriverVersion"] == {"version": "12.8.0"}
    assert gpu["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:18:00.0"}
    assert gpu["capacity"]["memory"] == {"value": str(80 * 2**30)}
    mig = inv.devices[-1]
    assert mig["attributes"]["type"] == {"string": "mig"} and mig["attributes"]["profile"] == {"string": "1g.10gb"}
    assert mig["attributes"]["parentUUID"] == {"string": eight_gpu_machine().gpu(7).uuid}


def test_semver_normalisation():
    assert semver("570.124.06") == "570.124.6" and semver("12.4") == "12.4.0" and semver("9") == "9.0.0"


async def test_xid_events_become_health_events_and_lost_gpu_fails_check():
    model = eight_gpu_machine()
    backend = NvmlBackend("gpu.nvidia.com", nvml=model)
    backend.discover()
    events: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(backend.watch(events, asyncio.Event()))
    await asyncio.sleep(0.2)
    model.xid(3, 79)
    model.xid(7, 48, gi=9, ci=0)
    first = await asyncio.wait_for(events.get(), 5)
    second = await asyncio.wait_for(events.get(), 5)
    assert (first.device, first.kind, first.value) == ("gpu-3", XID, "79")
    assert (second.device, second.value) == ("gpu-7-mig-19-6-1", "48")
    assert backend.healthy("gpu-3")
    model.lose(3)
    assert not backend.healthy("gpu-3")
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    backend.close()


def test_missing_nvml_says_what_to_install_or_choose():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a real NVML library is present on this machine; the missing-library path cannot be shown")
    with pytest.raises(BackendError) as info:
        NvmlBackend("gpu.nvidia.com")
    assert "install the NVIDIA driver" in str(info.value) and "DRA_NODEAGENT_BACKEND=simulated" in str(info.value)
