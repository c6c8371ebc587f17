"""The lab's deploy overlay (operators/lab/deploy.py) against the base it patches: what it deletes
must be what the base has, or kustomize silently keeps the base's kubelet paths."""

from pathlib import Path

import pytest
import yaml

from operators.lab import deploy
from tests.paths import ROOT


def _base_daemonset() -> dict:
    docs = yaml.safe_load_all((ROOT / "kustomize" / "base" / "nodeagent.yaml").read_text())
    return next(d for d in docs if d and d["kind"] == "DaemonSet")


def test_the_overlay_replaces_exactly_the_base_daemonsets_kubelet_directories():
    spec = _base_daemonset()["spec"]["template"]["spec"]
    host_volumes = {v["name"] for v in spec["volumes"] if "hostPath" in v}
    host_mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"] if m["name"] in host_volumes}
    assert set(deploy._KUBELET_VOLUMES) == host_volumes
    assert set(deploy._KUBELET_MOUNTS) == host_mounts


def test_the_overlay_points_every_workload_at_its_nodes_address_and_the_agent_at_its_node():
    overlay = deploy.build_overlay("../../kustomize/overlays/kind", "/run/dra-lab/0123abcd", 6443)
    assert overlay["resources"] == ["../../kustomize/overlays/kind"]
    targets = [p["target"] for p in overlay["patches"]]
    assert {t["name"] for t in targets} == {*deploy.DEPLOYMENTS, deploy.DAEMONSET}
    appended = yaml.safe_load(overlay["patches"][-1]["patch"])
    env = {op["value"]["name"]: op["value"] for op in appended}
    assert all(op["op"] == "add" and op["path"].endswith("/env/-") for op in appended)  # after NODE_NAME
    assert env["KUBERNETES_SERVICE_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert env["KUBERNETES_SERVICE_PORT"]["value"] == "6443"
    assert env["DRA_NODEAGENT_REGISTRY_DIR"]["value"] == "/run/dra-lab/0123abcd/$(NODE_NAME)/kubelet/plugins_registry"
    for patch in overlay["patches"][:-1]:
        body = yaml.safe_load(patch["patch"])
        assert body["spec"]["template"]["spec"]["nodeSelector"] == {"lab.dra-operators.dev/real-node": "true"}


@pytest.mark.parametrize(("minor", "with_poolstatus"), [(34, False), (35, False), (36, True), (37, True)])
def test_releases_without_pool_status_requests_deploy_without_the_operator(tmp_path, minor, with_poolstatus):
    written = yaml.safe_load(
        deploy.write_overlay(tmp_path, Path("/run/dra-lab/x"), 6443, minor).joinpath("kustomization.yaml").read_text()
    )
    components = written.get("components") or []
    assert [Path(tmp_path, c).resolve() for c in components] == ([] if with_poolstatus else [deploy.WITHOUT_POOLSTATUS])
    assert ("dra-poolstatus" in deploy.deployments(minor)) is with_poolstatus
