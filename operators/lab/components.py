"""Pure builders for the lab's command lines and configuration files.

Nothing here starts a process or touches the network, so every flag is unit-testable.
Facts behind the choices: kwokctl's binary runtime and hack/local-up-cluster.sh.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Our operators replace these kube-controller-manager controllers (claims, taints, poolstatus).
REPLACED_CONTROLLERS = (
    "resourceclaim-controller",
    "device-taint-eviction-controller",
    "resourcepoolstatusrequest-controller",
)
# Every API version of resource.k8s.io the release has, so clients of any version can be tested.
RESOURCE_API_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
# Annotation on Pods that makes kwok finish them (value Succeeded or Failed), like a kubelet would.
FINISH_ANNOTATION = "lab.dra-operators.dev/finish"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    # toxiproxy's HTTP API, and its proxy in front of kube-apiserver (network faults).
    toxiproxy: int = 0
    apiserver_proxy: int = 0


@dataclass(frozen=True)
class Files:
    """Where each component finds its inputs inside one run directory."""

    run_dir: Path

    @property
    def pki(self) -> Path:
        return self.run_dir / "pki"

    def kubeconfig(self, identity: str) -> Path:
        return self.run_dir / f"{identity}.kubeconfig"

    def kubeconfig_via_proxy(self, identity: str) -> Path:
        """The same identity, with the toxiproxy proxy in front of kube-apiserver as server."""
        return self.run_dir / f"{identity}.via-proxy.kubeconfig"

    @property
    def toxiproxy_config(self) -> Path:
        return self.run_dir / "toxiproxy.json"

    @property
    def control_socket(self) -> Path:
        return self.run_dir / "control.sock"

    @property
    def etcd_data(self) -> Path:
        return self.run_dir / "etcd"

    @property
    def logs(self) -> Path:
        return self.run_dir / "logs"

    @property
    def scheduler_config(self) -> Path:
        return self.run_dir / "scheduler-config.yaml"

    @property
    def kwok_stages(self) -> Path:
        return self.run_dir / "kwok-lab-stages.yaml"

    @property
    def state(self) -> Path:
        return self.run_dir / "lab.json"


# Gates that DRA gates need on too (the API server refuses to start otherwise), and API
# versions a gate's clients watch, by the first minor that serves them (the 1.37 scheduler watches
# PodGroups in scheduling/v1beta1; 1.36 has v1alpha2, 1.35 v1alpha1: storage_scheduling.go).
GATE_DEPENDENCIES = {"DRAWorkloadResourceClaims": ("GenericWorkload",)}
GATE_APIS = {
    "GenericWorkload": {
        35: ("scheduling.k8s.io/v1alpha1",),
        36: ("scheduling.k8s.io/v1alpha2",),
        37: ("scheduling.k8s.io/v1beta1",),
    }
}
NEWEST_MINOR = 37  # lab/versions.env's KUBERNETES_VERSION


def release_minor(version_text: str) -> int:
    """The minor of ``kube-apiserver --version`` ("Kubernetes v1.35.8": 35)."""
    found = re.search(r"v1\.(\d+)\.", version_text)
    if not found:
        raise ValueError(f"not a Kubernetes version: {version_text.strip()!r}")
    return int(found.group(1))


def known_controllers(help_text: str) -> frozenset[str]:
    """The controllers ``kube-controller-manager --help`` lists ("All controllers: a, b, ..."): a
    release refuses to be told about one it lacks, even to switch it off (resourcepoolstatusrequest
    is new in 1.36; k8s.io/controller-manager/options/generic.go, Validate)."""
    found = re.search(r"All controllers: ([^\n]*)", help_text)
    return frozenset(c.strip() for c in found.group(1).split(",")) if found else frozenset()


def replaced_controllers(known: frozenset[str] | None) -> list[str]:
    """REPLACED_CONTROLLERS the release has. A list that could not be read (empty) counts as
    unknown: all of them are switched off, never none (upstream's would run beside ours)."""
    return [c for c in REPLACED_CONTROLLERS if not known or c in known]


def dra_feature_gates(help_text: str) -> list[str]:
    """Every DRA gate that ``kube-apiserver --help`` lists, so the lab follows the release, with
    ResourceHealthStatus (kubelet's device health stream to the Pod's status; alpha before 1.36).

    Each help line reads ``kube:DRAFoo=true|false (BETA - default=true)``. GA gates that are
    locked on are not listed (or say LOCKED) and are left out: they are on anyway.
    """
    gates = set()
    for name, rest in re.findall(
        r"^\s*(?:kube:)?(DRA\w+|DynamicResourceAllocation|ResourceHealthStatus)=true\|false \(([^)]*)\)",
        help_text,
        re.M,
    ):
        if "LOCKED" not in rest.upper():
            gates.add(name)
            gates.update(GATE_DEPENDENCIES.get(name, ()))
    return sorted(gates)


def runtime_apis(gates: list[str], minor: int = NEWEST_MINOR) -> list[str]:
    apis = [f"resource.k8s.io/{v}" for v in RESOURCE_API_VERSIONS]
    for gate in gates:
        served = [since for since in GATE_APIS.get(gate, {}) if since <= minor]
        apis.extend(a for a in (GATE_APIS[gate][max(served)] if served else ()) if a not in apis)
    return apis


def feature_gates_flag(gates: list[str], off: tuple[str, ...] = ()) -> str:
    """``gates`` on, ``off`` off: left out, a beta gate would be on by its default."""
    return "--feature-gates=" + ",".join([f"{g}=true" for g in gates] + [f"{g}=false" for g in off])


def build_kubeconfig(server: str, ca: Path, cert: Path, key: Path, name: str = "lab") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def build_etcd_args(binary: Path, files: Files, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=lab",
        f"--data-dir={files.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=lab={peer}",
        "--initial-cluster-state=new",
        # Throw-away data: no fsync keeps a two-core machine responsive under load.
        "--unsafe-no-fsync=true",
        "--log-level=warn",
        "--quota-backend-bytes=4294967296",
    ]


def build_apiserver_args(
    binary: Path,
    files: Files,
    ports: Ports,
    gates: list[str],
    off: tuple[str, ...] = (),
    real_nodes: bool = False,
    minor: int = NEWEST_MINOR,
) -> list[str]:
    pki = files.pki
    # Only with real nodes (a plain lab's flags stay as they were): kubectl logs/exec reach a
    # kubelet at its InternalIP (127.0.0.1) with the admin certificate (kubelets trust the lab's
    # CA), and NodeRestriction limits each kubelet to its own Node and Pods.
    kubelets = (
        [
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={pki / 'admin.crt'}",
            f"--kubelet-client-key={pki / 'admin.key'}",
            "--enable-admission-plugins=NodeRestriction",
        ]
        if real_nodes
        else []
    )
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports.apiserver}",
        # Loopback addresses are invalid Endpoints; kwokctl makes the same choice.
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        # ServiceAccount tokens (TokenRequest) so operators can run under their own identities.
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        "--service-cluster-ip-range=10.96.0.0/16",
        "--allow-privileged=true",
        "--runtime-config=" + ",".join(f"{api}=true" for api in runtime_apis(gates, minor)),
        feature_gates_flag(gates, off),
        # Load tests (hundreds of Pods) must not be throttled by priority and fairness.
        "--max-requests-inflight=0",
        "--max-mutating-requests-inflight=0",
        "--enable-priority-and-fairness=false",
        # On SIGTERM (`lab restart kube-apiserver`, `lab down`): answer 429 Retry-After until the
        # in-flight requests drained, then close the open watches within 2 s. Without it the HTTP
        # server waits up to the 60 s request timeout for the watches of kube-controller-manager,
        # the scheduler and kwok to end.
        "--shutdown-send-retry-after=true",
        *kubelets,
    ]


