"""``kubectl dra lint`` against the lab: every bad file of tests/lint gets its rule on its
field, the API server's dry run adds what only it knows, every fixed file passes the server's
dry run with no finding. The simulated node agents publish the devices the selectors are
checked against (the examples module's fixture, one setup for this module)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .test_examples import kubectl_dra, simulated_nodes  # noqa: F401 - the fixture, shared

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted(p for p in (ROOT / "tests" / "lint").iterdir() if p.is_dir())


def lint_json(lab, *files: str) -> tuple[int, dict]:
    result = kubectl_dra(lab, "lint", "-o", "json", *files)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_bad_files_get_their_rule_and_the_server_agrees(lab, simulated_nodes):  # noqa: F811
    code, report = lint_json(lab, *(str(case / "bad.yaml") for case in CASES))
    assert code == 1 and report["mode"] == "cluster, server dry run"
    by_file: dict[str, list[dict]] = {}
    for finding in report["findings"]:
        by_file.setdefault(Path(finding["file"]).parent.name, []).append(finding)
    for case in CASES:
        expect = yaml.safe_load((case / "expect.yaml").read_text())
        if "unreadable" in expect:  # no rule runs on it, nothing is sent
            problems = [u["problem"] for u in report["unreadable"] if Path(u["file"]).parent.name == case.name]
            assert any(expect["unreadable"] in p for p in problems), (case.name, report["unreadable"])
            continue
        ours = [f for f in by_file.get(case.name, []) if f["rule"] == expect["rule"] and f["field"] == expect["field"]]
        assert ours and any(expect["fix"] in f["fix"] for f in ours), (case.name, by_file.get(case.name))
    # kube-apiserver's own validation answers too, in its words, where no rule spoke about the field.
    server = {f["field"] for f in by_file["slice-counters-with-devices"] if f["rule"] == "server-dry-run"}
    assert "spec" in server, by_file["slice-counters-with-devices"]


def test_what_only_the_server_knows(lab, simulated_nodes, tmp_path):  # noqa: F811
    """A mistake no rule knows (a device name that is not a DNS label) is reported from the
    server's dry run; nothing is created."""
    bad = tmp_path / "slice.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "lint-server-only"},
                "spec": {
                    "driver": "lint.dra-operators.dev",
                    "nodeName": "lint-no-such-node",
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "GPU_0"}],
                },
            }
        )
    )
    code, report = lint_json(lab, str(bad))
    assert code == 1
    assert [f["field"] for f in report["findings"] if f["rule"] == "server-dry-run"] == ["spec.devices[0].name"], report
    assert lab.kubectl("get", "resourceslice", "lint-server-only", check=False).returncode != 0


def test_fixed_files_pass(lab, simulated_nodes):  # noqa: F811
    result = kubectl_dra(lab, "lint", *(str(case / "fixed.yaml") for case in CASES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(cluster, server dry run): 0 error(s), 0 warning(s)" in result.stdout, result.stdout


def test_names_with_reserved_characters_are_sent_as_names_with_dry_run(lab, simulated_nodes, tmp_path):  # noqa: F811
    """A name such as ``x#`` or ``a?b`` is one escaped path segment: the API server gets the name
    whole and ``dryRun=All`` with it (unescaped, ``#`` ended the URL and dropped the query). A
    ClusterRole may have such a name (path segment names only): the dry run accepts it and
    nothing is created. A ResourceClaim may not: the server's validation says so on the name.
    ``a/b`` is refused before sending, as client-go refuses it."""
    role = "lint-x#y?dryRun=None"
    names = tmp_path / "names.yaml"
    names.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": role},
                    "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
                },
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": "x#", "namespace": "default"},
                    "spec": {
                        "devices": {
                            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.sim.dra-operators.dev"}}]
                        }
                    },
                },
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a/b", "namespace": "default"}},
            ]
        )
    )
    code, report = lint_json(lab, str(names))
    assert code == 1, report
    by_ref = {(f["object"], f["field"]): f for f in report["findings"] if f["rule"] == "server-dry-run"}
    assert set(by_ref) == {("ResourceClaim/x#", "metadata.name"), ("ConfigMap/a/b", "metadata.name")}, report
    assert "RFC 1123" in by_ref[("ResourceClaim/x#", "metadata.name")]["message"], report
    assert "may not contain '/'" in by_ref[("ConfigMap/a/b", "metadata.name")]["message"], report
    assert lab.kubectl("get", "clusterroles", "-o", "name").stdout.count("lint-x") == 0
    assert lab.kubectl("get", "resourceclaims", "-n", "default", "-o", "name").stdout.count("x#") == 0


def test_a_kind_the_cluster_serves_only_at_another_version(lab, simulated_nodes, tmp_path):  # noqa: F811
    """resource.k8s.io/v1 is served, but not every kind in it (DeviceTaintRule before 1.37,
    ResourcePoolStatusRequest in every release): the finding names the version that has it."""
    wrong = tmp_path / "request.yaml"
    wrong.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourcePoolStatusRequest",
                "metadata": {"name": "lint-wrong-version"},
                "spec": {"driver": "lint.dra-operators.dev"},
            }
        )
    )
    code, report = lint_json(lab, str(wrong))
    assert code == 1
    [finding] = [f for f in report["findings"] if f["field"] == "apiVersion"]
    assert finding["rule"] == "server-dry-run", report
    assert "serves no ResourcePoolStatusRequest in resource.k8s.io/v1;" in finding["message"], finding
    assert finding["fix"] == "write apiVersion: resource.k8s.io/v1alpha3", finding
