"""The kubelet plugin's prepared state on disk: CDI specs kept as the checkpoint says (restored,
orphans undone), durable writes, and a serialization lock that a cancelled call never keeps."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
import yaml

from operators.nodeagent.backends.nvml import NvmlBackend
from operators.nodeagent.backends.simulated import SimulatedBackend
from operators.nodeagent.plugin import cdi, checkpoint, durable, reconcile
from operators.nodeagent.plugin.opaque_config import API_VERSION, KIND
from operators.nodeagent.plugin.state import DeviceState
from tests.fakeapi import FakeApi
from tests.nvmlmodel import h100_box

NODE = "node-a"
NV = "gpu.nvidia.com"


def make_plugin(root: Path, backend, driver: str) -> DeviceState:
    found = backend.discover()
    agent = SimpleNamespace(
        driver=driver, node_name=NODE, backend=backend, node=None, published_devices=lambda: found.devices
    )
    return DeviceState(agent, kube=FakeApi(), data_dir=root / "p" / driver, cdi_root=root / "cdi", nvidia_runtime=True)


def nvml_claim(uid: str, device: str, strategy: str | None = "Exclusive") -> dict:
    config = (
        [
            {
                "source": "FromClaim",
                "opaque": {
                    "driver": NV,
                    "parameters": {"apiVersion": API_VERSION, "kind": KIND, "sharing": {"strategy": strategy}},
                },
            }
        ]
        if strategy
        else []
    )
    return {
        "metadata": {"uid": uid, "namespace": "ns", "name": f"c-{uid}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpu", "driver": NV, "pool": NODE, "device": device}],
                    "config": config,
                }
            }
        },
    }


def prepare(plugin: DeviceState, uid: str, device: str, strategy: str | None = "Exclusive"):
    """What a prepare does on disk and on the device, up to (not including) the checkpoint."""
    return plugin._prepare_claim({"uid": uid, "namespace": "ns", "name": f"c-{uid}"}, nvml_claim(uid, device, strategy))


@pytest.fixture
def root():
    # Short: the plugin's socket paths are checked against sun_path's 107 characters.
    return Path(tempfile.mkdtemp(prefix="ps-", dir="/tmp"))


# -- the decision --------------------------------------------------------------------------------


def test_plan_writes_missing_unreadable_and_different_specs_and_finds_orphans():
    spec = {"kind": "k", "devices": [{"name": "a"}]}
    plan = reconcile.plan_specs(
        expected={"same": spec, "gone": spec, "torn": spec, "edited": spec},
        on_disk={"same": spec, "torn": None, "edited": {**spec, "devices": []}, "orphan": spec, "unbuildable": spec},
        prepared={"same", "gone", "torn", "edited", "unbuildable", "v1-entry"},
    )
    assert plan.write == {"gone": reconcile.MISSING, "torn": reconcile.UNREADABLE, "edited": reconcile.DIFFERS}
    # A prepared claim whose spec cannot be built now is neither rewritten nor removed.
    assert plan.orphans == ["orphan"]
    assert not reconcile.plan_specs({"same": spec}, {"same": spec}, {"same"})


# -- level-triggered specs and device configuration ----------------------------------------------


async def test_a_lost_spec_is_written_again_and_the_compute_mode_applied_again(root):
    model = h100_box()
    gpu = model.gpus[0]
    plugin = make_plugin(root, NvmlBackend(NV, nvml=model, dev_root=str(root / "dev"), proc_root=str(root)), NV)
    await plugin.recover()
    plugin.prepared["u1"] = prepare(plugin, "u1", f"gpu-{gpu.minor}")
    checkpoint.save(plugin.checkpoint_path, plugin.prepared)
    spec_path = plugin._spec_path("u1")
    written = spec_path.read_text()
    await plugin.check_specs()  # nothing changed that matters: left alone
    assert spec_path.read_text() == written

    # A toolkit reinstall: the CDI directory rewritten without our spec, the GPU reset.
    spec_path.unlink()
    gpu.compute_mode = pynvml.NVML_COMPUTEMODE_DEFAULT
    await plugin.check_specs()
    assert spec_path.read_text() == written
    assert gpu.compute_mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS

    # Changed in place (an admin's edit): written again as the checkpoint says.
    spec = json.loads(written)
    spec["devices"][0]["containerEdits"]["env"] = ["NVIDIA_VISIBLE_DEVICES=all"]
    spec_path.write_text(json.dumps(spec))
    await plugin.check_specs()
    assert json.loads(spec_path.read_text()) == json.loads(written)


async def test_a_restarted_agent_restores_specs_of_its_checkpoint(root):
    model = h100_box()
    backend = NvmlBackend(NV, nvml=model, dev_root=str(root / "dev"), proc_root=str(root))
    plugin = make_plugin(root, backend, NV)
    await plugin.recover()
    plugin.prepared["u1"] = prepare(plugin, "u1", f"gpu-{model.gpus[1].minor}")
    checkpoint.save(plugin.checkpoint_path, plugin.prepared)
    for path in plugin.cdi_root.iterdir():
        path.unlink()
    model.gpus[1].compute_mode = pynvml.NVML_COMPUTEMODE_DEFAULT
    again = make_plugin(root, backend, NV)
    await again.recover()
    assert again._spec_path("u1").is_file()
    assert model.gpus[1].compute_mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS


async def test_crash_between_the_spec_and_the_checkpoint_is_undone_at_start(root):
    """A prepare that wrote its spec and set the compute mode, then died before saving the
    checkpoint: the next start removes the spec and gives the GPU its default mode back."""
    model = h100_box()
    backend = NvmlBackend(NV, nvml=model, dev_root=str(root / "dev"), proc_root=str(root))
    plugin = make_plugin(root, backend, NV)
    await plugin.recover()
    plugin.prepared["kept"] = prepare(plugin, "kept", f"gpu-{model.gpus[0].minor}")
    checkpoint.save(plugin.checkpoint_path, plugin.prepared)
    prepare(plugin, "lost", f"gpu-{model.gpus[1].minor}")  # ... and the agent is killed here
    assert model.gpus[1].compute_mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS

    again = make_plugin(root, backend, NV)
    await again.recover()
    assert sorted(cdi.spec_files(again.cdi_root, NV)) == ["kept"]
    assert model.gpus[1].compute_mode == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert model.gpus[0].compute_mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    assert list(again.prepared) == ["kept"]


async def test_a_removed_checkpoint_is_rebuilt_from_the_specs_not_read_as_empty(root):
    model = h100_box()
    backend = NvmlBackend(NV, nvml=model, dev_root=str(root / "dev"), proc_root=str(root))
    plugin = make_plugin(root, backend, NV)
    await plugin.recover()
    plugin.prepared["u1"] = prepare(plugin, "u1", f"gpu-{model.gpus[0].minor}")
    checkpoint.save(plugin.checkpoint_path, plugin.prepared)
    plugin.checkpoint_path.unlink()
    again = make_plugin(root, backend, NV)
    await again.recover()
    assert list(again.prepared) == ["u1"] and again._spec_path("u1").is_file()
    assert [c["uid"] for c in json.loads(again.checkpoint_path.read_text())["preparedClaims"]] == ["u1"]


async def test_a_prepared_claim_whose_gpu_is_gone_keeps_its_spec_and_the_agent_starts(root):
    model = h100_box()
    backend = NvmlBackend(NV, nvml=model, dev_root=str(root / "dev"), proc_root=str(root))
    plugin = make_plugin(root, backend, NV)
    await plugin.recover()
    plugin.prepared["u1"] = prepare(plugin, "u1", f"gpu-{model.gpus[0].minor}")
    record = plugin.prepared["u1"]
    record.devices[0].device = "gpu-99"  # as if the GPU fell off the bus since
    checkpoint.save(plugin.checkpoint_path, plugin.prepared)
    written = plugin._spec_path("u1").read_text()
    again = make_plugin(root, backend, NV)
    await again.recover()
    await again.check_specs()
    assert again._spec_path("u1").read_text() == written and list(again.prepared) == ["u1"]


def test_a_failed_configuration_leaves_no_spec(root):
    model = h100_box()
    plugin = make_plugin(root, NvmlBackend(NV, nvml=model, dev_root=str(root / "dev"), proc_root=str(root)), NV)
    claim = nvml_claim("u1", f"gpu-{model.gpus[0].minor}")
    claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"] = {
        "strategy": "TimeSlicing",
        "timeSlicingConfig": {"interval": "Long"},
    }
    with pytest.raises(Exception, match="time-slice length"):
        plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c-u1"}, claim)
    assert not cdi.spec_files(plugin.cdi_root, NV)


# -- durability ----------------------------------------------------------------------------------


def test_durable_writes_replace_whole_files_and_leave_no_temporary_one(root):
    """(The fsync of the directory after the rename cannot be seen without a power cut; checked
    with strace once, see the commit.)"""
    target = root / "d" / "file.json"
    durable.write_text(target, "{}")
    durable.write_text(target, '{"a": 1}')
    assert target.read_text() == '{"a": 1}' and oct(target.stat().st_mode & 0o777) == "0o600"
    assert durable.remove(target) and not durable.remove(target)
    checkpoint.save(root / "c" / "checkpoint.json", {})
    cdi.write_spec(root / "cdi", "k8s.x-claim_u.json", {"kind": "x"})
    assert oct((root / "cdi" / "k8s.x-claim_u.json").stat().st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in root.rglob("*") if p.is_file()) == ["checkpoint.json", "k8s.x-claim_u.json"]


# -- the serialization lock ----------------------------------------------------------------------


async def test_a_call_cancelled_while_another_instance_holds_the_lock_keeps_nothing(root):
    inventory = root / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"gpus": [{"count": 1}]}))
    plugin = make_plugin(root, SimulatedBackend(str(inventory), NODE, "gpu.sim.test"), "gpu.sim.test")
    plugin.data_dir.mkdir(parents=True)
    other = os.open(plugin.lock_path, os.O_RDWR | os.O_CREAT, 0o600)  # the other instance's
    fcntl.flock(other, fcntl.LOCK_EX)

    async def call():
        async with plugin._serialized():
            pass

    waiting = asyncio.create_task(call())
    try:
        while not plugin._lock.locked():  # it has its in-process turn: now it waits for the file lock
            await asyncio.sleep(0.01)
        waiting.cancel()  # kubelet's deadline
        with pytest.raises(asyncio.CancelledError):
            await waiting
        os.close(other)  # the other instance is done
        # The next call gets the lock (before the fix a thread took it for the cancelled caller and
        # held it for good); a generous bound only to end a failing run.
        await asyncio.wait_for(call(), timeout=30)
        await asyncio.wait_for(call(), timeout=30)
    finally:
        for fd in os.listdir("/proc/self/fd"):  # a failing run's stray lock, so the test ends
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == str(plugin.lock_path):
                    os.close(int(fd))
            except OSError:
                pass