def build_controller_manager_args(
    binary: Path,
    files: Files,
    ports: Ports,
    gates: list[str],
    upstream_controllers: bool,
    api_limits: tuple[int, int] = (500, 1000),
    off: tuple[str, ...] = (),
    known: frozenset[str] | None = None,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """``api_limits``: its client's (QPS, burst); the lab's 500/1000 as large clusters run it,
    ``make bench`` also upstream's defaults (20/30). ``known``: the release's controllers
    (``known_controllers``); only those of REPLACED_CONTROLLERS are switched off. ``extra``:
    more flags, last."""
    pki = files.pki
    kubeconfig = files.kubeconfig("kube-controller-manager")
    replaced = replaced_controllers(known)
    controllers = "*" if upstream_controllers else ",".join(["*", *(f"-{c}" for c in replaced)])
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.controller_manager}",
        f"--controllers={controllers}",
        # Each controller acts as its own ServiceAccount, as in a real cluster.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        "--leader-elect=false",
        f"--kube-api-qps={api_limits[0]}",
        f"--kube-api-burst={api_limits[1]}",
        feature_gates_flag(gates, off),
        *extra,
    ]


def build_scheduler_config(kubeconfig: Path, user_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The user's KubeSchedulerConfiguration (profiles, DynamicResources args such as a short
    ``bindingTimeout``) with the lab's connection settings. With ``--config`` the scheduler
    ignores ``--kubeconfig``, so it goes into ``clientConnection``."""
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        **(user_config or {}),
    }
    config["clientConnection"] = {
        "qps": 500,
        "burst": 1000,
        **config.get("clientConnection", {}),
        "kubeconfig": str(kubeconfig),
    }
    config["leaderElection"] = {"leaderElect": False}
    return config


def build_scheduler_args(
    binary: Path, files: Files, ports: Ports, gates: list[str], off: tuple[str, ...] = ()
) -> list[str]:
    kubeconfig = files.kubeconfig("kube-scheduler")
    return [
        str(binary),
        f"--config={files.scheduler_config}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        f"--secure-port={ports.scheduler}",
        feature_gates_flag(gates, off),
    ]


def build_kwok_args(binary: Path, files: Files, ports: Ports, stages_dir: Path) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={files.kubeconfig('kwok')}",
        # Only Nodes carrying the annotation: tests may add Nodes that kwok must leave alone.
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
        f"--server-address=127.0.0.1:{ports.kwok}",
        "--node-lease-duration-seconds=40",
        f"--config={stages_dir / 'node' / 'fast'}",
        f"--config={stages_dir / 'node' / 'heartbeat-with-lease'}",
        f"--config={stages_dir / 'pod' / 'fast'}",
        f"--config={files.kwok_stages}",
    ]


def build_toxiproxy_args(binary: Path, files: Files, ports: Ports) -> list[str]:
    """toxiproxy-server with its API on loopback; its proxies come from ``-config`` so that a
    restarted toxiproxy has them again (same listen port)."""
    return [str(binary), "-host=127.0.0.1", f"-port={ports.toxiproxy}", f"-config={files.toxiproxy_config}"]


def with_server(kubeconfig: dict[str, Any], server: str) -> dict[str, Any]:
    """A copy of ``kubeconfig`` whose every cluster has ``server`` (same CA, same credentials:
    a client certificate or a ServiceAccount token)."""
    copy = {
        **kubeconfig,
        "clusters": [
            {**cluster, "cluster": {**cluster.get("cluster", {}), "server": server}}
            for cluster in kubeconfig.get("clusters", [])
        ],
    }
    return copy


def _finish_stage(phase: str, exit_code: int) -> dict[str, Any]:
    reason = "Completed" if exit_code == 0 else "Error"
    template = (
        "{{ $now := Now }}\n"
        "containerStatuses:\n"
        "{{ range .spec.containers }}\n"
        "- image: {{ .image | Quote }}\n"
        "  name: {{ .name | Quote }}\n"
        "  ready: false\n"
        "  restartCount: 0\n"
        "  started: false\n"
        "  state:\n"
        "    terminated:\n"
        f"      exitCode: {exit_code}\n"
        "      finishedAt: {{ $now | Quote }}\n"
        f"      reason: {reason}\n"
        "      startedAt: {{ $now | Quote }}\n"
        "{{ end }}\n"
        "conditions:\n"
        "- lastTransitionTime: {{ $now | Quote }}\n"
        '  status: "False"\n'
        "  type: Ready\n"
        f"phase: {phase}\n"
    )
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": f"lab-pod-{phase.lower()}-on-demand"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                    {"key": f'.metadata.annotations["{FINISH_ANNOTATION}"]', "operator": "In", "values": [phase]},
                ]
            },
            "next": {"statusTemplate": template},
        },
    }


def build_kwok_lab_stages(options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Stages beyond kwok's fast set: a Pod annotated ``FINISH_ANNOTATION: Succeeded|Failed``
    terminates the way a kubelet would report it (the fast set only completes Job Pods). With
    ``options``, a KwokConfiguration with them over kwok's defaults (kwok takes the first it is
    given, and defaults none of its fields: a missing parallelism is 0, and kwok refuses it)."""
    documents = [_finish_stage("Succeeded", 0), _finish_stage("Failed", 1)]
    if options:
        documents.append(
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": {**KWOK_DEFAULT_OPTIONS, **options},
            }
        )
    return documents


