"""The simulated backend's ``nvidiaContainerToolkit: true`` hook: prepared GPUs also get the NVIDIA
Container Toolkit's CDI device IDs (by uuid, else index), as with real GPUs, so a stand-in
toolkit spec shows the container runtime resolving and injecting them (test_real_node)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import yaml

from operators.nodeagent.backends.simulated import SimulatedBackend
from operators.nodeagent.plugin.prepare import PrepareError
from operators.nodeagent.plugin.state import DeviceState
from tests.fakeapi import FakeApi

DRIVER, NODE = "gpu.sim.test", "node-a"


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


def setup(tmp_path, toolkit: bool, partitions: int = 0):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "gpus": [{"count": 2, "memory": "16Gi", "partitions": partitions}],
                **({"nvidiaContainerToolkit": True} if toolkit else {}),
            }
        )
    )
    backend = SimulatedBackend(str(inventory), NODE, DRIVER)
    found = backend.discover()
    agent = SimpleNamespace(
        driver=DRIVER, node_name=NODE, backend=backend, node=None, published_devices=lambda: found.devices
    )
    plugin = DeviceState(
        agent,
        kube=FakeApi(),
        data_dir=tmp_path / "p" / DRIVER,
        cdi_root=tmp_path / "cdi",
        toolkit_cdi_dirs=(str(tmp_path / "toolkit"),),
    )
    uuids = {d["name"]: d["attributes"]["uuid"]["string"] for d in found.devices}
    return backend, plugin, uuids


def toolkit_spec(tmp_path, names: list[str]) -> None:
    (tmp_path / "toolkit").mkdir(exist_ok=True)
    (tmp_path / "toolkit" / "nvidia.yaml").write_text(
        yaml.safe_dump(
            {
                "cdiVersion": "0.5.0",
                "kind": "nvidia.com/gpu",
                "devices": [{"name": n, "containerEdits": {"env": [f"T={n}"]}} for n in names],
            }
        )
    )


def test_without_the_hook_nothing_of_the_toolkit_is_needed(tmp_path):
    backend, plugin, _ = setup(tmp_path, toolkit=False)
    assert backend.toolkit_names("gpu-0") is None
    record = plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c"}, claim("u1", ["gpu-0"]))
    assert record.devices[0].cdiDeviceIDs == [f"k8s.{DRIVER}/claim=u1-gpu-0"]


def test_the_hook_names_gpus_by_uuid_then_index(tmp_path):
    backend, _, uuids = setup(tmp_path, toolkit=True, partitions=2)
    assert backend.toolkit_names("gpu-1") == [uuids["gpu-1"], "1"]
    assert backend.toolkit_names("gpu-1-part-0") == [uuids["gpu-1-part-0"]]  # no index of its own
    assert backend.toolkit_names("nope") is None


def test_prepared_gpus_get_the_toolkits_id_before_the_claims_own(tmp_path):
    _, plugin, uuids = setup(tmp_path, toolkit=True)
    toolkit_spec(tmp_path, [uuids["gpu-0"], "1"])  # gpu-0 by uuid, gpu-1 only by index
    record = plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c"}, claim("u1", ["gpu-0", "gpu-1"]))
    assert [d.cdiDeviceIDs for d in record.devices] == [
        [f"nvidia.com/gpu={uuids['gpu-0']}", f"k8s.{DRIVER}/claim=u1-gpu-0"],
        ["nvidia.com/gpu=1", f"k8s.{DRIVER}/claim=u1-gpu-1"],
    ]
    # The claim's spec names its devices as its own IDs do (not after the toolkit's, which come first).
    spec = json.loads((tmp_path / "cdi" / f"k8s.{DRIVER}-claim_u1.json").read_text())
    assert [d["name"] for d in spec["devices"]] == ["u1-gpu-0", "u1-gpu-1"]


def test_without_the_toolkits_spec_the_claim_fails_saying_what_to_install(tmp_path):
    _, plugin, _ = setup(tmp_path, toolkit=True)
    with pytest.raises(PrepareError, match="NVIDIA Container Toolkit"):
        plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c"}, claim("u1", ["gpu-0"]))


def test_a_device_the_toolkits_spec_does_not_name_fails_the_claim(tmp_path):
    _, plugin, _ = setup(tmp_path, toolkit=True)
    toolkit_spec(tmp_path, ["7"])
    with pytest.raises(PrepareError, match="regenerate it"):
        plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c"}, claim("u1", ["gpu-0"]))
