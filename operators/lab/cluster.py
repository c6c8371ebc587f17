"""Start, watch and stop one lab: etcd, kube-apiserver, kube-controller-manager, kube-scheduler
and kwok on 127.0.0.1, plus kwok-managed Nodes."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml

from . import components, paths, process
from .components import Files, Ports
from .pki import Pki

# Client identities: the admin bypasses RBAC (system:masters); the scheduler and the controller
# manager use the identities the bootstrap RBAC policy has roles for.
IDENTITIES = {
    "admin": ("lab-admin", "system:masters"),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kwok": ("kwok-controller", "system:masters"),
}
START_ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


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

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or paths.run_dir(self.name)).resolve()

    def resolved_bin_dir(self) -> Path:
        return Path(self.bin_dir or paths.bin_dir()).resolve()


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: all sockets stay open until every port is chosen, so the
    kernel cannot hand out the same port twice."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


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

    @classmethod
    def load(cls, run_dir: Path) -> "LabState | None":
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
        self.ports: Ports | None = None
        self.upstream_controllers = self.options.upstream_controllers

    # -- public surface ----------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.files.kubeconfig("admin")

    @property
    def server(self) -> str:
        assert self.ports
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def feature_gates(self) -> list[str]:
        return list(self._gates)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
                              input=input, capture_output=True, text=True, check=check)

    def start(self) -> None:
        missing = paths.missing_binaries(self.bin_dir)
        if missing:
            raise LabError(f"lab binaries missing in {self.bin_dir}: {', '.join(missing)}. "
                           "Run `make lab-build` (needs a Go >= 1.26 toolchain) or set DRA_LAB_BIN_DIR.")
        existing = LabState.load(self.run_dir)
        if existing and any(process.alive(p) for p in existing.pids.values()):
            raise LabError(f"a lab named {self.options.name!r} is already running in {self.run_dir}; "
                           "run `dra-operators lab down` first or pick another --name")
        started = time.monotonic()
        self._prepare_run_dir()
        self._gates = components.dra_feature_gates(
            subprocess.run([str(self.bin_dir / "kube-apiserver"), "--help"],
                           capture_output=True, text=True).stdout)
        self._write_configs()
        try:
            self._start("etcd", components.build_etcd_args(self.bin_dir / "etcd", self.files, self.ports))
            self._wait("etcd", lambda: self._http_ok(f"http://127.0.0.1:{self.ports.etcd_client}/health"))
            self._start("kube-apiserver", components.build_apiserver_args(
                self.bin_dir / "kube-apiserver", self.files, self.ports, self._gates))
            self._wait("kube-apiserver", lambda: self._api_ok("/readyz"))
            # The controller manager gives up after 10 s and kwok after about 15 s without an
            # API server, so both start only now; the three start together.
            self._start_controller_manager()
            self._start_scheduler()
            self._start("kwok", components.build_kwok_args(
                self.bin_dir / "kwok", self.files, self.ports, paths.kwok_stages_dir(self.bin_dir)))
            self._wait("kube-controller-manager", lambda: self._http_ok(
                f"https://127.0.0.1:{self.ports.controller_manager}/healthz"))
            self._wait("kube-scheduler", lambda: self._http_ok(
                f"https://127.0.0.1:{self.ports.scheduler}/readyz"))
            self._wait("kwok", lambda: self._http_ok(f"http://127.0.0.1:{self.ports.kwok}/healthz"))
            for i in range(self.options.nodes):
                self.create_node(f"lab-node-{i}")
            for i in range(self.options.nodes):
                self.wait_node_schedulable(f"lab-node-{i}")
            self._wait("default ServiceAccount", lambda: self._api_ok(
                "/api/v1/namespaces/default/serviceaccounts/default"))
        except BaseException:
            self.stop()
            raise
        self._save_state(ready=True)
        self._log(f"lab {self.options.name!r} ready in {time.monotonic() - started:.1f}s at {self.server} "
                  f"(kubeconfig {self.kubeconfig})")

    def stop(self) -> None:
        for name in reversed(START_ORDER):
            proc = self._procs.pop(name, None)
            if proc is not None:
                process.terminate(proc.pid)
                proc.wait()
        state = LabState.load(self.run_dir)
        if state:
            state.pids, state.ready = {}, False
            state.save()

    def restart_controller_manager(self, upstream_controllers: bool) -> None:
        """Switch between upstream's DRA controllers and ours (cheaper than a second lab)."""
        proc = self._procs.pop("kube-controller-manager", None)
        if proc is not None:
            process.terminate(proc.pid)
            proc.wait()
        self.upstream_controllers = upstream_controllers
        self._start_controller_manager()
        self._wait("kube-controller-manager", lambda: self._http_ok(
            f"https://127.0.0.1:{self.ports.controller_manager}/healthz"))
        self._save_state(ready=True)

    def restart_scheduler(self, scheduler_config: dict[str, Any] | None) -> None:
        """Run the scheduler with another KubeSchedulerConfiguration (None: the default)."""
        proc = self._procs.pop("kube-scheduler", None)
        if proc is not None:
            process.terminate(proc.pid)
            proc.wait()
        self.options.scheduler_config = scheduler_config
        self._write_scheduler_config()
        self._start_scheduler()
        self._wait("kube-scheduler", lambda: self._http_ok(
            f"https://127.0.0.1:{self.ports.scheduler}/readyz"))
        self._save_state(ready=True)

    def create_node(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        return self.api("POST", "/api/v1/nodes", components.build_node(name, labels))

    def wait_node_schedulable(self, name: str, timeout: float = 60.0) -> None:
        """Ready, and the not-ready taint that admission adds removed by node-lifecycle."""
        def ready() -> bool:
            node = self.api("GET", f"/api/v1/nodes/{name}")
            conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
            taints = node.get("spec", {}).get("taints") or []
            return conditions.get("Ready") == "True" and not any(
                t["key"].startswith("node.kubernetes.io/") for t in taints)
        self._wait(f"node {name} schedulable", ready, timeout)

    def processes(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self._procs.items() if proc.poll() is None}

    def dead_processes(self) -> dict[str, int | None]:
        """Components that exited on their own, with their exit codes."""
        return {name: proc.returncode for name, proc in self._procs.items() if proc.poll() is not None}

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A synchronous admin call (the launcher has no event loop); JSON answers decoded."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self._admin_tls(), timeout=30) as response:
            raw = response.read()
        try:
            return json.loads(raw or b"{}")
        except ValueError:
            return raw.decode()

    # -- internals ---------------------------------------------------------------------------

    def _prepare_run_dir(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("etcd", "pki"):
            target = self.run_dir / stale
            if target.exists():
                subprocess.run(["rm", "-rf", str(target)], check=True)
        self.files.logs.mkdir(exist_ok=True)
        self.ports = Ports(*free_ports(6))
        self.pki.create(IDENTITIES)

    def _write_configs(self) -> None:
        for identity in IDENTITIES:
            cert, key = self.pki.client(identity)
            self.files.kubeconfig(identity).write_text(yaml.safe_dump(
                components.build_kubeconfig(self.server, self.pki.ca_cert, cert, key)))
        self._write_scheduler_config()
        self.files.kwok_stages.write_text(yaml.safe_dump_all(components.build_kwok_lab_stages()))
        self._save_state(ready=False)

    def _write_scheduler_config(self) -> None:
        self.files.scheduler_config.write_text(yaml.safe_dump(components.build_scheduler_config(
            self.files.kubeconfig("kube-scheduler"), self.options.scheduler_config)))

    def _save_state(self, ready: bool) -> None:
        LabState(
            name=self.options.name, run_dir=str(self.run_dir), kubeconfig=str(self.kubeconfig),
            server=self.server, ports=asdict(self.ports), pids=self.processes(),
            supervisor_pid=os.getpid(), ready=ready, upstream_controllers=self.upstream_controllers,
        ).save()

    def _start_controller_manager(self) -> None:
        self._start("kube-controller-manager", components.build_controller_manager_args(
            self.bin_dir / "kube-controller-manager", self.files, self.ports, self._gates,
            self.upstream_controllers))

    def _start_scheduler(self) -> None:
        self._start("kube-scheduler", components.build_scheduler_args(
            self.bin_dir / "kube-scheduler", self.files, self.ports, self._gates))

    def _start(self, name: str, args: list[str]) -> None:
        # An empty HOME keeps kwok from loading ~/.kwok/kwok.yaml and clients from ~/.kube/config.
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.run_dir)}
        log = self.files.logs / f"{name}.log"
        self._procs[name] = process.spawn(args, log, env=env)
        self._log(f"lab: started {name} (pid {self._procs[name].pid}, log {log})")

    def _wait(self, what: str, check: Callable[[], bool], timeout: float | None = None) -> None:
        timeout = timeout or self.options.startup_timeout
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            dead = self.dead_processes()
            if dead:
                name, code = next(iter(dead.items()))
                tail = self._log_tail(name)
                raise LabError(f"{name} exited with code {code} while waiting for {what}; "
                               f"last log lines ({self.files.logs / (name + '.log')}):\n{tail}")
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

    @staticmethod
    def _http_ok(url: str) -> bool:
        # kcm and the scheduler serve a self-signed in-memory certificate: no verification.
        context = ssl._create_unverified_context() if url.startswith("https") else None
        with urllib.request.urlopen(url, context=context, timeout=5) as response:
            return response.status == 200