# kwok v0.8.0's own defaults (pkg/apis/config/v1alpha1/zz_generated.defaults.go,
# SetObjectDefaults_KwokConfiguration), applied only when no KwokConfiguration is given.
KWOK_DEFAULT_OPTIONS: dict[str, Any] = {
    "cidr": "10.0.0.0/24",
    "manageAllNodes": False,
    "enableDebuggingHandlers": True,
    "enableContentionProfiling": False,
    "enableProfilingHandler": True,
    "podPlayStageParallelism": 4,
    "nodePlayStageParallelism": 4,
    "nodeLeaseParallelism": 4,
    "podsOnNodeSyncParallelism": 1,
    "enablePodsOnNodeSyncListPager": True,
    "enablePodsOnNodeSyncStreamWatch": False,
}


def build_node(
    name: str, labels: dict[str, str] | None = None, cpu: str = "32", memory: str = "256Gi", pods: str = "250"
) -> dict[str, Any]:
    """A Node that kwok manages. No kwok taint: the lab is all fake, so test Pods need no toleration."""
    capacity = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        },
        "status": {"allocatable": dict(capacity), "capacity": dict(capacity)},
    }


# -- real nodes: kubelet + containerd + runc + bridge CNI (lab up --real-nodes) ------------------

REAL_NODE_LABEL = "lab.dra-operators.dev/real-node"
# The binaries real nodes need beyond the control plane's (lab/build.sh --node).
REAL_NODE_BINARIES = (
    "kubelet",
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "cni/bridge",
    "cni/host-local",
    "cni/loopback",
    "busybox",
)


