import json

import jsonschema

from operators.nodeagent.plugin import cdi
from tests.paths import ROOT

SCHEMA = json.loads((ROOT / "tests" / "schemas" / "cdi-spec.json").read_text())
CLAIM = {"uid": "3f2a-uid", "namespace": "ns", "name": "c"}


def device(name="3f2a-uid-gpu-0", edits=None):
    return {"cdi_name": name, "edits": edits or {"env": ["A=1"]}, "record": {"pool": "n", "device": "gpu-0"}}


def test_claim_spec_names_kind_devices_and_records_the_claim():
    spec = cdi.build_claim_spec("gpu.example.com", CLAIM, [device()], {"env": ["DRA_DRIVER_NAME=gpu.example.com"]})
    jsonschema.validate(spec, SCHEMA)
    assert spec["kind"] == "k8s.gpu.example.com/claim"
    assert spec["devices"][0]["name"] == "3f2a-uid-gpu-0"
    assert json.loads(spec["annotations"][cdi.CLAIM_ANNOTATION]) == CLAIM
    assert spec["cdiVersion"] == "0.6.0"  # annotations need 0.6.0
    assert cdi.qualified_id("gpu.example.com", "3f2a-uid-gpu-0") == "k8s.gpu.example.com/claim=3f2a-uid-gpu-0"
    assert cdi.device_name("u", "gpu-0", "a1b2") == "u-gpu-0-a1b2"
    assert cdi.spec_file_name("gpu.example.com", "u") == "k8s.gpu.example.com-claim_u.json"


def test_minimum_version_follows_content():
    base = {"kind": "v.example/c", "devices": [{"name": "d", "containerEdits": {}}]}
    assert cdi.minimum_version(base) == "0.3.0"
    assert cdi.minimum_version({**base, "devices": [{"name": "1d", "containerEdits": {}}]}) == "0.5.0"
    with_mount_type = {
        **base,
        "containerEdits": {"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]},
    }
    assert cdi.minimum_version(with_mount_type) == "0.4.0"
    assert cdi.minimum_version({**base, "containerEdits": {"additionalGids": [5]}}) == "0.7.0"
    assert cdi.minimum_version({**base, "kind": "v.example/c.x"}) == "0.6.0"


def test_atomic_write_and_read_back(tmp_path):
    spec = cdi.build_claim_spec("d.example.com", CLAIM, [device()])
    path = cdi.write_spec(tmp_path, cdi.spec_file_name("d.example.com", CLAIM["uid"]), spec)
    assert json.loads(path.read_text()) == spec
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / "k8s.d.example.com-claim_broken.json").write_text("{")
    assert cdi.read_claim_specs(tmp_path, "d.example.com") == [spec]


def test_env_key():
    assert cdi.env_key("gpu-7-mig-9-0-4") == "GPU_7_MIG_9_0_4"
