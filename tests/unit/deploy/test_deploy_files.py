"""The files users deploy with: kind configuration, Dockerfile, dependency lock."""

import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from operators.lab.components import REPLACED_CONTROLLERS, RESOURCE_API_VERSIONS
from tests.paths import ROOT

OLDEST_PYTHON = "3.11.2"  # pyproject's requires-python is >=3.11; Debian 12 ships 3.11.2


def _versions() -> dict[str, str]:
    return dict(
        line.split("=", 1)
        for line in (ROOT / "lab" / "versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )


def test_kind_config_matches_the_lab():
    config = yaml.safe_load((ROOT / "config" / "kind" / "cluster.yaml").read_text())
    assert (config["kind"], config["apiVersion"]) == ("Cluster", "kind.x-k8s.io/v1alpha4")
    version = _versions()["KUBERNETES_VERSION"]
    assert {n["image"] for n in config["nodes"]} == {f"kindest/node:{version}"}
    assert [n["role"] for n in config["nodes"]].count("control-plane") == 1
    assert all(config["featureGates"].values()) and "DRADeviceBindingConditions" in config["featureGates"]
    for api in RESOURCE_API_VERSIONS[1:]:
        assert config["runtimeConfig"][f"resource.k8s.io/{api}"] == "true"
    patch = yaml.safe_load(config["nodes"][0]["kubeadmConfigPatches"][0])
    [controllers] = [a["value"] for a in patch["controllerManager"]["extraArgs"] if a["name"] == "controllers"]
    assert controllers == ",".join(["*", *(f"-{c}" for c in REPLACED_CONTROLLERS)])
    assert "enable_cdi = true" in config["containerdConfigPatches"][0]


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n\s*", " ", text)
    return [
        tuple(line.strip().split(None, 1))
        for line in joined.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def test_dockerfile_is_multistage_locked_and_non_root():
    instructions = _instructions((ROOT / "Dockerfile").read_text())
    known = {"FROM", "RUN", "COPY", "ENV", "WORKDIR", "USER", "ENTRYPOINT", "CMD", "LABEL", "EXPOSE", "ARG"}
    assert all(op in known for op, _ in instructions), instructions
    froms = [i for i, (op, _) in enumerate(instructions) if op == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a slim runtime stage"
    final = instructions[froms[-1] :]
    [user] = [arg for op, arg in final if op == "USER"]
    assert user.split(":")[0].isdigit() and int(user.split(":")[0]) != 0
    assert ("ENTRYPOINT", '["dra-operators", "run"]') in final
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert "--require-hashes" in runs and "requirements.lock" in runs


def test_lock_pins_every_runtime_dependency_with_hashes():
    lock = (ROOT / "requirements.lock").read_text().lower()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~ \[]", requirement, maxsplit=1)[0].lower()
        assert re.search(rf"^{re.escape(name)}==\S+ \\$", lock, re.M), f"{name} is not pinned in requirements.lock"
    assert "--hash=sha256:" in lock and "--find-links" not in lock


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-dev.lock"])
def test_every_pin_installs_on_the_oldest_python_we_claim(lock):
    """`make run` and the image install these locks; Python 3.11.2 is Debian 12's python3 (a
    pin needing 3.11.5 once broke `make run` there). pip resolves for that version without
    installing (the wheels come from pip's cache after `make venv`)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"]
        + ["--only-binary=:all:", "--python-version", OLDEST_PYTHON, "--require-hashes", "-r", str(ROOT / lock)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_binding_rbac_in_the_base_is_what_the_operator_needs():
    import subprocess
    import sys

    base = yaml.safe_load((ROOT / "kustomize" / "base" / "binding.yaml").read_text())
    env = {e["name"]: e.get("value") for e in base["spec"]["template"]["spec"]["containers"][0]["env"]}
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "operators.binding.rbac",
            "--drivers",
            env["DRA_BINDING_DRIVERS"],
            "--namespace",
            "dra-operators",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert list(yaml.safe_load_all(printed)) == list(
        yaml.safe_load_all((ROOT / "kustomize" / "base" / "binding-rbac.yaml").read_text())
    )


def test_only_the_node_reaches_the_node_agents_probe_ports():
    """The NetworkPolicy of the node agent admits the metrics port from anywhere and nothing else:
    the probe ports stay reachable only from the Pod's own node, which NetworkPolicy cannot block
    (Kubernetes docs, Network Policies, "What you can't do") and where kubelet's probes come from."""
    documents = list(yaml.safe_load_all((ROOT / "kustomize" / "base" / "nodeagent.yaml").read_text()))
    [daemonset] = [d for d in documents if d["kind"] == "DaemonSet"]
    [policy] = [d for d in documents if d["kind"] == "NetworkPolicy"]
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["spec"]["policyTypes"] == ["Ingress"]
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    admitted = [ports.get(p["port"], p["port"]) for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert all("from" not in rule for rule in policy["spec"]["ingress"])
    assert admitted == [ports["metrics"]]
    probed = {container[probe]["grpc"]["port"] for probe in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probed == {ports["grpc-health"]} and not probed & set(admitted)