# Real nodes live here, not in the run directory: kubelet's plugin sockets
# (<root>/kubelet/plugins_registry/<driver>-reg.sock) must fit in 107 characters, which a run
# directory under a checkout or pytest's temporary directories leaves no room for.
REAL_NODE_BASE = Path("/run/dra-lab")


def real_node_root(run_dir: Path, name: str) -> Path:
    """``/run/dra-lab/<8 hex of the run directory>/<name>`` (32 characters for lab-real-0)."""
    import hashlib

    return REAL_NODE_BASE / hashlib.sha256(str(run_dir).encode()).hexdigest()[:8] / name


@dataclass(frozen=True)
class RealNodeFiles:
    """Everything of one real node lives under ``root`` (``real_node_root``; the run directory's
    ``nodes/<name>`` links there)."""

    root: Path
    name: str

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def plugins_registry(self) -> Path:
        """Where kubelet's plugin watcher looks for registration sockets."""
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins(self) -> Path:
        """Where plugins keep their service sockets and data (the agent's checkpoint)."""
        return self.kubelet_root / "plugins"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pods"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet-config.yaml"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def cdi(self) -> Path:
        """The CDI spec directory containerd reads (and the node agent writes)."""
        return self.root / "cdi"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam(self) -> Path:
        return self.root / "cni" / "ipam"


