"""Fuzzing the node agent's decoders of outside input (hypothesis, tests/unit/fuzzing.py): opaque
configs and DeviceConfig from claims, the simulated inventory file, the checkpoint, CDI specs
read back, kubelet's gRPC requests. Each answers any input with a value of the types it promises
or its own error naming the input; never another exception, a hang or unbounded allocation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError
from hypothesis import strategies as st

from operators.nodeagent.backends.base import BackendError
from operators.nodeagent.backends.simulated import SimulatedBackend, build_inventory
from operators.nodeagent.plugin import cdi, checkpoint, opaque_config
from operators.nodeagent.plugin.kubeletapi import dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2
from operators.nodeagent.plugin.servicers import _claims
from tests.unit.fuzzing import bounded, deep_json, fuzz, json_values, objects_like, scratch, texts_around

DRIVER = "gpu.sim.dra-operators.dev"
ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


# -- opaque configs and DeviceConfig -------------------------------------------------------------


def _check_decoded(decoded: dict) -> None:
    import re

    assert set(decoded) <= {"env", "sharing"}
    for name, value in (decoded.get("env") or {}).items():
        assert re.fullmatch(ENV_NAME, name) and not name.startswith("DRA_"), name
        assert isinstance(value, str) and "\0" not in value, value
    if "sharing" in decoded:
        assert decoded["sharing"]["strategy"] in opaque_config.STRATEGIES + ("TimeSlicing",)


device_configs = st.fixed_dictionaries(
    {
        "apiVersion": st.sampled_from([opaque_config.API_VERSION, opaque_config.NVIDIA_API_VERSION, "v1"]),
        "kind": st.sampled_from([opaque_config.KIND, opaque_config.NVIDIA_KIND, "Other"]),
    },
    optional={
        "env": st.dictionaries(
            st.sampled_from(["A", "A\n", "DRA_X", "1A", "A=B", "NVIDIA_VISIBLE_DEVICES"])
            | texts_around("A", "DRA_", "_1", "\n", "=", "\0"),
            st.sampled_from(["x", "a\0b", ""]) | json_values | st.text(),
            max_size=4,
        )
        | json_values,
        "sharing": objects_like(
            "strategy",
            "timeSlicingConfig",
            "mpsConfig",
            values=st.sampled_from(["TimeSlicing", "Exclusive", "MPS", "Short"])
            | json_values
            | objects_like("interval"),
        ),
        "extra": json_values,
    },
)


@fuzz(
    parameters=device_configs
    | json_values
    | st.text(max_size=200)
    | st.binary(max_size=200)
    | device_configs.map(json.dumps)
    | deep_json
)
def test_fuzz_opaque_config(parameters):
    try:
        decoded = bounded(lambda: opaque_config.decode(parameters))
    except opaque_config.ConfigError as e:
        assert str(e)
    else:
        _check_decoded(decoded)


def _claim(entries: list) -> dict:
    return {
        "metadata": {"namespace": "ns", "name": "c"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"config": entries}}},
    }


# What the API server admits in status.allocation.devices.config: source, requests, opaque with a
# driver and parameters that are any JSON (a RawExtension), or none.
config_entries = st.fixed_dictionaries(
    {"source": st.sampled_from(["FromClass", "FromClaim"])},
    optional={
        "requests": st.lists(st.sampled_from(["gpu", "gpu/a", "other"]), max_size=3),
        "opaque": st.fixed_dictionaries(
            {"driver": st.sampled_from([DRIVER, "other.example.com"])},
            optional={"parameters": device_configs | json_values},
        ),
    },
)


@fuzz(entries=st.lists(config_entries, max_size=5), request=st.sampled_from(["gpu", "gpu/a", "other"]))
def test_fuzz_device_config(entries, request):
    claim = _claim(entries)
    try:
        configs = bounded(lambda: opaque_config.claim_configs(claim, DRIVER))
    except opaque_config.ConfigError as e:
        assert "ResourceClaim ns/c" in str(e) or "DeviceClass" in str(e), e
        return
    merged = opaque_config.for_request(configs, request)
    if merged is not None:
        _check_decoded(merged)


# -- the simulated backend's inventory file ------------------------------------------------------

groups = objects_like(
    "model",
    "memory",
    "count",
    "architecture",
    "partitions",
    "allowMultipleAllocations",
    "memoryPolicy",
    "bindingConditions",
    "bindingFailureConditions",
    "bindsToNode",
    "attributes",
    "numaNode",
    "pcieRoot",
    values=json_values
    | st.integers(-5, 5000)
    | st.sampled_from(["16Gi", "1", "-1Gi", "1e3", "pci0000:00"])
    | st.lists(st.integers(-2, 1025) | st.sampled_from(["pci0001:80", "x"]), max_size=4),
)
inventories = objects_like(
    "gpus",
    "nics",
    "devices",
    "nodes",
    "nvidiaContainerToolkit",
    values=st.lists(groups | json_values, max_size=3)
    | json_values
    | st.just(True)
    | st.dictionaries(
        st.sampled_from(["node-a", "node-b"]),
        objects_like("gpus", "devices", values=st.lists(groups, max_size=2)),
        max_size=2,
    ),
)


@fuzz(document=inventories | json_values)
def test_fuzz_inventory_document(document):
    inventory = bounded(lambda: build_inventory(document, "node-a", DRIVER))
    assert all(isinstance(e, str) and e for e in inventory.errors)
    for device in inventory.devices:
        assert isinstance(device, dict) and isinstance(device.get("name"), str), device
    json.dumps(inventory.devices + inventory.counter_sets)  # what goes to the API server is JSON


@fuzz(
    text=inventories.map(json.dumps)
    | st.text(max_size=300)
    | st.binary(max_size=300)
    | deep_json
    | texts_around("gpus:\n", "- count: ", "&a ", "*a", "[", "{", "!!python/object", "\t", "nodes:\n")
)
def test_fuzz_inventory_file(text):
    path = _write(scratch() / "inventory.yaml", text)
    backend = SimulatedBackend(str(path), "node-a", DRIVER)
    try:
        inventory = bounded(backend.discover)
    except BackendError as e:
        assert str(path) in str(e), e
    else:
        json.dumps(inventory.devices + inventory.counter_sets)


def _write(path: Path, content: str | bytes) -> Path:
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
    return path


# -- the checkpoint ------------------------------------------------------------------------------

prepared_devices = objects_like("pool", "device", "requestNames", "shareID", "adminAccess", "cdiDeviceIDs", "config")
prepared_claims = objects_like(
    "uid", "namespace", "name", "devices", values=json_values | st.lists(prepared_devices, max_size=3)
)
checkpoints = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["Checkpoint", "Other"]),
        "apiVersion": st.sampled_from([checkpoint.V1, checkpoint.V2, "v9"]),
    },
    optional={"preparedClaims": st.lists(prepared_claims, max_size=3) | json_values},
)


def _check_claims(claims: dict) -> None:
    for uid, claim in claims.items():
        assert isinstance(uid, str) and uid == claim.uid
        assert isinstance(claim.namespace, str) and isinstance(claim.name, str)
        for d in claim.devices:
            assert isinstance(d.pool, str) and isinstance(d.device, str), d
            assert isinstance(d.requestNames, list) and all(isinstance(n, str) for n in d.requestNames), d
            assert isinstance(d.cdiDeviceIDs, list) and all(isinstance(n, str) for n in d.cdiDeviceIDs), d
            assert d.shareID is None or isinstance(d.shareID, str), d
            assert isinstance(d.adminAccess, bool) and (d.config is None or isinstance(d.config, dict)), d
    checkpoint.encode(claims)  # what was read can be written back


@fuzz(
    content=checkpoints.map(json.dumps)
    | st.binary(max_size=300)
    | st.text(max_size=300)
    | deep_json
    | texts_around('{"kind": "Checkpoint", ', '"apiVersion": "' + checkpoint.V2 + '"', "[" * 50, "}", ",")
)
def test_fuzz_checkpoint_file(content):
    path = _write(scratch() / "checkpoint.json", content)
    try:
        claims = bounded(lambda: checkpoint.load(path))
    except checkpoint.CheckpointCorrupt as e:
        assert str(path) in str(e), e
    else:
        _check_claims(claims)


@fuzz(document=checkpoints | json_values)
def test_fuzz_checkpoint_document(document):
    try:
        claims = bounded(lambda: checkpoint.decode(document))
    except checkpoint.CheckpointCorrupt as e:
        assert str(e)
    else:
        _check_claims(claims)


# -- CDI specs read back (a lost checkpoint is rebuilt from them) ---------------------------------

annotation_values = json_values.map(json.dumps) | st.text(max_size=50) | prepared_devices.map(json.dumps) | deep_json
specs = objects_like(
    "cdiVersion",
    "kind",
    "annotations",
    "devices",
    values=json_values
    | st.dictionaries(st.sampled_from([cdi.CLAIM_ANNOTATION, "x"]), annotation_values, max_size=2)
    | st.lists(
        objects_like(
            "name",
            "annotations",
            "containerEdits",
            values=json_values
            | st.dictionaries(st.sampled_from([cdi.DEVICE_ANNOTATION, "x"]), annotation_values, max_size=2),
        ),
        max_size=3,
    ),
)


@fuzz(contents=st.lists(specs.map(json.dumps) | st.binary(max_size=200) | deep_json, max_size=3))
def test_fuzz_cdi_specs_read_back(contents):
    root = scratch()
    for i, content in enumerate(contents):
        _write(root / cdi.spec_file_name(DRIVER, f"uid-{i}"), content)
    read = bounded(lambda: cdi.read_claim_specs(root, DRIVER))
    assert len(read) <= len(contents)
    _check_claims(bounded(lambda: checkpoint.rebuild_from_cdi(read)))


@fuzz(documents=st.lists(specs | json_values, max_size=3))
def test_fuzz_checkpoint_rebuilt_from_cdi(documents):
    _check_claims(bounded(lambda: checkpoint.rebuild_from_cdi(documents)))


# -- kubelet's gRPC requests ---------------------------------------------------------------------

MESSAGES = [
    dra_v1_pb2.NodePrepareResourcesRequest,
    dra_v1_pb2.NodeUnprepareResourcesRequest,
    dra_v1beta1_pb2.NodePrepareResourcesRequest,
    dra_v1beta1_pb2.NodeUnprepareResourcesRequest,
    pluginregistration_v1_pb2.InfoRequest,
    pluginregistration_v1_pb2.RegistrationStatus,
]


def _valid_request(claims: list[tuple[str, str, str]]) -> bytes:
    request = dra_v1_pb2.NodePrepareResourcesRequest()
    for namespace, uid, name in claims:
        request.claims.add(namespace=namespace, uid=uid, name=name)
    return request.SerializeToString()


wire = st.binary(max_size=300) | st.lists(
    st.tuples(st.text(max_size=20), st.text(max_size=20), st.text(max_size=20)), max_size=4
).map(_valid_request)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m.DESCRIPTOR.file.package}.{m.__name__}")
def test_fuzz_grpc_requests(message):
    @fuzz(data=wire | wire.map(lambda b: b[: len(b) // 2] + b"\xff" + b[len(b) // 2 :]))
    def test_fuzz_grpc_request(data):
        try:
            request = bounded(lambda: message.FromString(data))
        except DecodeError:
            return
        if hasattr(request, "claims"):
            claims = _claims(request)
            assert all(isinstance(v, str) for c in claims for v in c.values())

    test_fuzz_grpc_request.__name__ = f"test_fuzz_grpc_request[{message.__name__}]"
    test_fuzz_grpc_request()
