"""Two real nodes on one machine that each see their own kubelet directory at /var/lib/kubelet
and their own CDI directory at /var/run/cdi (``LabOptions(node_namespaces=True)``), as upstream's
DRA e2e suite assumes of every node (``make e2e``: its test driver's proxy Pods mount
/var/lib/kubelet/plugins_registry and /var/run/cdi by hostPath)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from operators.lab import Lab, images

from .labs import running_lab, short_run_dir

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root (mounts, bridges, cgroups)")
NODES = ("lab-real-0", "lab-real-1")


@pytest.fixture(scope="module")
def lab() -> Lab:
    with running_lab(
        "-ns", short_run_dir("ns-"), nodes=0, real_nodes=2, node_namespaces=True, remove_run_dir=True
    ) as lab:
        yield lab


def writer_pod(node: str) -> dict:
    """A Pod on ``node`` that writes the node's name through both hostPaths, then exits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"writer-{node}", "namespace": "default"},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "w",
                    "image": images.WORKLOAD_IMAGES[1],
                    "command": ["sh", "-c", f"echo {node} > /kubelet/probe/owner && echo {node} > /cdi/owner.txt"],
                    "volumeMounts": [
                        {"name": "kubelet", "mountPath": "/kubelet/probe"},
                        {"name": "cdi", "mountPath": "/cdi"},
                    ],
                }
            ],
            "volumes": [
                {"name": "kubelet", "hostPath": {"path": "/var/lib/kubelet/probe", "type": "DirectoryOrCreate"}},
                {"name": "cdi", "hostPath": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"}},
            ],
        },
    }


def wait_succeeded(lab: Lab, name: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    phase = ""
    while time.monotonic() < deadline:
        phase = lab.api("GET", f"/api/v1/namespaces/default/pods/{name}").get("status", {}).get("phase", "")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    assert phase == "Succeeded", f"pod {name} ended {phase or 'never'}: {lab.kubectl('describe', 'pod', name).stdout}"


def test_each_node_has_its_own_kubelet_and_cdi_directory_at_the_suites_paths(lab: Lab):
    host_probe = Path("/var/lib/kubelet/probe/owner")
    for node in NODES:
        lab.api("POST", "/api/v1/namespaces/default/pods", writer_pod(node))
    for node in NODES:
        wait_succeeded(lab, f"writer-{node}")
    for node in NODES:
        files = lab.real_node(node)
        assert (files.kubelet_root / "probe" / "owner").read_text().strip() == node
        assert (files.cdi / "owner.txt").read_text().strip() == node
    assert not host_probe.exists() or host_probe.read_text().strip() not in NODES


def test_kubelet_uses_the_short_path_for_plugin_sockets(lab: Lab):
    """Rolling-update registration sockets carry a UID: under /run/dra-lab/... they would not fit
    in a Unix socket path, under /var/lib/kubelet they do."""
    for node in NODES:
        pid = lab.processes()[f"kubelet-{node}"]
        args = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
        assert "--root-dir=/var/lib/kubelet" in args
        # It runs in its node's namespace, not in this one.
        assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