def build_containerd_config(files: RealNodeFiles, bin_dir: Path, pause_image: str) -> str:
    """containerd 2 (config version 3): its own root, state and socket; CRI with runc (cgroupfs),
    CDI from the node's CDI directory, the bridge CNI network, the lab's pause image, and
    ``restrict_oom_score_adj`` (these machines lack CAP_SYS_RESOURCE: kubelet's -998 for sandboxes
    would fail). NRI is off: its socket is machine-wide. Network namespaces live in the state
    directory, so ``lab down`` finds and unmounts them."""
    q = json.dumps
    return f"""version = 3
root = {q(str(files.containerd_root))}
state = {q(str(files.containerd_state))}
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.internal.v1.tracing"]

[grpc]
  address = {q(str(files.containerd_socket))}

[ttrpc]
  address = {q(str(files.containerd_socket) + ".ttrpc")}

[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(files.root / "containerd" / "opt"))}

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = {q(pause_image)}

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = [{q(str(files.cdi))}]
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = {q(str(bin_dir / "runc"))}
        Root = {q(str(files.containerd_state / "runc"))}
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [{q(str(bin_dir / "cni"))}]
    conf_dir = {q(str(files.cni_conf_dir))}
    max_conf_num = 1

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"""


def build_cni_config(bridge: str, subnet: str, ipam_dir: Path) -> dict[str, Any]:
    """A bridge network (gateway on the bridge, no masquerade: no iptables here) with host-local
    addresses from the node's pod CIDR, plus loopback."""
    return {
        "cniVersion": "1.0.0",
        "name": "lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
        ],
    }


def build_kubelet_config(
    files: RealNodeFiles, node_ip: str, port: int, healthz_port: int, ca: Path, gates: list[str]
) -> dict[str, Any]:
    """KubeletConfiguration for cgroup v1 machines without systemd: cgroupfs, no QoS cgroups, no
    node allocatable enforcement, no eviction; clients authenticated by the lab's CA (the API
    server presents the admin certificate for logs and exec). kubelet refuses a loopback node IP,
    so the node's address is its bridge's gateway address: local, and the lab's own."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip,
        "port": port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failCgroupV1": False,
        "failSwapOn": False,
        "staticPodPath": "",
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "containerRuntimeEndpoint": f"unix://{files.containerd_socket}",
        "podLogsDir": str(files.pod_logs),
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "4s",
        "syncFrequency": "10s",
        "resolvConf": "",
        "featureGates": {g: True for g in gates},
    }


def build_kubelet_args(binary: Path, files: RealNodeFiles, node_ip: str, root_dir: Path | None = None) -> list[str]:
    """``root_dir``: where kubelet sees its directory (default: ``files.kubelet_root``; the e2e
    lab's mount namespace binds it at /var/lib/kubelet, which keeps the plugin socket paths
    kubelet dials under the 107 characters a Unix socket path can have)."""
    return [
        str(binary),
        f"--config={files.kubelet_config}",
        f"--kubeconfig={files.kubeconfig}",
        f"--root-dir={root_dir or files.kubelet_root}",
        f"--cert-dir={files.kubelet_root / 'pki'}",
        f"--hostname-override={files.name}",
        f"--node-ip={node_ip}",
        f"--node-labels={REAL_NODE_LABEL}=true,type=real",
        "--v=2",
    ]


def build_containerd_args(binary: Path, files: RealNodeFiles) -> list[str]:
    return [str(binary), f"--config={files.containerd_config}", "--log-level=warn"]
