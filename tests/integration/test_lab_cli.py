"""`dra-operators lab up/status/env/down` as a user runs them, side by side with the session lab."""

from __future__ import annotations

import subprocess
import sys

from operators.lab import paths, process
from operators.lab.cluster import LabState

DRA_RESOURCES = {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices", "devicetaintrules"}


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "operators.cli", "lab", *args], capture_output=True, text=True, timeout=timeout
    )


def test_lab_up_status_env_down_leaves_no_process(lab, tmp_path):
    # `lab` (the session's) keeps running: two labs side by side.
    run_dir = tmp_path / "cli-lab"
    name = "cli-test"
    up = _cli("up", "--name", name, "--run-dir", str(run_dir), "--nodes", "1")
    state = LabState.load(run_dir)
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip() == f"export KUBECONFIG={run_dir / 'admin.kubeconfig'}"
        assert "lab: kube-apiserver ready" in up.stderr
        assert state is not None and state.ready and state.ports["apiserver"] != lab.ports.apiserver

        kubectl = [str(paths.bin_dir() / "kubectl"), f"--kubeconfig={state.kubeconfig}"]
        readyz = subprocess.run([*kubectl, "get", "--raw", "/readyz"], capture_output=True, text=True)
        assert readyz.stdout.strip() == "ok", readyz.stderr
        resources = subprocess.run(
            [*kubectl, "api-resources", "--api-group=resource.k8s.io", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        assert {r.split(".")[0] for r in resources} >= DRA_RESOURCES

        status = _cli("status", "--name", name, "--run-dir", str(run_dir))
        assert status.returncode == 0, status.stdout + status.stderr
        assert "apiserver /readyz" in status.stdout and " ok " in status.stdout
        for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "toxiproxy"):
            assert component in status.stdout

        env = _cli("env", "--name", name, "--run-dir", str(run_dir))
        assert env.stdout.strip() == up.stdout.strip()
    finally:
        down = _cli("down", "--name", name, "--run-dir", str(run_dir))
    assert down.returncode == 0, down.stderr
    pids = [state.supervisor_pid, *state.pids.values()]
    assert len(pids) == 7  # the supervisor, five components and toxiproxy
    assert not [p for p in pids if process.alive(p)]
    # The session lab is untouched.
    assert lab.api("GET", "/readyz") == "ok"


def test_lab_status_of_unknown_lab_says_how_to_start_one(tmp_path):
    result = _cli("status", "--name", "nope", "--run-dir", str(tmp_path / "none"))
    assert result.returncode != 0
    assert "dra-operators lab up" in result.stderr
