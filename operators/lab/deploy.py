"""The project deployed onto a lab's real nodes as a user deploys it on kind (``lab up
--real-nodes N --deploy``): the image imported into every real node's containerd, the
DeviceClasses, and the kind overlay applied with kubectl; returns when every Deployment and the
node agent's DaemonSet are rolled out.

What the lab adds to the kind overlay (``build_overlay``), and why each differs from kind:

- ``KUBERNETES_SERVICE_HOST``/``PORT``: the lab has no kube-proxy, so the ``kubernetes`` Service's
  ClusterIP leads nowhere. In-cluster clients are pointed at their node's address, where the
  lab's toxiproxy forwards to kube-apiserver (``netfault.node_api_proxy``).
- The node agent's kubelet directories: every real node of a lab lives under
  ``/run/dra-lab/<hash>/<node>`` on one machine, so the DaemonSet mounts that directory at the
  same path (kubelet dials the plugin's socket at the path the agent reports) and points the
  agent at its node's part with ``$(NODE_NAME)``.
- A node selector for the real nodes: kwok's Nodes would only pretend to run the Pods.

On a release without ResourcePoolStatusRequests (before 1.36) the overlay adds the component
``without-poolstatus``, as the install docs tell users of those releases to.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from . import components
from .components import REAL_NODE_LABEL
from .image import ensure_image
from .realnode import RealNodeInfo

ROOT = Path(__file__).resolve().parents[2]
KIND_OVERLAY = ROOT / "kustomize" / "overlays" / "kind"
WITHOUT_POOLSTATUS = ROOT / "kustomize" / "components" / "without-poolstatus"
POOLSTATUS_MINOR = 36  # ResourcePoolStatusRequest (resource.k8s.io/v1alpha3) is new in 1.36
DEVICE_CLASSES = ROOT / "config" / "deviceclasses"
NAMESPACE = "dra-operators"
DEPLOYMENTS = ("dra-claims", "dra-taints", "dra-binding", "dra-poolstatus")
DAEMONSET = "dra-nodeagent"
# The base DaemonSet's kubelet directories: volumes by name, mounts by path (their merge key).
_KUBELET_VOLUMES = ("plugins-registry", "plugins", "cdi")
_KUBELET_MOUNTS = ("/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi")


class DeployError(RuntimeError):
    pass


def _api_env(api_port: int) -> list[dict[str, Any]]:
    return [
        {"name": "KUBERNETES_SERVICE_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(api_port)},
    ]


def deployments(minor: int) -> tuple[str, ...]:
    """The Deployments the overlay of a release has."""
    return tuple(d for d in DEPLOYMENTS if d != "dra-poolstatus" or minor >= POOLSTATUS_MINOR)


def build_overlay(
    kind_overlay: str, nodes_dir: str, api_port: int, without_poolstatus: str | None = None
) -> dict[str, Any]:
    """The lab's kustomization: the kind overlay (``kind_overlay``, a path relative to where the
    kustomization is written) plus the three differences of the module docstring, and the
    component ``without_poolstatus`` where given (the same relative kind of path). ``nodes_dir``
    is the lab's ``/run/dra-lab/<hash>``."""
    on_real_nodes = {"nodeSelector": {REAL_NODE_LABEL: "true"}}
    patches = []
    for name in DEPLOYMENTS:
        patches.append(
            {
                "target": {"kind": "Deployment", "name": name},
                "patch": yaml.safe_dump(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": name},
                        "spec": {
                            "template": {
                                "spec": {
                                    **on_real_nodes,
                                    "containers": [{"name": name.removeprefix("dra-"), "env": _api_env(api_port)}],
                                }
                            }
                        },
                    }
                ),
            }
        )
    agent_dirs = {
        "DRA_NODEAGENT_REGISTRY_DIR": "kubelet/plugins_registry",
        "DRA_NODEAGENT_PLUGINS_DIR": "kubelet/plugins",
        "DRA_NODEAGENT_CDI_ROOT": "cdi",
    }
    daemonset = {"kind": "DaemonSet", "name": DAEMONSET}
    patches.append(
        {
            "target": daemonset,
            "patch": yaml.safe_dump(
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "metadata": {"name": DAEMONSET},
                    "spec": {
                        "template": {
                            "spec": {
                                **on_real_nodes,
                                "containers": [
                                    {
                                        "name": "nodeagent",
                                        "volumeMounts": [{"mountPath": m, "$patch": "delete"} for m in _KUBELET_MOUNTS]
                                        + [{"name": "lab-real-nodes", "mountPath": nodes_dir}],
                                    }
                                ],
                                "volumes": [{"name": v, "$patch": "delete"} for v in _KUBELET_VOLUMES]
                                + [{"name": "lab-real-nodes", "hostPath": {"path": nodes_dir, "type": "Directory"}}],
                            }
                        }
                    },
                }
            ),
        }
    )
    # Appended (a JSON patch): $(NODE_NAME) expands only in variables after NODE_NAME's own.
    patches.append(
        {
            "target": daemonset,
            "patch": yaml.safe_dump(
                [
                    {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": env}
                    for env in _api_env(api_port)
                    + [{"name": k, "value": f"{nodes_dir}/$(NODE_NAME)/{v}"} for k, v in agent_dirs.items()]
                ]
            ),
        }
    )
    overlay: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [kind_overlay],
    }
    if without_poolstatus:
        overlay["components"] = [without_poolstatus]
    overlay["patches"] = patches
    return overlay


