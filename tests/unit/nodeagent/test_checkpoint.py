import json

import pytest

from operators.nodeagent.plugin import cdi, checkpoint
from operators.nodeagent.plugin.checkpoint import PreparedClaim, PreparedDevice


def sample() -> dict:
    return {
        "u1": PreparedClaim(
            uid="u1",
            namespace="ns",
            name="c1",
            devices=[
                PreparedDevice(pool="n", device="gpu-0", requestNames=["gpu"], cdiDeviceIDs=["k8s.d/claim=u1-gpu-0"]),
                PreparedDevice(pool="n", device="gpu-1", requestNames=["gpu"], shareID="s1", adminAccess=True),
            ],
        )
    }


def test_round_trip(tmp_path):
    path = tmp_path / "checkpoint.json"
    checkpoint.save(path, sample())
    document = json.loads(path.read_text())
    assert document["kind"] == "Checkpoint" and document["apiVersion"] == checkpoint.V2
    assert checkpoint.load(path) == sample()
    checkpoint.save(path, {})
    assert "preparedClaims" not in json.loads(path.read_text())
    assert checkpoint.load(tmp_path / "missing.json") == {}


def test_v1_is_read_and_upgraded(tmp_path):
    path = tmp_path / "checkpoint.json"
    path.write_text(
        json.dumps(
            {"kind": "Checkpoint", "apiVersion": checkpoint.V1, "preparedClaims": [{"uid": "old-1"}, {"uid": "old-2"}]}
        )
    )
    claims = checkpoint.load(path)
    assert set(claims) == {"old-1", "old-2"} and claims["old-1"].devices == []
    checkpoint.save(path, claims)
    assert json.loads(path.read_text())["apiVersion"] == checkpoint.V2


@pytest.mark.parametrize(
    "text",
    [
        "{",
        '{"kind": "Other"}',
        '{"kind": "Checkpoint", "apiVersion": "x/v9"}',
        '{"kind": "Checkpoint", "apiVersion": "checkpoint.nodeagent.dra-operators.dev/v2",'
        ' "preparedClaims": [{"no-uid": 1}]}',
    ],
)
def test_corrupt_checkpoints_are_reported(tmp_path, text):
    path = tmp_path / "checkpoint.json"
    path.write_text(text)
    with pytest.raises(checkpoint.CheckpointCorrupt):
        checkpoint.load(path)


def test_rebuild_from_cdi_specs():
    claim = sample()["u1"]
    spec = cdi.build_claim_spec(
        "d",
        {"uid": "u1", "namespace": "ns", "name": "c1"},
        [
            {
                "cdi_name": f"u1-{d.device}",
                "edits": {},
                "record": {
                    "pool": d.pool,
                    "device": d.device,
                    "requestNames": d.requestNames,
                    "shareID": d.shareID,
                    "adminAccess": d.adminAccess,
                    "cdiDeviceIDs": d.cdiDeviceIDs,
                },
            }
            for d in claim.devices
        ],
    )
    assert checkpoint.rebuild_from_cdi([spec, {"not": "ours"}]) == {"u1": claim}


def test_rebuild_skips_specs_whose_annotations_are_damaged_too():
    damaged = [
        {"annotations": {cdi.CLAIM_ANNOTATION: "[1]"}, "devices": []},
        {"annotations": {cdi.CLAIM_ANNOTATION: '{"name": "c"}'}, "devices": []},
        {
            "annotations": {cdi.CLAIM_ANNOTATION: '{"uid": "u", "namespace": "n", "name": "c"}'},
            "devices": [{"annotations": {cdi.DEVICE_ANNOTATION: '{"colour": "red"}'}}],
        },
        ["not", "a", "spec"],
    ]
    assert checkpoint.rebuild_from_cdi(damaged) == {}
