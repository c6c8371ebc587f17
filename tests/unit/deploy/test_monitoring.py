"""The metrics Services of kustomize/base and the PodMonitors of kustomize/components/monitoring
select the operators' Pods and name a port their container has; the NetworkPolicies let the
scrapes in. Checked on the YAML itself (no kustomize needed), and rendered with kubectl
kustomize where one is at hand."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.paths import ROOT

BASE = ROOT / "kustomize" / "base"
COMPONENT = ROOT / "kustomize" / "components" / "monitoring"
OPERATORS = ("claims", "taints", "binding", "poolstatus", "nodeagent")


def _documents(directory: Path) -> Iterator[dict]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        yield from (d for d in yaml.safe_load_all((directory / resource).read_text()) if d)


def _workloads() -> dict[str, dict]:
    """The base's Deployments and DaemonSet by name."""
    return {d["metadata"]["name"]: d for d in _documents(BASE) if d["kind"] in ("Deployment", "DaemonSet")}


def _selected(match_labels: dict, workloads: dict[str, dict]) -> list[str]:
    return [
        name
        for name, w in workloads.items()
        if match_labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()
    ]


def _container_ports(workload: dict) -> dict[str, int]:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in container["ports"]}


def _monitors() -> list[dict]:
    return [d for d in _documents(COMPONENT) if d["kind"] == "PodMonitor"]


def test_the_component_is_a_component_with_a_podmonitor_per_operator_and_the_rules():
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    documents = list(_documents(COMPONENT))
    assert {(m["apiVersion"], m["kind"]) for m in documents} == {
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
    }
    assert sorted(m["metadata"]["name"] for m in _monitors()) == sorted(f"dra-{n}" for n in OPERATORS)


def test_every_podmonitor_selects_one_operators_pods_and_scrapes_a_port_it_has():
    workloads = _workloads()
    namespace = yaml.safe_load((BASE / "kustomization.yaml").read_text())["namespace"]
    covered = set()
    for monitor in _monitors():
        assert monitor["metadata"]["namespace"] == namespace  # PodMonitors select Pods of their own namespace
        [workload] = _selected(monitor["spec"]["selector"]["matchLabels"], workloads)
        covered.add(workload)
        ports = _container_ports(workloads[workload])
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            assert endpoint["port"] in ports, (monitor["metadata"]["name"], endpoint["port"], ports)
            assert endpoint["path"] == "/metrics"
    assert covered == set(workloads)


def test_every_operator_has_a_metrics_service_for_its_metrics_port():
    workloads = _workloads()
    services = [d for d in _documents(BASE) if d["kind"] == "Service"]
    covered = set()
    for service in services:
        [workload] = _selected(service["spec"]["selector"], workloads)
        covered.add(workload)
        [port] = service["spec"]["ports"]
        ports = _container_ports(workloads[workload])
        assert port["name"] == "metrics" and port["targetPort"] == "metrics"
        assert port["port"] == ports["metrics"]
        assert service["spec"]["clusterIP"] == "None"  # every replica its own target
    assert covered == set(workloads) == {f"dra-{n}" for n in OPERATORS}


def test_every_networkpolicy_admits_the_metrics_port_of_the_pods_it_selects():
    workloads = _workloads()
    policies = [d for d in _documents(BASE) if d["kind"] == "NetworkPolicy"]
    assert policies
    for policy in policies:
        if "Ingress" not in policy["spec"].get("policyTypes", ["Ingress"]):
            continue
        for workload in _selected(policy["spec"]["podSelector"].get("matchLabels", {}), workloads):
            ports = _container_ports(workloads[workload])
            admitted = [
                rule
                for rule in policy["spec"].get("ingress") or []
                if "from" not in rule
                and ("ports" not in rule or any(p["port"] in ("metrics", ports["metrics"]) for p in rule["ports"]))
            ]
            assert admitted, f"{policy['metadata']['name']} blocks the scrapes of {workload}'s metrics port"


def _kubectl() -> str | None:
    lab = ROOT / ".cache" / "lab" / "bin" / "kubectl"
    return str(lab) if lab.exists() else shutil.which("kubectl")


def _render(kubectl: str, directory: Path) -> list[dict]:
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize(
    ("overlay", "namespace", "monitors"),
    [("kind", None, 5), ("production", None, 5), ("kind", "gpu-system", 5)],
    ids=["kind", "production", "kind-in-another-namespace"],
)
def test_an_overlay_with_the_component_renders(tmp_path, overlay, namespace, monitors):
    kubectl = _kubectl()
    if kubectl is None:
        pytest.skip("no kubectl (.cache/lab/bin/kubectl or on PATH) to run kustomize with")
    kustomization: dict = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "kustomize" / "overlays" / overlay, tmp_path)],
        "components": [os.path.relpath(COMPONENT, tmp_path)],
    }
    if namespace:
        kustomization["namespace"] = namespace
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    rendered = _render(kubectl, tmp_path)
    pods = {d["metadata"]["name"]: d for d in rendered if d["kind"] in ("Deployment", "DaemonSet")}
    found = [d for d in rendered if d["kind"] == "PodMonitor"]
    assert len(found) == monitors
    for monitor in found:
        assert monitor["metadata"]["namespace"] == (namespace or "dra-operators")
        # What the overlay leaves out (production: poolstatus) has a PodMonitor that selects nothing.
        assert len(_selected(monitor["spec"]["selector"]["matchLabels"], pods)) <= 1
    services = {d["metadata"]["name"] for d in rendered if d["kind"] == "Service"}
    assert services == {f"{name}-metrics" for name in pods}
    [rule] = [d for d in rendered if d["kind"] == "PrometheusRule"]
    assert rule["metadata"]["namespace"] == (namespace or "dra-operators")
    [dashboard] = [
        d for d in rendered if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "dra-operators-dashboard"
    ]
    assert dashboard["metadata"]["namespace"] == (namespace or "dra-operators")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"  # kube-prometheus-stack's sidecar
    assert json.loads(dashboard["data"]["dra-operators.json"]) == json.loads(
        (COMPONENT / "dashboards" / "dra-operators.json").read_text()
    )
