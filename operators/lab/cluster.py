"""Start, watch and stop one lab: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
kwok and toxiproxy (network faults) on 127.0.0.1, plus kwok-managed Nodes and, on request, real
Nodes (kubelet + containerd, see realnode.py); restart any of them and compact etcd (faults are
part of the lab)."""

from __future__ import annotations

import json
import os
import random
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import components, control, images, paths, process, realnode
from .components import Files, Ports, RealNodeFiles
from .netfault import NetProxy, node_api_proxy, proxy_config
from .pki import Pki
from .realnode import RealNodeInfo

# Client identities: the admin bypasses RBAC (system:masters); the scheduler and the controller
# manager use the identities the bootstrap RBAC policy has roles for.
IDENTITIES = {
    "admin": ("lab-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok-controller", "system:masters"),
}
START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "toxiproxy")
# What `restart` accepts (toxiproxy too: it comes back with its proxy on the same port, unfaulted).
COMPONENTS = START_ORDER


class LabError(RuntimeError):
    pass


@dataclass
class LabOptions:
    name: str = "default"
    nodes: int = 1
    upstream_controllers: bool = False
    # A KubeSchedulerConfiguration (as a dict) to run the scheduler with, e.g. a short bindingTimeout.
    scheduler_config: dict[str, Any] | None = None
    run_dir: Path | None = None
    bin_dir: Path | None = None
    startup_timeout: float = 120.0
    # Real Nodes lab-real-0, ...: a kubelet and a containerd each (make lab-build-node).
    real_nodes: int = 0
    # DRA gates left out of --feature-gates of kube-apiserver, kube-controller-manager and
    # kube-scheduler, so at their default (off for DRAWorkloadResourceClaims in 1.37); the gates
    # they depend on (GenericWorkload) stay on.
    disabled_gates: tuple[str, ...] = ()
    # More kube-controller-manager flags, e.g. a longer --node-monitor-grace-period where kwok cannot
    # renew every Node's lease in time (make bench-scale).
    controller_manager_flags: tuple[str, ...] = ()
    # kube-controller-manager's client limits (--kube-api-qps, --kube-api-burst).
    controller_manager_api_limits: tuple[int, int] = (500, 1000)
    # kwok's KwokConfiguration options, e.g. an annotation whose Pods it leaves Pending
    # (disregardStatusWithAnnotationSelector: make bench-scale's plain Pods).
    kwok_options: dict[str, Any] = field(default_factory=dict)
    # Each real node's containerd and kubelet run in a mount namespace of their own in which the
    # node's kubelet directory is /var/lib/kubelet and its CDI directory /var/run/cdi, as upstream's
    # e2e suite assumes of every node (make e2e).
    node_namespaces: bool = False
    # The images upstream's e2e suite pulls are imported too (images.E2E_IMAGES; lab/build.sh --e2e).
    e2e_images: bool = False
    # Gates turned on beside the DRA ones, on every component and kubelet (the e2e suite's tests
    # of health status and node features need theirs).
    extra_gates: tuple[str, ...] = ()

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or paths.run_dir(self.name)).resolve()

    def resolved_bin_dir(self) -> Path:
        return Path(self.bin_dir or paths.bin_dir()).resolve()


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Ports handed out recently, by any process on this machine: a port is free when chosen and
# bound by its server only seconds later, and two processes (pytest-xdist workers starting labs
# side by side) could otherwise both choose it in between ("address already in use"). One file
# per user: in the sticky /tmp another user can neither open root's lock nor replace its file.
_HANDED_OUT = Path(os.environ.get("TMPDIR", "/tmp")) / f"dra-lab-ports-{os.getuid()}.json"
_HANDED_OUT_FOR = 600.0  # seconds a handed-out port is not handed out again


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports, below the kernel's ephemeral range: a port the kernel handed
    out (bind to 0) can be taken again at once by any outgoing connection's local end, and a
    server binding it later fails with "Address already in use". All sockets stay open until
    every port is chosen, so none is picked twice, and no port handed out to any process in the
    last ten minutes is chosen again."""
    import fcntl

    low, high = 10000, max(10001, _ephemeral_start())
    with open(_HANDED_OUT.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        now = time.time()
        try:
            recent = {int(p): t for p, t in json.loads(_HANDED_OUT.read_text()).items() if now - t < _HANDED_OUT_FOR}
        except (OSError, ValueError, AttributeError):
            recent = {}
        sockets: list[socket.socket] = []
        try:
            while len(sockets) < count:
                port = random.randrange(low, high)
                if port in recent:
                    continue
                s = socket.socket()
                try:
                    s.bind(("0.0.0.0", port))
                except OSError:
                    s.close()
                    continue
                sockets.append(s)
            chosen = [s.getsockname()[1] for s in sockets]
        finally:
            for s in sockets:
                s.close()
        recent.update({p: now for p in chosen})
        tmp = _HANDED_OUT.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(recent))
        tmp.replace(_HANDED_OUT)
        return chosen


@dataclass
class LabState:
    """What ``lab status``/``lab down``/``lab env`` read back from ``lab.json``."""

    name: str
    run_dir: str
    kubeconfig: str
    server: str
    ports: dict[str, int]
    pids: dict[str, int] = field(default_factory=dict)
    supervisor_pid: int | None = None
    ready: bool = False
    upstream_controllers: bool = False
    # The API server through toxiproxy (network faults), and toxiproxy's own API.
    proxy_server: str | None = None
    toxiproxy_api: str | None = None
    # RealNodeInfo of each real node, as dicts.
    real_nodes: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, run_dir: Path) -> LabState | None:
        try:
            return cls(**json.loads((run_dir / "lab.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self) -> None:
        path = Path(self.run_dir) / "lab.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


class Lab:
    """One control plane. ``start()`` returns when the API server is ready and the Nodes are
    schedulable; ``stop()`` ends every process. Children die with this process."""

    def __init__(self, options: LabOptions | None = None, log: Callable[[str], None] = print):
        self.options = options or LabOptions()
        self.run_dir = self.options.resolved_run_dir()
        self.bin_dir = self.options.resolved_bin_dir()
        self.files = Files(self.run_dir)
        self.pki = Pki(self.files.pki)
        self._log = log
        self._procs: dict[str, subprocess.Popen] = {}
        self._gates: list[str] = []
        self._all_gates: list[str] = []
        self.minor = components.NEWEST_MINOR  # of the binaries, read by start()
        self._controllers: frozenset[str] | None = None  # kube-controller-manager's, read by start()
        self.ports: Ports | None = None
        self.upstream_controllers = self.options.upstream_controllers
        # Serializes changes to the process table (restarts from tests, timers, the control socket).
        self._lock = threading.RLock()
        self._net: NetProxy | None = None
        self._control: control.ControlServer | None = None
        self.real_nodes: list[RealNodeInfo] = []
        self._kubelet_gates: list[str] = []
        self._watchdog: subprocess.Popen | None = None

    # -- public surface ----------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.files.kubeconfig("admin")

    @property
    def _ports(self) -> Ports:
        """The ports, chosen when the run directory is prepared."""
        assert self.ports
        return self.ports

    @property
    def server(self) -> str:
        assert self.ports
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def feature_gates(self) -> list[str]:
        return list(self._gates)

    @property
    def net(self) -> NetProxy:
        """Network faults between clients using ``kubeconfig_via_proxy`` and kube-apiserver:
        ``cut()``, ``refuse(seconds)``, ``black_hole(seconds)``, ``latency(ms, jitter, seconds)``,
        ``heal()`` (see ``operators.lab.netfault``)."""
        if self._net is None:
            raise LabError("the lab is not started")
        return self._net

    @property
    def proxy_server(self) -> str:
        """kube-apiserver's URL through toxiproxy."""
        assert self.ports
        return f"https://127.0.0.1:{self.ports.apiserver_proxy}"

    def kubeconfig_via_proxy(self, identity: str = "admin") -> Path:
        """A kubeconfig of one of the lab's identities (``IDENTITIES``: admin,
        kube-controller-manager, kube-scheduler, kwok) whose server is the proxy."""
        if identity not in IDENTITIES:
            raise LabError(
                f"unknown identity {identity!r}; the lab has {', '.join(IDENTITIES)} "
                "(for any other, e.g. a ServiceAccount token: via_proxy(kubeconfig))"
            )
        return self.files.kubeconfig_via_proxy(identity)

    def via_proxy(self, kubeconfig: Path | str, destination: Path | str | None = None) -> Path:
        """A copy of any kubeconfig for this lab (a ServiceAccount token, a client certificate)
        whose server is the proxy; written next to it as ``<name>.via-proxy.kubeconfig`` unless
        ``destination`` is given."""
        source = Path(kubeconfig)
        target = Path(destination) if destination else source.with_name(f"{source.stem}.via-proxy.kubeconfig")
        config = yaml.safe_load(source.read_text())
        target.write_text(yaml.safe_dump(components.with_server(config, self.proxy_server)))
        return target

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            check=check,
        )

    def start(self) -> None:
        missing = paths.missing_binaries(self.bin_dir)
        if missing:
            raise LabError(
                f"lab binaries missing in {self.bin_dir}: {', '.join(missing)}. "
                "Run `make lab-build` (needs a Go >= 1.26 toolchain) or set DRA_LAB_BIN_DIR."
            )
        if self.options.real_nodes:
            missing = paths.missing_real_node_binaries(self.bin_dir)
            if missing:
                raise LabError(
                    f"real-node binaries missing in {self.bin_dir}: {', '.join(missing)}. Run `make lab-build-node`."
                )
        existing = LabState.load(self.run_dir)
        if existing and any(process.alive(p) for p in existing.pids.values()):
            raise LabError(
                f"a lab named {self.options.name!r} is already running in {self.run_dir}; "
                "run `dra-operators lab down` first or pick another --name"
            )
        started = time.monotonic()
        for stale in existing.real_nodes if existing else []:  # a lab that died without stopping
            realnode.cleanup(RealNodeInfo(**stale), self.bin_dir / "runc")
        self._prepare_run_dir()
        self._all_gates = components.dra_feature_gates(self._output("kube-apiserver", "--help"))
        self.minor = components.release_minor(self._output("kube-apiserver", "--version"))
        self._controllers = components.known_controllers(self._output("kube-controller-manager", "--help"))
        self._gates = self._enabled_gates()
        self._write_configs()
        try:
            self._start_component("etcd")
            self._wait("etcd", self._ready_check("etcd"))
            self._start_component("kube-apiserver")
            self._wait("kube-apiserver", self._ready_check("kube-apiserver"))
            # The controller manager gives up after 10 s and kwok after about 15 s without an
            # API server, so they start only now; the four start together.
            for name in ("kube-controller-manager", "kube-scheduler", "kwok", "toxiproxy"):
                self._start_component(name)
            for name in ("kube-controller-manager", "kube-scheduler", "kwok", "toxiproxy"):
                self._wait(name, self._ready_check(name))
            for i in range(self.options.nodes):
                self.create_node(f"lab-node-{i}")
            for i in range(self.options.nodes):
                self.wait_node_schedulable(f"lab-node-{i}")
            if self.options.real_nodes:
                self._start_real_nodes()
            self._wait(
                "default ServiceAccount", lambda: self._api_ok("/api/v1/namespaces/default/serviceaccounts/default")
            )
            self._control = control.ControlServer(self, self.files.control_socket)
            self._control.start()
        except BaseException:
            self.stop()
            raise
        self._save_state(ready=True)
        self._log(
            f"lab {self.options.name!r} ready in {time.monotonic() - started:.1f}s at {self.server} "
            f"(kubeconfig {self.kubeconfig})"
        )

    def stop(self) -> None:
        if self._control is not None:
            self._control.stop()
            self._control = None
        if self._net is not None:
            self._net.close()
        with self._lock:
            self._stop_real_nodes()
            for name in reversed(START_ORDER):
                proc = self._procs.pop(name, None)
                if proc is not None:
                    process.terminate(proc.pid)
                    proc.wait()
        state = LabState.load(self.run_dir)
        if state:
            state.pids, state.ready = {}, False
            state.save()

    def restart(self, component: str, downtime: float = 0.0, kill: bool = False) -> dict[str, Any]:
        """Stop ``component`` (SIGTERM, or SIGKILL with ``kill``: a crash), keep it down for
        ``downtime`` seconds, start it again on the same ports with the same data (etcd's data
        directory is kept), and return once it is ready (etcd: /health, kube-apiserver:
        /readyz, the others: their health endpoint) and kube-apiserver answers /readyz again.

        Works from any thread: the new process is tied to this process like the first one.
        Returns ``{"component", "old_pid", "pid", "seconds"}``."""
        if component not in self.components():
            raise LabError(f"unknown component {component!r}; one of {', '.join(self.components())}")
        if self.ports is None:
            raise LabError("the lab is not started")
        with self._lock:
            started = time.monotonic()
            proc = self._procs.pop(component, None)
            old_pid = proc.pid if proc is not None else None
            if proc is not None:
                process.terminate(proc.pid, kill=kill)
                proc.wait()
            self._log(f"lab: {component} stopped ({'SIGKILL' if kill else 'SIGTERM'}, pid {old_pid})")
            if downtime > 0:
                time.sleep(downtime)
            if component == "kwok":
                self._release_kwok_leases()
            if component == "toxiproxy" and self._net is not None:
                self._net.close()  # a new toxiproxy has no fault left to undo
            self._start_component(component)
            self._wait(component, self._ready_check(component), only=component)
            if component != "kube-apiserver":
                self._wait("kube-apiserver", self._ready_check("kube-apiserver"), only=component)
            self._save_state(ready=True)
            seconds = round(time.monotonic() - started, 2)
            pid = self._procs[component].pid
        self._log(f"lab: {component} restarted in {seconds}s (pid {old_pid} -> {pid})")
        return {"component": component, "old_pid": old_pid, "pid": pid, "seconds": seconds}

    def compact(self, restart_apiserver: bool = True) -> int:
        """Compact etcd at its current revision (etcd's v3 HTTP gateway, ``/v3/kv/compaction``,
        physical) and return that revision: every older resourceVersion is gone from etcd.

        kube-apiserver serves watches from its watch cache, whose history is a window of events
        since the cache last listed (k8s.io/apiserver/pkg/storage/cacher/watch_cache_history.go:
        ``too old resource version`` only when the asked version is before that window). etcd's
        compaction does not shrink that window (the cacher's compactor only drops list
        snapshots), so a watch resuming from an old resourceVersion would still be served. With
        ``restart_apiserver`` (the default) kube-apiserver is restarted: its caches list again
        at the current revision and a watch from any older resourceVersion gets 410 Gone and
        must relist, as after a compaction on a busy cluster. It also cuts every connection."""
        status = self._etcd("/v3/maintenance/status", {})
        revision = int(status["header"]["revision"])
        try:
            self._etcd("/v3/kv/compaction", {"revision": str(revision), "physical": True})
        except urllib.error.HTTPError as e:
            message = e.read().decode(errors="replace")
            if "compacted" not in message:  # compacting the same revision twice is fine
                raise LabError(f"etcd compaction at revision {revision} failed: {e.code} {message}") from e
        self._log(f"lab: etcd compacted at revision {revision}")
        if restart_apiserver:
            self.restart("kube-apiserver")
        return revision

    def components(self) -> tuple[str, ...]:
        """What ``restart`` accepts: the control plane's components, then ``kubelet-<node>`` and
        ``containerd-<node>`` of each real node (a restarted containerd leaves containers
        running, as on a real machine)."""
        return COMPONENTS + tuple(f"{kind}-{n.name}" for n in self.real_nodes for kind in ("kubelet", "containerd"))

    def real_node(self, name: str = "lab-real-0") -> RealNodeFiles:
        """Where a real node keeps everything: ``kubelet_root``, ``plugins_registry`` and
        ``plugins`` (for a DRA plugin: DRA_NODEAGENT_REGISTRY_DIR / PLUGINS_DIR), ``cdi``
        (DRA_NODEAGENT_CDI_ROOT, read by containerd), ``pod_logs``, containerd's socket."""
        for info in self.real_nodes:
            if info.name == name:
                return info.files()
        raise LabError(f"no real node {name!r}; this lab has {[n.name for n in self.real_nodes]}")

    def kill_containers(self, node: str = "lab-real-0") -> None:
        """SIGKILL every container and pod sandbox of a real node and its shims, as a crash or a
        reboot does (containerd and kubelet keep running; kubelet recreates the sandboxes)."""
        realnode.kill_containers(self.real_node(node), self.bin_dir / "runc")

    def ctr(self, node: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """containerd's ``ctr`` on a real node, namespace k8s.io."""
        files = self.real_node(node)
        return subprocess.run(
            [str(self.bin_dir / "ctr"), f"--address={files.containerd_socket}", "--namespace=k8s.io", *args],
            capture_output=True,
            text=True,
            check=check,
        )

    # -- real nodes ---------------------------------------------------------------------------

    def _real_node_info(self, name: str) -> RealNodeInfo:
        for info in self.real_nodes:
            if name in (f"kubelet-{info.name}", f"containerd-{info.name}"):
                return info
        raise LabError(f"unknown component {name!r}")

    def _claim_real_nodes(self) -> None:
        """Each real node's bridge, pod CIDR and ports, before the certificates and toxiproxy's
        configuration (both name the nodes' addresses). A watchdog cleans up if this process dies."""
        ports = free_ports(2 * self.options.real_nodes)
        for i in range(self.options.real_nodes):
            name = realnode.node_name(i)
            bridge = realnode.bridge_name(self.run_dir, i)
            subnet = realnode.claim_bridge(bridge, self.run_dir, i)
            files = RealNodeFiles(components.real_node_root(self.run_dir, name), name)
            self.real_nodes.append(
                RealNodeInfo(
                    name=name,
                    root=str(files.root),
                    bridge=bridge,
                    subnet=subnet,
                    kubelet_port=ports[2 * i],
                    healthz_port=ports[2 * i + 1],
                )
            )
        self._start_watchdog()

    def _start_real_nodes(self) -> None:
        """A containerd per node (with the lab's images imported), then a kubelet per node; return
        when every real Node is Ready and schedulable."""
        started = time.monotonic()
        archives = images.archives(self.bin_dir, e2e=self.options.e2e_images)
        kubelet_help = subprocess.run([str(self.bin_dir / "kubelet"), "--help"], capture_output=True, text=True)
        self._kubelet_gates = components.dra_feature_gates(kubelet_help.stdout)
        self._kubelet_gates += [g for g in self.options.extra_gates if g not in self._kubelet_gates]
        self._save_state(ready=False)
        for info in self.real_nodes:
            self._write_real_node_files(info)
            if self.options.node_namespaces:
                self._start_mount_namespace(info)
            self._start_component(f"containerd-{info.name}")
        for info in self.real_nodes:
            self._wait(f"containerd-{info.name}", self._ready_check(f"containerd-{info.name}"))
            for archive in archives.values():
                self.ctr(info.name, "images", "import", "--snapshotter=overlayfs", str(archive))
            self._start_component(f"kubelet-{info.name}")
        for info in self.real_nodes:
            self._wait(f"kubelet-{info.name}", self._ready_check(f"kubelet-{info.name}"))
            self.wait_node_schedulable(info.name, timeout=self.options.startup_timeout)
            node = self.api("GET", f"/api/v1/nodes/{info.name}")
            if not node.get("spec", {}).get("podCIDR"):
                self.api(
                    "PATCH",
                    f"/api/v1/nodes/{info.name}",
                    {"spec": {"podCIDR": info.subnet, "podCIDRs": [info.subnet]}},
                    content_type="application/merge-patch+json",
                )
        self._log(f"lab: {len(self.real_nodes)} real node(s) ready in {time.monotonic() - started:.1f}s")

    def _write_real_node_files(self, info: RealNodeInfo) -> None:
        files = info.files()
        link = self.run_dir / "nodes" / info.name
        link.parent.mkdir(exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(files.root)
        for directory in (
            files.kubelet_root,
            files.plugins_registry,
            files.plugins,
            files.pod_logs,
            files.cdi,
            files.cni_conf_dir,
            files.cni_ipam,
            files.containerd_root,
            files.containerd_state,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        files.containerd_config.write_text(components.build_containerd_config(files, self.bin_dir, images.PAUSE_IMAGE))
        (files.cni_conf_dir / "10-lab.conflist").write_text(
            json.dumps(components.build_cni_config(info.bridge, info.subnet, files.cni_ipam), indent=2)
        )
        cert, key = self.pki.client(info.name)
        files.kubeconfig.write_text(
            yaml.safe_dump(components.build_kubeconfig(self.server, self.pki.ca_cert, cert, key))
        )
        files.kubelet_config.write_text(
            yaml.safe_dump(
                components.build_kubelet_config(
                    files, info.node_ip, info.kubelet_port, info.healthz_port, self.pki.ca_cert, self._kubelet_gates
                )
            )
        )

    def _start_mount_namespace(self, info: RealNodeInfo) -> None:
        """A process holding a mount namespace (``mountns-<node>``) in which the node's kubelet
        directory is bound at /var/lib/kubelet and its CDI directory at /var/run/cdi; the node's
        containerd and kubelet enter it (``_start``), so hostPath volumes, the Pods' mounts and
        the plugin sockets all resolve to the node's own directories. Mounts made inside stay
        inside (propagation slave) and go with the namespace."""
        files = info.files()
        for mount_point in (realnode.E2E_KUBELET_DIR, realnode.E2E_CDI_DIR):
            mount_point.mkdir(parents=True, exist_ok=True)
        name = f"mountns-{info.name}"
        self._start(name, realnode.mount_namespace_args(files))
        pid = self._procs[name].pid
        self._wait(f"{name} mounts", lambda: realnode.mount_namespace_ready(pid), only=name)

    def _start_watchdog(self) -> None:
        state = self.run_dir / "real-nodes.json"
        realnode.write_watch_state(state, self.real_nodes)
        if self._watchdog is None or self._watchdog.poll() is not None:
            self._watchdog = process.spawn(
                [
                    sys.executable,
                    "-c",
                    "import sys; from operators.lab.realnode import main; sys.exit(main())",
                    "--watch",
                    str(os.getpid()),
                    "--state",
                    str(state),
                    "--runc",
                    str(self.bin_dir / "runc"),
                ],
                self.files.logs / "real-node-watchdog.log",
                env=dict(os.environ),
                tie_to_parent=False,
            )

    def _stop_real_nodes(self) -> None:
        """kubelets first, then every container, then the containerds; mounts and bridges last."""
        for info in self.real_nodes:
            proc = self._procs.pop(f"kubelet-{info.name}", None)
            if proc is not None:
                process.terminate(proc.pid)
                proc.wait()
        for info in self.real_nodes:
            realnode.kill_containers(info.files(), self.bin_dir / "runc")
            proc = self._procs.pop(f"containerd-{info.name}", None)
            if proc is not None:
                process.terminate(proc.pid)
                proc.wait()
            holder = self._procs.pop(f"mountns-{info.name}", None)
            if holder is not None:
                process.terminate(holder.pid)
                holder.wait()
            for problem in realnode.cleanup(info, self.bin_dir / "runc"):
                self._log(f"lab: real node {info.name}: could not clean up {problem}")
        if self._watchdog is not None:
            process.terminate(self._watchdog.pid, timeout=5)
            self._watchdog.wait()
            self._watchdog = None

    def _release_kwok_leases(self) -> None:
        """kwok renews each Node's Lease (kube-node-lease) under an identity unique to its process,
        so a new kwok would leave the Nodes alone until the old one's Lease expired (40 s). A
        restarted kubelet renews its Lease at once; deleting the stale Leases gives kwok the same."""
        try:
            nodes = self.api("GET", "/api/v1/nodes")["items"]
        except (OSError, urllib.error.URLError, ValueError) as e:
            self._log(f"lab: could not list Nodes to release kwok's Leases: {e}")
            return
        for node in nodes:
            meta = node["metadata"]
            if (meta.get("annotations") or {}).get(components.KWOK_NODE_ANNOTATION) != "fake":
                continue
            try:
                self.api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{meta['name']}")
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    self._log(f"lab: could not release the Lease of Node {meta['name']}: {e}")
            except (OSError, urllib.error.URLError) as e:
                self._log(f"lab: could not release the Lease of Node {meta['name']}: {e}")

    def restart_controller_manager(self, upstream_controllers: bool, api_limits: tuple[int, int] | None = None) -> None:
        """Switch between upstream's DRA controllers and ours (cheaper than a second lab);
        ``api_limits``: new client limits (QPS, burst), kept for later restarts."""
        with self._lock:
            self.upstream_controllers = upstream_controllers
            if api_limits is not None:
                qps, burst = api_limits
                self.options.controller_manager_api_limits = (qps, burst)
            self.restart("kube-controller-manager")

    def restart_with_gates(self, disabled_gates: tuple[str, ...]) -> None:
        """Switch DRA gates in the running lab, as an admin would (kube-apiserver, then
        kube-controller-manager and kube-scheduler restarted with ``disabled_gates`` left out;
        objects keep what was written while a gate was on)."""
        with self._lock:
            self.options.disabled_gates = tuple(disabled_gates)
            self._gates = self._enabled_gates()
            for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
                self.restart(component)

    def restart_scheduler(self, scheduler_config: dict[str, Any] | None) -> None:
        """Run the scheduler with another KubeSchedulerConfiguration (None: the default)."""
        with self._lock:
            self.options.scheduler_config = scheduler_config
            self._write_scheduler_config()
            self.restart("kube-scheduler")

    def create_node(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return self.api("POST", "/api/v1/nodes", components.build_node(name, labels))

    def wait_node_schedulable(self, name: str, timeout: float = 60.0) -> None:
        """Ready, and the not-ready taint that admission adds removed by node-lifecycle."""

        def ready() -> bool:
            node = self.api("GET", f"/api/v1/nodes/{name}")
            conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
            taints = node.get("spec", {}).get("taints") or []
            return conditions.get("Ready") == "True" and not any(
                t["key"].startswith("node.kubernetes.io/") for t in taints
            )

        self._wait(f"node {name} schedulable", ready, timeout)

    def processes(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}

    def dead_processes(self) -> dict[str, int | None]:
        """Components that exited on their own, with their exit codes."""
        return {name: proc.returncode for name, proc in self._procs.items() if proc.poll() is not None}

    def api(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        """A synchronous admin call (the launcher has no event loop); JSON answers decoded.
        ``content_type``: e.g. ``application/merge-patch+json`` for a PATCH."""
        data = json.dumps(body).encode() if body is not None else None
        raw = self.raw(path, method, data, content_type)
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return raw.decode()

    def raw(
        self,
        path: str,
        method: str = "GET",
        data: bytes | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> bytes:
        """A synchronous admin call; the body as sent (``/metrics``, ``/debug/pprof/profile``)."""
        request = urllib.request.Request(
            self.server + path, data=data, method=method, headers={"Content-Type": content_type}
        )
        with urllib.request.urlopen(request, context=self._admin_tls(), timeout=timeout) as response:
            return response.read()

    # -- internals ---------------------------------------------------------------------------

    def _prepare_run_dir(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("etcd", "pki", "nodes"):
            target = self.run_dir / stale
            if target.exists():
                subprocess.run(["rm", "-rf", str(target)], check=True)
        self.files.logs.mkdir(exist_ok=True)
        self.ports = Ports(*free_ports(8))
        if self.options.real_nodes:
            self._claim_real_nodes()
        # Each real node's kubelet has its own identity, so the Node authorizer and NodeRestriction apply.
        # Pods on a real node reach kube-apiserver at the node's address (toxiproxy forwards it;
        # there is no kube-proxy), so the serving certificate names every node's address.
        self.pki.create(
            {
                **IDENTITIES,
                **{
                    realnode.node_name(i): (f"system:node:{realnode.node_name(i)}", "system:nodes")
                    for i in range(self.options.real_nodes)
                },
            },
            server_ips=[n.node_ip for n in self.real_nodes],
        )
        self._net = NetProxy(self.ports.toxiproxy, self.ports.apiserver_proxy)

    def _write_configs(self) -> None:
        for identity in IDENTITIES:
            cert, key = self.pki.client(identity)
            self.files.kubeconfig(identity).write_text(
                yaml.safe_dump(components.build_kubeconfig(self.server, self.pki.ca_cert, cert, key))
            )
            self.files.kubeconfig_via_proxy(identity).write_text(
                yaml.safe_dump(components.build_kubeconfig(self.proxy_server, self.pki.ca_cert, cert, key))
            )
        self.files.toxiproxy_config.write_text(
            json.dumps(
                proxy_config(self._ports.apiserver_proxy, self._ports.apiserver)
                + [node_api_proxy(n.name, n.node_ip, self._ports.apiserver) for n in self.real_nodes]
            )
        )
        self._write_scheduler_config()
        self.files.kwok_stages.write_text(
            yaml.safe_dump_all(components.build_kwok_lab_stages(self.options.kwok_options))
        )
        self._save_state(ready=False)

    def _write_scheduler_config(self) -> None:
        self.files.scheduler_config.write_text(
            yaml.safe_dump(
                components.build_scheduler_config(
                    self.files.kubeconfig("kube-scheduler"), self.options.scheduler_config
                )
            )
        )

    def _save_state(self, ready: bool) -> None:
        LabState(
            name=self.options.name,
            run_dir=str(self.run_dir),
            kubeconfig=str(self.kubeconfig),
            server=self.server,
            ports=asdict(self._ports),
            pids=self.processes(),
            supervisor_pid=os.getpid(),
            ready=ready,
            upstream_controllers=self.upstream_controllers,
            proxy_server=self.proxy_server,
            toxiproxy_api=f"http://127.0.0.1:{self._ports.toxiproxy}",
            real_nodes=[asdict(n) for n in self.real_nodes],
        ).save()

    def _enabled_gates(self) -> list[str]:
        gates = [g for g in self._all_gates if g not in self.options.disabled_gates]
        return gates + [g for g in self.options.extra_gates if g not in gates]

    def _gates_off(self) -> tuple[str, ...]:
        """Disabled gates the binaries know, switched off explicitly (a beta gate is on by default)."""
        return tuple(g for g in self.options.disabled_gates if g in self._all_gates)

    def _output(self, binary: str, *args: str) -> str:
        return subprocess.run([str(self.bin_dir / binary), *args], capture_output=True, text=True).stdout

    def _start_controller_manager(self) -> None:
        self._start(
            "kube-controller-manager",
            components.build_controller_manager_args(
                self.bin_dir / "kube-controller-manager",
                self.files,
                self._ports,
                self._gates,
                self.upstream_controllers,
                self.options.controller_manager_api_limits,
                off=self._gates_off(),
                known=self._controllers,
                extra=self.options.controller_manager_flags,
            ),
        )

    def _start_scheduler(self) -> None:
        self._start(
            "kube-scheduler",
            components.build_scheduler_args(
                self.bin_dir / "kube-scheduler", self.files, self._ports, self._gates, self._gates_off()
            ),
        )

    def _start_component(self, name: str) -> None:
        if name == "kube-controller-manager":
            self._start_controller_manager()
        elif name == "kube-scheduler":
            self._start_scheduler()
        elif name == "etcd":
            self._start("etcd", components.build_etcd_args(self.bin_dir / "etcd", self.files, self._ports))
        elif name == "kube-apiserver":
            self._start(
                "kube-apiserver",
                components.build_apiserver_args(
                    self.bin_dir / "kube-apiserver",
                    self.files,
                    self._ports,
                    self._gates,
                    self._gates_off(),
                    real_nodes=self.options.real_nodes > 0,
                    minor=self.minor,
                ),
            )
        elif name == "kwok":
            self._start(
                "kwok",
                components.build_kwok_args(
                    self.bin_dir / "kwok", self.files, self._ports, paths.kwok_stages_dir(self.bin_dir)
                ),
            )
        elif name == "toxiproxy":
            self._start(
                "toxiproxy", components.build_toxiproxy_args(self.bin_dir / "toxiproxy-server", self.files, self._ports)
            )
        elif name.startswith("containerd-"):
            files = self._real_node_info(name).files()
            # The shim (containerd-shim-runc-v2) is looked up on PATH.
            self._start(
                name, components.build_containerd_args(self.bin_dir / "containerd", files), path_first=self.bin_dir
            )
        elif name.startswith("kubelet-"):
            info = self._real_node_info(name)
            root_dir = realnode.E2E_KUBELET_DIR if self.options.node_namespaces else None
            self._start(
                name,
                components.build_kubelet_args(self.bin_dir / "kubelet", info.files(), info.node_ip, root_dir),
                path_first=self.bin_dir,
            )
        else:
            raise LabError(f"unknown component {name!r}")

    def _ready_check(self, name: str) -> Callable[[], bool]:
        if name.startswith("containerd-"):
            node = self._real_node_info(name).name
            return lambda: self.ctr(node, "version", check=False).returncode == 0
        if name.startswith("kubelet-"):
            info = self._real_node_info(name)
            return lambda: self._http_ok(f"http://127.0.0.1:{info.healthz_port}/healthz")
        ports = self._ports
        return {
            "etcd": lambda: self._http_ok(f"http://127.0.0.1:{ports.etcd_client}/health"),
            "kube-apiserver": lambda: self._api_ok("/readyz"),
            "kube-controller-manager": lambda: self._http_ok(f"https://127.0.0.1:{ports.controller_manager}/healthz"),
            "kube-scheduler": lambda: self._http_ok(f"https://127.0.0.1:{ports.scheduler}/readyz"),
            "kwok": lambda: self._http_ok(f"http://127.0.0.1:{ports.kwok}/healthz"),
            # Ready when its proxy listens, not only its API.
            "toxiproxy": lambda: (
                self._http_ok(f"http://127.0.0.1:{ports.toxiproxy}/version") and self._listening(ports.apiserver_proxy)
            ),
        }[name]

    @staticmethod
    def _listening(port: int) -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True

    def _etcd(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._ports.etcd_client}{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def _start(self, name: str, args: list[str], path_first: Path | None = None) -> None:
        holder = (
            self._procs.get("mountns-" + name.partition("-")[2])
            if name.startswith(("kubelet-", "containerd-"))
            else None
        )
        if holder is not None:
            args = ["nsenter", f"--mount=/proc/{holder.pid}/ns/mnt", "--", *args]
        # An empty HOME keeps kwok from loading ~/.kwok/kwok.yaml and clients from ~/.kube/config.
        path = os.environ.get("PATH", "/usr/bin:/bin")
        if path_first is not None:
            path = f"{path_first}:{path}:/usr/sbin:/sbin"
        env = {"PATH": path, "HOME": str(self.run_dir)}
        log = self.files.logs / f"{name}.log"
        self._procs[name] = process.spawn(args, log, env=env)
        self._log(f"lab: started {name} (pid {self._procs[name].pid}, log {log})")

    def _wait(
        self, what: str, check: Callable[[], bool], timeout: float | None = None, only: str | None = None
    ) -> None:
        """Poll ``check``; fail early when a component died (``only``: when that one died)."""
        timeout = timeout or self.options.startup_timeout
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            dead = {n: c for n, c in self.dead_processes().items() if only is None or n == only}
            if dead:
                name, code = next(iter(dead.items()))
                tail = self._log_tail(name)
                raise LabError(
                    f"{name} exited with code {code} while waiting for {what}; "
                    f"last log lines ({self.files.logs / (name + '.log')}):\n{tail}"
                )
            try:
                if check():
                    self._log(f"lab: {what} ready after {time.monotonic() - started:.1f}s")
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise LabError(f"timed out after {timeout:.0f}s waiting for {what}; logs in {self.files.logs}")
            time.sleep(0.2)

    def _log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join((self.files.logs / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _admin_tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(*map(str, self.pki.client("admin")))
        return context

    def _api_ok(self, path: str) -> bool:
        self.api("GET", path)  # raises on anything but 2xx
        return True

    def controller_manager_metrics(self) -> str:
        """kube-controller-manager's /metrics text, read as the lab's admin (system:masters)."""
        context = _self_signed_server()
        context.load_cert_chain(*map(str, self.pki.client("admin")))
        url = f"https://127.0.0.1:{self._ports.controller_manager}/metrics"
        with urllib.request.urlopen(url, context=context, timeout=10) as response:
            return response.read().decode()

    @staticmethod
    def _http_ok(url: str) -> bool:
        context = _self_signed_server() if url.startswith("https") else None
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return response.status == 200


def _self_signed_server() -> ssl.SSLContext:
    """TLS to kube-controller-manager or kube-scheduler on loopback: they serve a self-signed
    in-memory certificate, so the server is not verified."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
