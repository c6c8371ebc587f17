"""Opaque device configuration: strict decoding, upstream's order (class, then claim, per
request), another driver's config left alone, and what each backend does with it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pynvml
import pytest
import yaml

from operators.nodeagent.backends.nvml import NvmlBackend
from operators.nodeagent.backends.simulated import SimulatedBackend
from operators.nodeagent.plugin import opaque_config
from operators.nodeagent.plugin.opaque_config import API_VERSION, KIND, ConfigError
from operators.nodeagent.plugin.prepare import PrepareError, plan_claim
from operators.nodeagent.plugin.state import DeviceState
from tests.fakeapi import FakeApi
from tests.nvmlmodel import dgx_a100_mixed_mig, h100_box

DRIVER, NODE = "gpu.sim.test", "node-a"


def ours(**fields) -> dict:
    return {"apiVersion": API_VERSION, "kind": KIND, **fields}


def claim(configs: list[dict], results: list[tuple[str, str]] | None = None, driver: str = DRIVER) -> dict:
    return {
        "metadata": {"uid": "u1", "namespace": "ns", "name": "c"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "sim-gpu"}},
                    {"name": "other", "exactly": {"deviceClassName": "sim-other"}},
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": r, "driver": driver, "pool": NODE, "device": d}
                        for r, d in results or [("gpu", "gpu-0")]
                    ],
                    "config": configs,
                }
            }
        },
    }


def entry(source: str, parameters, requests: list[str] | None = None, driver: str = DRIVER) -> dict:
    e = {"source": source, "opaque": {"driver": driver, "parameters": parameters}}
    if requests:
        e["requests"] = requests
    return e


def test_decoding_our_kind_and_nvidias():
    assert opaque_config.decode(
        ours(env={"A": "1"}, sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}})
    ) == {"env": {"A": "1"}, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    assert opaque_config.decode(json.dumps(ours(sharing={"strategy": "Exclusive"}))) == {
        "sharing": {"strategy": "Exclusive"}
    }
    nvidia = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Default"}},
    }
    assert opaque_config.decode(nvidia)["sharing"]["strategy"] == "TimeSlicing"


@pytest.mark.parametrize(
    "parameters, message",
    [
        (ours(envv={}), "unknown field envv"),
        (
            ours(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Long"}}),
            "unknown field sharing.timeSlicingConfig.intervall",
        ),
        (ours(sharing={"strategy": "Sometimes"}), "sharing.strategy: 'Sometimes' is not one of Exclusive, TimeSlicing"),
        (
            ours(sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}),
            "sharing.timeSlicingConfig.interval: 'Forever'",
        ),
        (ours(sharing={"strategy": "Exclusive", "timeSlicingConfig": {}}), "only with strategy TimeSlicing"),
        (ours(env={"A": 1}), "env.A: 1 is not a string"),
        (ours(env={"DRA_X": "1"}), "env.DRA_X: names starting with DRA_"),
        (ours(env={"1A": "x"}), "env.1A: not a variable name"),
        ({"apiVersion": "gpu.example.com/v1", "kind": "GpuConfig"}, "is not a configuration this driver understands"),
        (
            {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "MPS"}},
            "MPS is not supported",
        ),
        ("{not json", "parameters are not JSON"),
    ],
)
def test_strict_decoding_names_the_field(parameters, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        opaque_config.decode(parameters)


def test_class_first_then_claim_per_request_merged_field_by_field():
    configs = opaque_config.claim_configs(
        claim(
            [
                entry("FromClaim", ours(env={"B": "claim", "C": "claim"}), ["gpu"]),
                entry("FromClass", ours(env={"A": "class", "B": "class"}, sharing={"strategy": "Exclusive"})),
                entry("FromClaim", ours(sharing={"strategy": "TimeSlicing"}), ["other"]),
            ]
        ),
        DRIVER,
    )
    assert [c.where.split(" (")[0] for c in configs] == [
        "DeviceClass sim-gpu, sim-other",
        "ResourceClaim ns/c spec.devices.config[0]",
        "ResourceClaim ns/c spec.devices.config[1]",
    ]
    assert opaque_config.for_request(configs, "gpu") == {
        "env": {"A": "class", "B": "claim", "C": "claim"},
        "sharing": {"strategy": "Exclusive"},
    }
    assert opaque_config.for_request(configs, "other") == {
        "env": {"A": "class", "B": "class"},
        "sharing": {"strategy": "TimeSlicing"},
    }
    # A subrequest takes its parent request's configs.
    assert opaque_config.for_request(configs, "gpu/small")["env"]["C"] == "claim"


def test_another_drivers_config_is_left_alone_even_when_we_would_refuse_it():
    configs = opaque_config.claim_configs(
        claim(
            [
                entry(
                    "FromClaim",
                    {"apiVersion": "gpu.example.com/v1", "kind": "Whatever", "x": 1},
                    driver="gpu.example.com",
                ),
                entry("FromClaim", ours(env={"MINE": "yes"})),
            ]
        ),
        DRIVER,
    )
    assert [c.where for c in configs] == ["ResourceClaim ns/c spec.devices.config[1]"]
    assert opaque_config.for_request(configs, "gpu") == {"env": {"MINE": "yes"}}
    assert opaque_config.for_request([], "gpu") is None


def test_a_bad_config_fails_the_claims_prepare_naming_field_and_source():
    bad = claim([entry("FromClass", ours(sharing={"strategy": "TimeSlicing", "bogus": True}), ["gpu"])])
    with pytest.raises(PrepareError) as failed:
        plan_claim(
            bad,
            {"uid": "u1", "namespace": "ns", "name": "c"},
            driver=DRIVER,
            node=NODE,
            known_devices={"gpu-0"},
            prepared={},
        )
    assert "unknown field sharing.bogus" in str(failed.value)
    assert "DeviceClass sim-gpu (config[0] of ResourceClaim ns/c's allocation)" in str(failed.value)


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"])
def test_nvidia_variables_are_refused_naming_claim_variable_and_fix(name):
    """CDI applies a device's edits after the spec's, so a config's NVIDIA_VISIBLE_DEVICES would
    win over the one the driver sets for the claim's devices (and the toolkit grants devices for
    other NVIDIA_* variables): refused, for the class's configs and the claim's alike."""
    for source in ("FromClass", "FromClaim"):
        bad = claim([entry(source, ours(env={"FINE": "1", name: "all"}))])
        with pytest.raises(PrepareError) as failed:
            plan_claim(
                bad,
                {"uid": "u1", "namespace": "ns", "name": "c"},
                driver=DRIVER,
                node=NODE,
                known_devices={"gpu-0"},
                prepared={},
            )
        message = str(failed.value)
        assert "ResourceClaim ns/c" in message and f"env.{name}: names starting with NVIDIA_ are reserved" in message
        assert f"remove env.{name} from the configuration" in message
    assert opaque_config.decode(ours(env={"nvidia_visible_devices": "x", "MY_NVIDIA_HOME": "y"}))["env"]


def test_simulated_devices_show_the_merged_config_in_the_environment(tmp_path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"gpus": [{"count": 2}]}))
    backend = SimulatedBackend(str(inventory), NODE, DRIVER)
    found = backend.discover()
    agent = SimpleNamespace(
        driver=DRIVER, node_name=NODE, backend=backend, node=None, published_devices=lambda: found.devices
    )
    plugin = DeviceState(agent, kube=FakeApi(), data_dir=tmp_path / "p" / DRIVER, cdi_root=tmp_path / "cdi")
    c = claim(
        [
            entry("FromClass", ours(env={"A": "class", "B": "class"})),
            entry(
                "FromClaim",
                ours(
                    env={"B": "claim"}, sharing={"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}
                ),
            ),
        ]
    )
    record = plugin._prepare_claim({"uid": "u1", "namespace": "ns", "name": "c"}, c)
    assert record.devices[0].config["env"] == {"A": "class", "B": "claim"}
    spec = json.loads((tmp_path / "cdi" / f"k8s.{DRIVER}-claim_u1.json").read_text())
    env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
    assert (env["A"], env["B"]) == ("class", "claim")
    assert env["DRA_DEVICE_GPU_0_SHARING_STRATEGY"] == "TimeSlicing"
    assert env["DRA_DEVICE_GPU_0_TIMESLICE_INTERVAL"] == "Short"


def nvml_plugin(tmp_path, model):
    backend = NvmlBackend("gpu.nvidia.com", nvml=model, dev_root=str(tmp_path / "dev"), proc_root=str(tmp_path))
    found = backend.discover()
    agent = SimpleNamespace(
        driver="gpu.nvidia.com", node_name=NODE, backend=backend, node=None, published_devices=lambda: found.devices
    )
    return DeviceState(
        agent,
        kube=FakeApi(),
        data_dir=tmp_path / "p" / "gpu.nvidia.com",
        cdi_root=tmp_path / "cdi",
        nvidia_runtime=True,
    )


def nvml_claim(uid: str, device: str, sharing: dict | None) -> dict:
    c = claim(
        [entry("FromClaim", ours(sharing=sharing), driver="gpu.nvidia.com")] if sharing else [],
        [("gpu", device)],
        driver="gpu.nvidia.com",
    )
    c["metadata"]["uid"] = uid
    return c


def test_nvml_exclusive_and_time_slicing_set_the_compute_mode(tmp_path):
    model = h100_box()
    plugin = nvml_plugin(tmp_path, model)
    gpu = model.gpus[0]
    plugin._prepare_claim(
        {"uid": "u1", "namespace": "ns", "name": "c"}, nvml_claim("u1", f"gpu-{gpu.minor}", {"strategy": "Exclusive"})
    )
    assert gpu.compute_mode == pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    plugin.prepared["u1"] = plugin._prepare_claim(
        {"uid": "u1", "namespace": "ns", "name": "c"}, nvml_claim("u1", f"gpu-{gpu.minor}", {"strategy": "Exclusive"})
    )
    plugin._release_configs(plugin.prepared.pop("u1"))  # what unprepare does
    assert gpu.compute_mode == pynvml.NVML_COMPUTEMODE_DEFAULT
    gpu.compute_mode = pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS
    plugin._prepare_claim(
        {"uid": "u2", "namespace": "ns", "name": "c"}, nvml_claim("u2", f"gpu-{gpu.minor}", {"strategy": "TimeSlicing"})
    )
    assert gpu.compute_mode == pynvml.NVML_COMPUTEMODE_DEFAULT
    other = model.gpus[1]
    other.compute_mode = pynvml.NVML_COMPUTEMODE_PROHIBITED
    plugin._prepare_claim({"uid": "u3", "namespace": "ns", "name": "c"}, nvml_claim("u3", f"gpu-{other.minor}", None))
    assert other.compute_mode == pynvml.NVML_COMPUTEMODE_PROHIBITED  # no sharing config: left alone


def test_nvml_refuses_what_it_cannot_apply(tmp_path):
    model = dgx_a100_mixed_mig()
    plugin = nvml_plugin(tmp_path, model)
    full = next(g for g in model.gpus if not g.mig_enabled)
    with pytest.raises(PrepareError, match="NVML has no call for the time-slice length"):
        plugin._prepare_claim(
            {"uid": "u1", "namespace": "ns", "name": "c"},
            nvml_claim(
                "u1", f"gpu-{full.minor}", {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}
            ),
        )
    mig = next(d["name"] for d in plugin.agent.published_devices() if "-mig-" in d["name"])
    with pytest.raises(PrepareError, match="MIG devices cannot be shared"):
        plugin._prepare_claim(
            {"uid": "u2", "namespace": "ns", "name": "c"}, nvml_claim("u2", mig, {"strategy": "Exclusive"})
        )
