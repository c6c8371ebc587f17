"""Device metadata files (KEP-5304): the document and its encoding against upstream's golden
compatibility data (k8s.io/dynamic-resource-allocation@v0.37.1, api/metadata/testdata, copied to
data/device_metadata/upstream-*.json, as kubeletplugin/metadata_compatibility_test.go checks
them), the paths, and what prepare, unprepare and the recovery paths do with the files."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from operators.core.dra.devicemetadata import check_versions, parse_versions
from operators.core.settings import Settings, SettingsError
from operators.nodeagent.backends.simulated import SimulatedBackend
from operators.nodeagent.metrics import Metrics
from operators.nodeagent.plugin import cdi, checkpoint, metadata
from operators.nodeagent.plugin.state import DeviceState

from .test_device_state import DRIVER, NODE, ClaimsApi, claim, ref

DATA = Path(__file__).parent / "data" / "device_metadata"
UPSTREAM = sorted(DATA.glob("upstream-*.json"))


# -- the document against upstream's compatibility data --------------------------------------


@pytest.mark.parametrize("fixture", UPSTREAM, ids=lambda p: p.stem)
def test_upstream_streams_decode_and_encode_again_byte_for_byte(fixture: Path):
    """metadata_compatibility_test.go's round trip: decoding and encoding a stream keeps its bytes
    (Go's indentation, key order, its \\u003c escapes, a newline after each object)."""
    data = fixture.read_text()
    documents = metadata.decode_stream(data)
    versions = tuple(d["apiVersion"].split("/")[1] for d in documents)
    assert versions in (("v1beta1", "v1alpha1"), ("v1alpha1",))
    body = {k: v for k, v in documents[0].items() if k not in ("kind", "apiVersion")}
    assert metadata.encode_stream(body, versions) == data


def test_the_built_document_is_upstreams_head_in_the_fields_a_plugin_writes():
    """buildDeviceMetadata sets name, namespace, uid, generation, podClaimName and the request
    with its devices (never the other ObjectMeta fields, nor networkData: no network devices
    here); with HEAD's values it gives HEAD's document in those fields, in the same order."""
    head = metadata.decode_stream((DATA / "upstream-HEAD.json").read_text())[0]
    device = head["requests"][0]["devices"][0]
    built = metadata.build_device_metadata(
        device["driver"],
        {k: head["metadata"][k] for k in ("namespace", "name", "uid")},
        head["requests"][0]["name"],
        [{"pool": device["pool"], "name": device["name"], "attributes": device["attributes"]}],
        pod_claim=head["podClaimName"],
        generation=head["metadata"]["generation"],
    )
    expected = {
        "metadata": {k: head["metadata"][k] for k in ("name", "namespace", "uid", "generation")},
        "podClaimName": head["podClaimName"],
        "requests": [{"name": "request", "devices": [{k: v for k, v in device.items() if k != "networkData"}]}],
    }
    assert json.dumps(built) == json.dumps(expected)  # order too
    assert metadata.encode_stream(built, ("v1beta1",)).startswith('{\n  "kind": "DeviceMetadata",\n')


# The file prepare writes for a realistic claim; the same bytes came out of upstream's own code
# (decoded and validated by devicemetadata.DecodeMetadataFromStream, encoded again by the
# scheme's pretty JSON serializer for v1beta1 then v1alpha1, as metadataWriter does).
GOLDEN = DATA / "golden-template-claim.json"


def golden_document() -> dict:
    return metadata.build_device_metadata(
        "gpu.sim.dra-operators.dev",
        {"namespace": "team-a", "name": "trainer-gpu-x7k2p", "uid": "0a1b2c3d-0000-4000-8000-000000000001"},
        "gpu/large",
        [
            {
                "pool": "node-a",
                "name": "gpu-1",
                "attributes": {
                    "uuid": {"string": "GPU-SIM-node-a-1"},
                    "index": {"int": 1},
                    "productName": {"string": "Simulated <GPU> & co"},
                    "driverVersion": {"version": "550.54.15"},
                    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
                    "mig": {"bool": False},
                },
            },
            {"pool": "node-a", "name": "gpu-2"},
        ],
        pod_claim="gpu",
    )


def test_the_file_of_a_template_claim_matches_the_golden_file():
    assert metadata.encode_stream(golden_document(), ("v1beta1", "v1alpha1")) == GOLDEN.read_text()


def test_attributes_are_sorted_by_name_and_their_fields_in_gos_order():
    [request] = golden_document()["requests"]
    attributes = request["devices"][0]["attributes"]
    assert list(attributes) == sorted(attributes)
    assert list(
        metadata.build_device_metadata(
            "d",
            {"namespace": "n", "name": "c"},
            "r",
            [{"pool": "p", "name": "x", "attributes": {"a": {"strings": ["s"], "int": 1}}}],
        )["requests"][0]["devices"][0]["attributes"]["a"]
    ) == ["int", "strings"]


def test_a_claim_of_its_own_has_no_pod_claim_name_and_a_request_without_devices_none():
    document = metadata.build_device_metadata("d", {"namespace": "n", "name": "c", "uid": "u"}, "r", [])
    assert document == {
        "metadata": {"name": "c", "namespace": "n", "uid": "u", "generation": 1},
        "requests": [{"name": "r"}],
    }


def test_a_torn_stream_does_not_read():
    assert metadata.decode_stream('{"a": 1}\n{"b": 2}\n') == [{"a": 1}, {"b": 2}]
    with pytest.raises(ValueError):
        metadata.decode_stream('{"a": 1}\n{"b"')


# -- paths -----------------------------------------------------------------------------------


def test_paths_as_upstream_lays_them_out():
    data = Path("/var/lib/kubelet/plugins/gpu.example.com")
    assert metadata.host_path(data, "ns", "claim", "gpu/large") == Path(
        "/var/lib/kubelet/plugins/gpu.example.com/dra-device-metadata/ns_claim/gpu/metadata.json"
    )
    assert (
        metadata.container_path("gpu.example.com", "claim", "gpu/large")
        == "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/claim/gpu/gpu.example.com-metadata.json"
    )
    assert (
        metadata.container_path("gpu.example.com", "pod-gpu-x7k2p", "gpu", pod_claim="my-gpu")
        == "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/my-gpu/gpu/"
        "gpu.example.com-metadata.json"
    )
    assert metadata.mount(Path("/h"), "/c") == {"hostPath": "/h", "containerPath": "/c", "options": ["ro", "bind"]}
    assert metadata.pod_claim_name({"metadata": {"annotations": {metadata.POD_CLAIM_ANNOTATION: "g"}}}) == "g"


# -- the setting -----------------------------------------------------------------------------


def test_the_setting_takes_upstreams_versions_and_needs_the_latest():
    assert Settings().nodeagent_device_metadata == "v1beta1"
    assert parse_versions("v1beta1, v1alpha1") == ("v1beta1", "v1alpha1") and parse_versions("off") == ()
    assert check_versions(("v1beta1", "v1alpha1")) is None and check_versions(()) is None
    assert "latest" in check_versions(("v1alpha1",))
    assert "not a metadata version" in check_versions(("v1",))
    assert "twice" in check_versions(("v1beta1", "v1beta1"))
    assert Settings.from_env({"DRA_NODEAGENT_DEVICE_METADATA": "off"}).nodeagent_device_metadata == "off"
    with pytest.raises(SettingsError, match="DRA_NODEAGENT_DEVICE_METADATA='v1alpha1'.*latest"):
        Settings.from_env({"DRA_NODEAGENT_DEVICE_METADATA": "v1alpha1"})


# -- prepare, unprepare and recovery ---------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"gpus": [{"count": 4, "memory": "16Gi"}]}))
    backend = SimulatedBackend(str(inventory), NODE, DRIVER)
    found = backend.discover()
    agent = SimpleNamespace(
        driver=DRIVER,
        node_name=NODE,
        backend=backend,
        metrics=Metrics(),
        node=None,
        published_devices=lambda: found.devices,
    )
    api = ClaimsApi()
    data_dir = tmp_path / "plugin" / DRIVER

    def state(versions: tuple[str, ...] = ("v1beta1",)) -> DeviceState:
        return DeviceState(agent, api, data_dir=data_dir, cdi_root=tmp_path / "cdi", device_metadata=versions)

    return SimpleNamespace(agent=agent, api=api, state=state, cdi=tmp_path / "cdi", data=data_dir, found=found)


def two_request_claim(name: str = "two", uid: str | None = None) -> dict:
    """gpus (two devices, allocated as subrequest gpus/big) and extra (one device); made from a template."""
    c = claim(name, ["gpu-0", "gpu-1", "gpu-2"], uid=uid)
    results = c["status"]["allocation"]["devices"]["results"]
    results[0]["request"] = results[1]["request"] = "gpus/big"
    results[2]["request"] = "extra"
    c["metadata"]["annotations"] = {metadata.POD_CLAIM_ANNOTATION: "pod-gpus"}
    return c


def spec(world, uid: str) -> dict:
    return json.loads((world.cdi / cdi.spec_file_name(DRIVER, uid)).read_text())


async def test_prepare_writes_a_file_per_request_and_mounts_it_on_the_requests_first_device(world):
    state = world.state()
    await state.recover()
    c = world.api.add(two_request_claim())
    [result] = (await state.prepare([ref(c)])).values()
    assert result.error == ""
    gpus = world.data / "dra-device-metadata" / "ns_two" / "gpus" / "metadata.json"
    extra = world.data / "dra-device-metadata" / "ns_two" / "extra" / "metadata.json"
    [document] = metadata.decode_stream(gpus.read_text())
    assert document["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
    assert document["metadata"] == {"name": "two", "namespace": "ns", "uid": "uid-two", "generation": 1}
    assert document["podClaimName"] == "pod-gpus"
    [request] = document["requests"]
    assert request["name"] == "gpus/big"  # as allocated; the path has the top-level request
    published = {d["name"]: d for d in world.found.devices}
    assert [(d["driver"], d["pool"], d["name"]) for d in request["devices"]] == [
        (DRIVER, NODE, "gpu-0"),
        (DRIVER, NODE, "gpu-1"),
    ]
    assert request["devices"][0]["attributes"] == dict(sorted(published["gpu-0"]["attributes"].items()))
    assert [d["name"] for d in metadata.decode_stream(extra.read_text())[0]["requests"][0]["devices"]] == ["gpu-2"]
    assert gpus.stat().st_mode & 0o777 == 0o644
    mounts = [d["containerEdits"].get("mounts") for d in spec(world, "uid-two")["devices"]]
    inside = f"/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/pod-gpus/%s/{DRIVER}-metadata.json"
    assert mounts == [
        [{"hostPath": str(gpus), "containerPath": inside % "gpus", "options": ["ro", "bind"]}],
        None,
        [{"hostPath": str(extra), "containerPath": inside % "extra", "options": ["ro", "bind"]}],
    ]
    assert state.prepared["uid-two"].metadata == checkpoint.MetadataRecord(
        versions=["v1beta1"], podClaimName="pod-gpus", requests={"gpus": "gpus/big", "extra": "extra"}
    )


async def test_both_versions_newest_first_and_a_claim_of_its_own_under_resourceclaims(world):
    state = world.state(("v1beta1", "v1alpha1"))
    await state.recover()
    c = world.api.add(claim("own", ["gpu-3"]))
    await state.prepare([ref(c)])
    path = world.data / "dra-device-metadata" / "ns_own" / "gpus" / "metadata.json"
    documents = metadata.decode_stream(path.read_text())
    assert [d["apiVersion"].split("/")[1] for d in documents] == ["v1beta1", "v1alpha1"]
    assert "podClaimName" not in documents[0]
    [device] = spec(world, "uid-own")["devices"]
    assert device["containerEdits"]["mounts"][0]["containerPath"] == (
        f"/var/run/kubernetes.io/dra-device-attributes/resourceclaims/own/gpus/{DRIVER}-metadata.json"
    )


async def test_off_writes_no_file_and_no_mount(world):
    state = world.state(())
    await state.recover()
    c = world.api.add(claim("plain", ["gpu-0"]))
    await state.prepare([ref(c)])
    assert not (world.data / "dra-device-metadata").exists()
    [device] = spec(world, "uid-plain")["devices"]
    assert "mounts" not in device["containerEdits"]
    assert "metadata" not in json.loads(spec(world, "uid-plain")["annotations"][cdi.CLAIM_ANNOTATION])


async def test_unprepare_removes_the_claims_directory(world):
    state = world.state()
    await state.recover()
    c = world.api.add(two_request_claim())
    await state.prepare([ref(c)])
    assert await state.unprepare([ref(c)]) == {"uid-two": ""}
    assert not (world.data / "dra-device-metadata" / "ns_two").exists()


async def test_a_lost_file_is_written_again_with_an_event(world):
    state = world.state()
    await state.recover()
    c = world.api.add(two_request_claim())
    await state.prepare([ref(c)])
    path = world.data / "dra-device-metadata" / "ns_two" / "extra" / "metadata.json"
    before = path.read_text()
    path.unlink()
    await state.check_specs()
    assert path.read_text() == before
    await state.events.flush()
    assert [e["reason"] for e in world.api.events] == ["DeviceMetadataRestored"]
    path.write_text('{"torn')  # unreadable: written again too
    await state.check_specs()
    assert path.read_text() == before


async def test_a_repeated_prepare_restores_a_lost_file(world):
    state = world.state()
    await state.recover()
    c = world.api.add(claim("again", ["gpu-0"]))
    await state.prepare([ref(c)])
    path = world.data / "dra-device-metadata" / "ns_again" / "gpus" / "metadata.json"
    path.unlink()
    await state.prepare([ref(c)])
    assert path.exists()


async def test_a_restart_removes_directories_of_claims_not_prepared_and_keeps_the_others(world):
    state = world.state()
    await state.recover()
    kept = world.api.add(claim("kept", ["gpu-0"]))
    await state.prepare([ref(kept)])
    stale = world.data / "dra-device-metadata" / "ns_gone" / "gpus"
    stale.mkdir(parents=True)
    (stale / "metadata.json").write_text("{}")
    await world.state().recover()
    assert sorted(metadata.claim_dirs(world.data)) == ["ns_kept"]


async def test_a_lost_checkpoint_keeps_the_metadata_record_from_the_spec(world):
    state = world.state()
    await state.recover()
    c = world.api.add(two_request_claim())
    await state.prepare([ref(c)])
    recorded = state.prepared["uid-two"]
    (world.data / "checkpoint.json").unlink()
    restarted = world.state(())  # the record, not today's setting, says what the claim has
    await restarted.recover()
    assert restarted.prepared["uid-two"] == recorded
    assert (world.data / "dra-device-metadata" / "ns_two" / "gpus" / "metadata.json").exists()


async def test_a_replaced_claim_of_the_same_name_keeps_its_directory(world):
    """The directory is named by namespace and name (as upstream's): unpreparing the old claim
    must not take the files of the new one, prepared before kubelet unprepared the old."""
    state = world.state()
    await state.recover()
    old = world.api.add(claim("same", ["gpu-0"], uid="uid-old"))
    await state.prepare([ref(old)])
    new = world.api.add(claim("same", ["gpu-1"], uid="uid-new"))
    await state.prepare([ref(new)])
    assert await state.unprepare([ref(old)]) == {"uid-old": ""}
    path = world.data / "dra-device-metadata" / "ns_same" / "gpus" / "metadata.json"
    assert metadata.decode_stream(path.read_text())[0]["metadata"]["uid"] == "uid-new"


def test_the_checkpoint_round_trips_the_record_and_omits_it_when_off():
    claims = {
        "a": checkpoint.PreparedClaim(uid="a", metadata=checkpoint.MetadataRecord(["v1beta1"], "p", {"r": "r/s"})),
        "b": checkpoint.PreparedClaim(uid="b"),
    }
    document = checkpoint.encode(claims)
    assert "metadata" not in document["preparedClaims"][1]
    assert checkpoint.decode(json.loads(json.dumps(document))) == claims
    document["preparedClaims"][0]["metadata"]["versions"] = "v1beta1"
    with pytest.raises(checkpoint.CheckpointCorrupt, match="versions"):
        checkpoint.decode(document)
