"""CDI that real containers can use, and coexistence with NVIDIA's DRA driver: the kubelet
plugin's prepare with the nvml backend on the strict NVML model (no kubelet, no API server)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from operators.nodeagent.backends.nvml import NvmlBackend
from operators.nodeagent.plugin.prepare import PrepareError
from operators.nodeagent.plugin.server import KubeletPlugin
from operators.nodeagent.plugin.state import DeviceState
from tests.fakeapi import FakeApi
from tests.nvmlmodel import dgx_a100_mixed_mig, h100_box

DRIVER, NODE = "gpu.nvidia.com", "node-a"


def claim(uid: str, devices: list[str]) -> dict:
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": "c"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
                }
            }
        },
    }


def toolkit_spec(directory: Path, model) -> Path:
    """What nvidia-ctk cdi generate writes: devices by index and UUID, MIG by <gpu>:<mig> and UUID."""
    devices = []
    for gpu in model.gpus:
        devices += [
            {"name": str(gpu.index), "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{gpu.minor}"}]}},
            {"name": gpu.uuid, "containerEdits": {"deviceNodes": [{"path": f"/dev/nvidia{gpu.minor}"}]}},
        ]
        for j, mig in enumerate(gpu.instances):
            devices += [{"name": f"{gpu.index}:{j}", "containerEdits": {}}, {"name": mig.uuid, "containerEdits": {}}]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvidia.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "cdiVersion": "0.5.0",
                "kind": "nvidia.com/gpu",
                "devices": devices,
                "containerEdits": {
                    "env": ["NVIDIA_VISIBLE_DEVICES=void"],
                    "mounts": [{"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"}],
                },
            }
        )
    )
    return path


@pytest.fixture
def setup(tmp_path):
    return _setup(tmp_path, h100_box())


@pytest.fixture
def mig_setup(tmp_path):
    return _setup(tmp_path, dgx_a100_mixed_mig())


def _setup(tmp_path, model):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "devices").write_text(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps\n\nBlock devices:\n  8 sd\n"
    )
    for parts, minor in ((("gi13",), 120), (("gi13", "ci0"), 121)):
        access = proc.joinpath("driver", "nvidia", "capabilities", "gpu6", "mig", *parts, "access")
        access.parent.mkdir(parents=True, exist_ok=True)
        access.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\n")
    backend = NvmlBackend(DRIVER, nvml=model, dev_root=str(tmp_path / "dev"), proc_root=str(proc))
    inventory = backend.discover()
    agent = SimpleNamespace(
        driver=DRIVER, node_name=NODE, backend=backend, node=None, published_devices=lambda: inventory.devices
    )

    def plugin(**kwargs) -> KubeletPlugin:
        return KubeletPlugin(
            agent,
            kube=FakeApi(),
            registry_dir=str(tmp_path / "reg"),
            plugins_dir=str(tmp_path / "plugins"),
            cdi_root=str(tmp_path / "cdi"),
            **kwargs,
        )

    def state(**kwargs) -> DeviceState:
        return DeviceState(
            agent, kube=FakeApi(), data_dir=tmp_path / "plugins" / DRIVER, cdi_root=tmp_path / "cdi", **kwargs
        )

    return SimpleNamespace(model=model, tmp=tmp_path, plugin=plugin, state=state)


def test_two_gpus_one_visible_devices_variable_and_the_toolkits_device_ids(setup):
    toolkit_spec(setup.tmp / "etc-cdi", setup.model)
    plugin = setup.state(toolkit_cdi_dirs=(str(setup.tmp / "etc-cdi"), str(setup.tmp / "nope")))
    record = plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c"}, claim("u1", ["gpu-0", "gpu-3"]))
    u0, u3 = setup.model.gpu(0).uuid, setup.model.gpu(3).uuid
    assert [d.cdiDeviceIDs for d in record.devices] == [
        [f"nvidia.com/gpu={u0}", "k8s.gpu.nvidia.com/claim=u1-gpu-0"],
        [f"nvidia.com/gpu={u3}", "k8s.gpu.nvidia.com/claim=u1-gpu-3"],
    ]
    spec = json.loads((setup.tmp / "cdi" / "k8s.gpu.nvidia.com-claim_u1.json").read_text())
    assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={u0},{u3}"]
    assert all("env" not in d["containerEdits"] for d in spec["devices"])
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}
    ]


def test_mig_devices_use_the_toolkits_mig_names_and_capability_nodes_carry_major_minor(mig_setup):
    setup = mig_setup
    toolkit_spec(setup.tmp / "run-cdi", setup.model)
    plugin = setup.state(toolkit_cdi_dirs=(str(setup.tmp / "run-cdi"),))
    record = plugin._prepare_claim({"uid": "u2", "namespace": "ns", "name": "c"}, claim("u2", ["gpu-6-mig-19-6-1"]))
    mig = setup.model.gpu(6).instances[2]
    assert record.devices[0].cdiDeviceIDs[0] == f"nvidia.com/gpu={mig.uuid}"
    spec = json.loads((setup.tmp / "cdi" / "k8s.gpu.nvidia.com-claim_u2.json").read_text())
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia6", "type": "c", "major": 195, "minor": 6},
        {"path": "/dev/nvidia-caps/nvidia-cap120", "type": "c", "major": 236, "minor": 120},
        {"path": "/dev/nvidia-caps/nvidia-cap121", "type": "c", "major": 236, "minor": 121},
    ]
    assert spec["containerEdits"]["env"] == [f"NVIDIA_VISIBLE_DEVICES={mig.uuid}"]


def test_without_the_toolkit_prepare_fails_saying_what_to_install(setup):
    plugin = setup.state(toolkit_cdi_dirs=(str(setup.tmp / "empty"),))
    with pytest.raises(PrepareError) as info:
        plugin._prepare_claim({"uid": "u3", "namespace": "ns", "name": "c"}, claim("u3", ["gpu-0"]))
    assert "NVIDIA Container Toolkit" in str(info.value) and "nvidia-ctk cdi generate" in str(info.value)
    assert "DRA_NODEAGENT_NVIDIA_CONTAINER_RUNTIME" in str(info.value)
    # Where nvidia-container-runtime is the runtime, NVIDIA_VISIBLE_DEVICES is enough.
    runtime = setup.state(toolkit_cdi_dirs=(str(setup.tmp / "empty"),), nvidia_runtime=True)
    record = runtime._prepare_claim({"uid": "u3", "namespace": "ns", "name": "c"}, claim("u3", ["gpu-0"]))
    assert record.devices[0].cdiDeviceIDs == ["k8s.gpu.nvidia.com/claim=u3-gpu-0"]


NVIDIA_CHECKPOINT = {"checksum": 1234567, "v1": {"preparedClaims": {}}, "v2": {"preparedClaims": {}}}


async def test_refuses_to_start_over_nvidias_checkpoint(setup):
    path = setup.tmp / "plugins" / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(NVIDIA_CHECKPOINT))
    plugin = setup.plugin()
    with pytest.raises(Exception) as info:
        await plugin.start()
    assert "NVIDIA's DRA driver" in str(info.value) and str(path) in str(info.value)
    assert json.loads(path.read_text()) == NVIDIA_CHECKPOINT  # untouched
    assert not (setup.tmp / "reg" / f"{DRIVER}-reg.sock").exists()


async def test_refuses_to_start_beside_a_live_plugin_socket(setup):
    sock_path = setup.tmp / "plugins" / DRIVER / "dra.sock"
    sock_path.parent.mkdir(parents=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(1)
    try:
        with pytest.raises(Exception) as info:
            await setup.plugin().start()
        assert "served by a running plugin" in str(info.value)
    finally:
        server.close()