def write_overlay(directory: Path, nodes_dir: Path, api_port: int, minor: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    component = os.path.relpath(WITHOUT_POOLSTATUS, directory) if minor < POOLSTATUS_MINOR else None
    (directory / "kustomization.yaml").write_text(
        "# Written by `dra-operators lab up --deploy`: the kind overlay plus what a lab without\n"
        "# kube-proxy and with all its nodes on one machine needs (operators/lab/deploy.py).\n"
        + yaml.safe_dump(
            build_overlay(os.path.relpath(KIND_OVERLAY, directory), str(nodes_dir), api_port, component),
            sort_keys=False,
        )
    )
    return directory


@dataclass(frozen=True)
class Target:
    """What deploying needs of a running lab, read from its ``lab.json`` (so the CLI can deploy
    onto a lab that a detached supervisor owns)."""

    run_dir: Path
    kubeconfig: Path
    bin_dir: Path
    api_port: int
    nodes: tuple[RealNodeInfo, ...]

    @classmethod
    def of(cls, state: Any, bin_dir: Path) -> Target:
        return cls(
            Path(state.run_dir),
            Path(state.kubeconfig),
            bin_dir,
            int(state.ports["apiserver"]),
            tuple(RealNodeInfo(**raw) for raw in state.real_nodes),
        )

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args], capture_output=True, text=True
        )

    def minor(self) -> int:
        """The cluster's Kubernetes minor (kube-apiserver's ``/version``)."""
        answer = self.kubectl("get", "--raw", "/version")
        if answer.returncode != 0:
            raise DeployError(f"reading the cluster's version failed: {answer.stderr.strip()}")
        return components.release_minor(json.loads(answer.stdout)["gitVersion"])

    def ctr(self, node: RealNodeInfo, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin_dir / "ctr"), f"--address={node.files().containerd_socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
        )


def deploy(lab: Target, progress: Callable[[str], None] = print, timeout: float = 600) -> None:
    """Build (when needed) and import the image, apply the DeviceClasses and the overlay, wait
    for the rollout (a Pod is ready once its startup probe answered: on a loaded 2-core machine
    the import and the operators' start-up take minutes, hence the generous timeout)."""
    if not lab.nodes:
        raise DeployError("--deploy needs real nodes: lab up --real-nodes 2 --deploy")
    started = time.monotonic()
    archive = ensure_image(progress=progress)
    for node in lab.nodes:
        imported = lab.ctr(node, "images", "import", "--snapshotter=overlayfs", str(archive))
        if imported.returncode != 0:
            raise DeployError(f"importing {archive} into {node.name}'s containerd failed: {imported.stderr.strip()}")
    progress(f"deploy: image {archive.name} imported into {len(lab.nodes)} real node(s)")
    nodes_dir = Path(lab.nodes[0].root).parent
    minor = lab.minor()
    overlay = write_overlay(lab.run_dir / "deploy", nodes_dir, lab.api_port, minor)
    for what in (("-f", str(DEVICE_CLASSES)), ("-k", str(overlay))):
        applied = lab.kubectl("apply", "--server-side", *what)
        if applied.returncode != 0:
            raise DeployError(f"kubectl apply {' '.join(what)} failed: {applied.stderr.strip()}")
    progress(f"deploy: applied {overlay} (the kind overlay for the lab) and {DEVICE_CLASSES}")
    for workload in [f"deployment/{d}" for d in deployments(minor)] + [f"daemonset/{DAEMONSET}"]:
        left = max(10.0, timeout - (time.monotonic() - started))
        rolled = lab.kubectl("-n", NAMESPACE, "rollout", "status", workload, f"--timeout={left:.0f}s")
        if rolled.returncode != 0:
            pods = lab.kubectl("-n", NAMESPACE, "get", "pods", "-o", "wide").stdout
            raise DeployError(f"{workload} not rolled out: {rolled.stderr.strip() or rolled.stdout.strip()}\n{pods}")
        progress(f"deploy: {workload} rolled out")
    progress(f"deploy: ready in {time.monotonic() - started:.1f}s")


def rendered(overlay: Path, kubectl: Path) -> list[dict[str, Any]]:
    """The objects an overlay renders to (``kubectl kustomize``)."""
    out = subprocess.run([str(kubectl), "kustomize", str(overlay)], capture_output=True, text=True, check=True).stdout
    return list(yaml.safe_load_all(out))
