"""Faults are part of the lab: each component restarted, etcd compacted, and network faults
between chosen clients and kube-apiserver through toxiproxy, on a lab of this module's own
(``fault_lab``), plus the same verbs through the CLI on a detached ``lab up``.

Requests go through plain HTTP clients built from the lab's kubeconfig files, so what is
tested is the lab and the files it writes, not a client library's retries.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.lab import Lab, paths, process
from operators.lab.cluster import COMPONENTS, LabState


def _wait(check: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(0.1)


class Client:
    """HTTP/1.1 to the server of a kubeconfig, with its CA and credentials (certificate or token)."""

    def __init__(self, kubeconfig: Path):
        config = yaml.safe_load(Path(kubeconfig).read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        url = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = url.hostname, url.port
        self.context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        if "client-certificate" in user:
            self.context.load_cert_chain(user["client-certificate"], user["client-key"])
        self.headers = {"Authorization": f"Bearer {user['token']}"} if "token" in user else {}

    def connection(self, timeout: float = 10.0) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=timeout)

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        conn = self.connection(timeout)
        try:
            conn.request(
                method,
                path,
                body=json.dumps(body) if body is not None else None,
                headers={"Content-Type": "application/json", **self.headers},
            )
            response = conn.getresponse()
            raw = response.read()
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw)
        except ValueError:
            return response.status, raw.decode(errors="replace")

    def ok(self, path: str = "/readyz", timeout: float = 10.0) -> bool:
        return self.request("GET", path, timeout=timeout)[0] == 200


class Watch:
    """A watch read on a thread: ``status`` of the answer, ``events`` as they come, ``ended`` set
    when the stream ends (server closed it, connection cut)."""

    def __init__(self, client: Client, path: str):
        self.events: list[dict] = []
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self._conn = client.connection(timeout=120)
        self._conn.request("GET", path, headers=client.headers)
        self._response = self._conn.getresponse()
        self.status = self._response.status
        if self.status != 200:
            self.body = json.loads(self._response.read())
            self.ended.set()
            return
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            while line := self._response.readline():
                self.events.append(json.loads(line))
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.error = e
        finally:
            self.ended.set()

    def close(self) -> None:
        # Wake the reader first: closing the response would wait for its lock, held by a read.
        if self._conn.sock is not None:
            try:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if not self.ended.is_set():
            self._reader.join(10)
        self._conn.close()


def _configmap(lab: Lab, name: str, data: dict[str, str] | None = None) -> dict:
    return lab.api(
        "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": name}, "data": data or {"v": "0"}}
    )


def _update(lab: Lab, name: str, value: str) -> dict:
    return lab.api(
        "PATCH",
        f"/api/v1/namespaces/default/configmaps/{name}",
        {"data": {"v": value}},
        content_type="application/merge-patch+json",
    )


def _healthy(url: str) -> bool:
    context = ssl._create_unverified_context() if url.startswith("https") else None  # self-signed
    with urllib.request.urlopen(url, context=context, timeout=5) as response:
        return response.status == 200


def _health_url(lab: Lab, component: str) -> str | None:
    p = lab.ports
    return {
        "etcd": f"http://127.0.0.1:{p.etcd_client}/health",
        "kube-controller-manager": f"https://127.0.0.1:{p.controller_manager}/healthz",
        "kube-scheduler": f"https://127.0.0.1:{p.scheduler}/readyz",
        "kwok": f"http://127.0.0.1:{p.kwok}/healthz",
        "toxiproxy": f"http://127.0.0.1:{p.toxiproxy}/version",
    }.get(component)


def _pod(name: str) -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "terminationGracePeriodSeconds": 0,
        },
    }


def _pod_running(lab: Lab, name: str, timeout: float = 60) -> dict:
    lab.api("POST", "/api/v1/namespaces/default/pods", _pod(name))

    def running() -> dict | None:
        pod = lab.api("GET", f"/api/v1/namespaces/default/pods/{name}")
        return pod if pod.get("status", {}).get("phase") == "Running" else None

    return _wait(running, timeout, f"Pod {name} Running")


@pytest.fixture(autouse=True)
def healed(fault_lab: Lab):
    yield
    fault_lab.net.heal()


# -- restarts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "component,kill",
    [
        ("etcd", False),
        ("etcd", True),
        ("kube-apiserver", False),
        ("kube-apiserver", True),
        ("kube-controller-manager", False),
        ("kube-scheduler", False),
        ("kwok", False),
        ("toxiproxy", False),
    ],
)
def test_restart_component_same_ports_same_data_ready_again(fault_lab: Lab, component: str, kill: bool):
    name = f"before-{component}-{uuid.uuid4().hex[:4]}"
    before = _configmap(fault_lab, name, {"v": "kept"})
    ports = fault_lab.ports
    old_pid = fault_lab.processes()[component]

    result = fault_lab.restart(component, kill=kill)

    assert result["old_pid"] == old_pid and result["pid"] != old_pid
    assert fault_lab.processes()[component] == result["pid"]
    assert process.parent_pid(result["pid"]) == os.getpid()  # owned by the lab's process, not a thread
    assert fault_lab.ports == ports
    # Ready again on the same port, at once (restart returned only then).
    if url := _health_url(fault_lab, component):
        assert _healthy(url)
    assert fault_lab.api("GET", "/readyz") == "ok"
    # Objects written before are still there, unchanged (etcd's data directory is kept).
    after = fault_lab.api("GET", f"/api/v1/namespaces/default/configmaps/{name}")
    assert after["metadata"]["uid"] == before["metadata"]["uid"] and after["data"] == {"v": "kept"}
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    # The proxy in front of the API server forwards to the same port.
    assert Client(fault_lab.kubeconfig_via_proxy()).ok()
    assert LabState.load(fault_lab.run_dir).pids[component] == result["pid"]

    # The restarted component does its job.
    if component == "kube-controller-manager":  # the serviceaccount controller
        namespace = f"ns-{uuid.uuid4().hex[:6]}"
        fault_lab.api("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
        _wait(
            lambda: fault_lab.api("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
            60,
            "ServiceAccount default from the restarted controller manager",
        )
    if component in ("kube-scheduler", "kwok", "etcd"):  # scheduled, then Running by kwok
        pod = _pod_running(fault_lab, f"after-{component}-{uuid.uuid4().hex[:4]}")
        assert pod["spec"]["nodeName"] == "lab-node-0"


def test_restart_with_downtime_keeps_the_component_down(fault_lab: Lab):
    ports = fault_lab.ports
    seen_down = threading.Event()

    def probe() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not seen_down.is_set():
            try:
                socket.create_connection(("127.0.0.1", ports.kwok), timeout=1).close()
            except ConnectionRefusedError:
                seen_down.set()
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    started = time.monotonic()
    fault_lab.restart("kwok", downtime=2.0)
    prober.join()
    assert seen_down.is_set()
    assert time.monotonic() - started >= 2.0


def test_restart_unknown_component_names_the_known_ones(fault_lab: Lab):
    with pytest.raises(Exception, match="kube-apiserver"):
        fault_lab.restart("kubelet")


# -- compaction --------------------------------------------------------------------------------


def _watch_path(name: str, rv: str) -> str:
    return (
        f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}"
        f"&fieldSelector=metadata.name%3D{name}&timeoutSeconds=60"
    )


def _gone(client: Client, name: str, rv: str) -> bool:
    """A watch from ``rv`` answered 410 Gone (an HTTP 410, or a first event ERROR 410)."""
    watch = Watch(client, _watch_path(name, rv))
    try:
        if watch.status == 410:
            return True
        if watch.status == 429:  # caches initializing after the restart: retry
            return False
        assert watch.status == 200, (watch.status, getattr(watch, "body", None))
        _wait(lambda: watch.events or watch.ended.is_set(), 30, "a first watch event")
        assert watch.events, f"watch ended without an event ({watch.error!r})"
        first = watch.events[0]
        if first["type"] == "ERROR":
            assert first["object"]["code"] in (410, 429), first
            return first["object"]["code"] == 410
        return False
    finally:
        watch.close()


def _first_event(client: Client, name: str, rv: str) -> dict:
    watch = Watch(client, _watch_path(name, rv))
    try:
        assert watch.status == 200, getattr(watch, "body", None)
        _wait(lambda: watch.events or watch.ended.is_set(), 30, "a first watch event")
        return watch.events[0]
    finally:
        watch.close()


def test_compact_makes_watches_from_old_resource_versions_gone(fault_lab: Lab):
    client = Client(fault_lab.kubeconfig)
    name = f"compacted-{uuid.uuid4().hex[:4]}"
    old_rv = _configmap(fault_lab, name)["metadata"]["resourceVersion"]
    _update(fault_lab, name, "1")
    latest_rv = _update(fault_lab, name, "2")["metadata"]["resourceVersion"]

    # Before: the watch resumes from the old resourceVersion and gets the changes since.
    first = _first_event(client, name, old_rv)
    assert first["type"] == "MODIFIED" and first["object"]["data"] == {"v": "1"}

    revision = fault_lab.compact()

    assert revision >= int(latest_rv)
    # After: 410 Gone, the client must relist.
    _wait(lambda: _gone(client, name, old_rv), 60, f"410 for a watch from resourceVersion {old_rv}")
    # The current state is still there and can be watched from a fresh list.
    listed = fault_lab.api("GET", f"/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3D{name}")
    assert [item["data"] for item in listed["items"]] == [{"v": "2"}]
    _update(fault_lab, name, "3")
    first = _first_event(client, name, listed["metadata"]["resourceVersion"])
    assert first["type"] == "MODIFIED" and first["object"]["data"] == {"v": "3"}


def test_compact_without_apiserver_restart_is_hidden_by_the_watch_cache(fault_lab: Lab):
    """Why ``compact`` restarts kube-apiserver: etcd alone forgets old revisions, but the watch
    cache still serves a watch from them (see Lab.compact)."""
    fault_lab.restart("kube-apiserver")  # a fresh watch cache, so the window surely holds old_rv
    client = Client(fault_lab.kubeconfig)
    name = f"cached-{uuid.uuid4().hex[:4]}"
    old_rv = _configmap(fault_lab, name)["metadata"]["resourceVersion"]
    _update(fault_lab, name, "1")
    pid = fault_lab.processes()["kube-apiserver"]

    fault_lab.compact(restart_apiserver=False)

    assert fault_lab.processes()["kube-apiserver"] == pid
    first = _first_event(client, name, old_rv)
    assert first["type"] == "MODIFIED" and first["object"]["data"] == {"v": "1"}


# -- network faults through toxiproxy ------------------------------------------------------------


def _kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(paths.bin_dir() / "kubectl"), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_requests_through_the_proxy_work_for_any_identity(fault_lab: Lab, tmp_path: Path):
    via = fault_lab.kubeconfig_via_proxy("admin")
    assert yaml.safe_load(via.read_text())["clusters"][0]["cluster"]["server"] == fault_lab.proxy_server
    assert fault_lab.proxy_server != fault_lab.server
    readyz = _kubectl(via, "get", "--raw", "/readyz")  # kubectl verifies the serving certificate
    assert readyz.stdout.strip() == "ok", readyz.stderr

    whoami = _kubectl(fault_lab.kubeconfig_via_proxy("kube-scheduler"), "auth", "whoami", "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == "system:kube-scheduler", whoami.stderr

    # Any kubeconfig, here a ServiceAccount token.
    account = f"prober-{uuid.uuid4().hex[:4]}"
    fault_lab.api("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": account}})
    token = fault_lab.api(
        "POST", f"/api/v1/namespaces/default/serviceaccounts/{account}/token", {"spec": {"expirationSeconds": 3600}}
    )["status"]["token"]
    direct = tmp_path / "sa.kubeconfig"
    direct.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "sa",
                "clusters": [
                    {
                        "name": "lab",
                        "cluster": {"server": fault_lab.server, "certificate-authority": str(fault_lab.pki.ca_cert)},
                    }
                ],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "lab", "user": "sa"}}],
            }
        )
    )
    proxied = fault_lab.via_proxy(direct)
    assert proxied == tmp_path / "sa.via-proxy.kubeconfig"
    whoami = _kubectl(proxied, "auth", "whoami", "-o", "json")
    assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == f"system:serviceaccount:default:{account}", (
        whoami.stderr
    )
    # The fault hits the proxied kubeconfig only.
    with fault_lab.net.refusing():
        assert _kubectl(proxied, "auth", "whoami").returncode != 0
        assert _kubectl(direct, "auth", "whoami").returncode == 0


def test_cut_ends_an_open_watch_and_new_connections_work(fault_lab: Lab):
    proxied, direct = Client(fault_lab.kubeconfig_via_proxy()), Client(fault_lab.kubeconfig)
    rv = fault_lab.api("GET", "/api/v1/namespaces/default/configmaps")["metadata"]["resourceVersion"]
    through_proxy = Watch(
        proxied, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=120"
    )
    beside = Watch(direct, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=120")
    try:
        assert through_proxy.status == 200 and beside.status == 200
        name = f"seen-{uuid.uuid4().hex[:4]}"
        _configmap(fault_lab, name)
        _wait(lambda: through_proxy.events, 30, "the watch through the proxy to see an event")
        assert not through_proxy.ended.is_set()

        fault_lab.net.cut()

        assert through_proxy.ended.wait(10), "the watch through the proxy did not end"
        assert proxied.ok()  # a new connection works at once
        assert not beside.ended.is_set()  # clients on the direct kubeconfig are not affected
        _configmap(fault_lab, f"after-cut-{uuid.uuid4().hex[:4]}")
        _wait(lambda: len(beside.events) >= 2, 30, "the direct watch to see both changes")
    finally:
        through_proxy.close()
        beside.close()


def _fails_while_faulty(probe: Callable[[], Any], error: type[Exception], started: float, seconds: float) -> None:
    """``probe`` meets ``error`` while a fault applied after ``started`` lasts ``seconds``; once
    they are over it may work (a loaded machine can reach the probe late: that is no failure,
    but a probe that works earlier is one)."""
    try:
        probe()
    except error:
        return
    assert time.monotonic() - started >= seconds, f"worked {time.monotonic() - started:.1f} s into the fault"


def test_refuse_for_seconds_then_works_again_by_itself(fault_lab: Lab):
    proxied = Client(fault_lab.kubeconfig_via_proxy())
    port = fault_lab.ports.apiserver_proxy
    started = time.monotonic()
    fault_lab.net.refuse(seconds=3)
    _fails_while_faulty(
        lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close(), ConnectionRefusedError, started, 3
    )
    assert Client(fault_lab.kubeconfig).ok()  # the direct path is untouched
    _wait(proxied.ok, 30, "the proxy to accept again")
    assert time.monotonic() - started >= 3.0
    assert fault_lab.net.pending() == []
    assert fault_lab.net.state()["enabled"] is True


def test_black_hole_accepts_but_never_answers_until_healed(fault_lab: Lab):
    proxied = Client(fault_lab.kubeconfig_via_proxy())
    before = proxied.connection(timeout=30)
    before.request("GET", "/readyz")
    assert before.getresponse().read() == b"ok"

    fault_lab.net.black_hole()

    socket.create_connection(("127.0.0.1", fault_lab.ports.apiserver_proxy), timeout=2).close()  # accepted
    with pytest.raises(TimeoutError):
        proxied.request("GET", "/readyz", timeout=2)
    before.sock.settimeout(2)  # an open connection hangs too
    before.request("GET", "/readyz")
    with pytest.raises(TimeoutError):
        before.getresponse()
    assert Client(fault_lab.kubeconfig).ok()

    fault_lab.net.heal()

    assert proxied.ok()
    state = fault_lab.net.state()
    assert state["enabled"] and state["toxics"] == []
    before.close()


def test_black_hole_for_seconds_heals_by_itself(fault_lab: Lab):
    proxied = Client(fault_lab.kubeconfig_via_proxy())
    started = time.monotonic()
    fault_lab.net.black_hole(seconds=2)
    _fails_while_faulty(lambda: proxied.request("GET", "/readyz", timeout=1), TimeoutError, started, 2)
    _wait(lambda: proxied.ok(timeout=2), 30, "the black hole to end by itself")
    assert fault_lab.net.state()["toxics"] == []


def test_latency_adds_at_least_the_configured_delay(fault_lab: Lab):
    proxied = Client(fault_lab.kubeconfig_via_proxy())
    conn = proxied.connection(timeout=30)
    conn.request("GET", "/readyz")
    assert conn.getresponse().read() == b"ok"  # connected before: only the answer is held

    with fault_lab.net.slowed(400):
        started = time.monotonic()
        conn.request("GET", "/readyz")
        assert conn.getresponse().read() == b"ok"
        assert time.monotonic() - started >= 0.4
        started = time.monotonic()
        assert proxied.ok(timeout=30)  # a new connection: the TLS handshake's answers are held too
        assert time.monotonic() - started >= 0.4
    conn.close()
    assert fault_lab.net.state()["toxics"] == []


def test_heal_undoes_every_fault_and_cancels_timers(fault_lab: Lab):
    net = fault_lab.net
    net.latency(200, 50, seconds=60)
    net.black_hole(seconds=60)
    net.refuse(seconds=60)
    state = net.state()
    assert not state["enabled"] and {t["name"] for t in state["toxics"]} == {
        "latency",
        "black-hole-upstream",
        "black-hole-downstream",
    }
    assert net.pending() == ["black-hole", "latency", "refuse"]

    net.heal()

    assert net.pending() == []
    state = net.state()
    assert state["enabled"] and state["toxics"] == []
    assert Client(fault_lab.kubeconfig_via_proxy()).ok()


# -- the CLI: the lab's owner does the work ------------------------------------------------------


def _cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "operators.cli", "lab", *args], capture_output=True, text=True, timeout=timeout
    )


def test_cli_faults_on_a_lab_owned_by_this_process(fault_lab: Lab):
    where = ("--run-dir", str(fault_lab.run_dir))
    old_pid = fault_lab.processes()["kube-scheduler"]
    restart = _cli("restart", "kube-scheduler", *where)
    assert restart.returncode == 0, restart.stderr
    new_pid = fault_lab.processes()["kube-scheduler"]
    assert new_pid != old_pid and f"-> {new_pid})" in restart.stderr
    # The CLI process has exited; the scheduler it asked for is this process's child and runs.
    assert process.parent_pid(new_pid) == os.getpid()
    assert _healthy(_health_url(fault_lab, "kube-scheduler"))

    # A timed fault outlives the command that asked for it, and ends by itself.
    started = time.monotonic()
    black_hole = _cli("net", "black-hole", "--for", "2", *where)
    assert black_hole.returncode == 0, black_hole.stderr
    assert "black hole" in black_hole.stdout and "timed: black-hole" in black_hole.stdout
    _wait(lambda: fault_lab.net.state()["toxics"] == [], 30, "the black hole to end by itself")
    assert time.monotonic() - started >= 2.0

    latency = _cli("net", "latency", "150", "--jitter", "20", *where)
    assert "latency 150ms±20ms" in latency.stdout, latency.stderr
    heal = _cli("net", "heal", *where)
    assert heal.stdout.strip().endswith("no fault"), heal.stdout + heal.stderr
    bad = _cli("net", "latency", "10", "--jitter", "20", *where)
    assert bad.returncode != 0 and "jitter" in bad.stderr

    env = _cli("env", "--via-proxy", "--identity", "kwok", *where)
    assert env.stdout.strip() == f"export KUBECONFIG={fault_lab.run_dir / 'kwok.via-proxy.kubeconfig'}"


def test_detached_lab_restart_compact_net_and_down_leave_nothing(tmp_path: Path):
    run_dir = tmp_path / "detached"
    where = ("--name", "faults-cli", "--run-dir", str(run_dir))
    up = _cli("up", *where, "--nodes", "1")
    state = LabState.load(run_dir)
    pids: set[int] = set()
    try:
        assert up.returncode == 0, up.stderr
        pids |= {state.supervisor_pid, *state.pids.values()}
        assert set(state.pids) == set(COMPONENTS)

        status = _cli("status", *where)
        assert status.returncode == 0, status.stdout + status.stderr
        assert (
            "toxiproxy " in status.stdout
            and f"apiserver via toxiproxy    {state.proxy_server} -> 127.0.0.1:{state.ports['apiserver']} enabled"
            in status.stdout
        )
        assert "enabled, no fault" in status.stdout

        restart = _cli("restart", "kube-apiserver", *where)
        assert restart.returncode == 0, restart.stderr
        after = LabState.load(run_dir)
        pid = after.pids["kube-apiserver"]
        pids.add(pid)
        assert pid != state.pids["kube-apiserver"] and after.ports == state.ports
        # The supervisor restarted it: it dies with the lab, not with the exited CLI.
        assert process.parent_pid(pid) == state.supervisor_pid
        assert _kubectl(Path(state.kubeconfig), "get", "--raw", "/readyz").stdout.strip() == "ok"

        compact = _cli("compact", *where)
        assert compact.returncode == 0 and int(compact.stdout) > 0, compact.stderr
        pids |= set(LabState.load(run_dir).pids.values())

        refuse = _cli("net", "refuse", "--for", "1", *where)
        assert "DISABLED" in refuse.stdout, refuse.stderr
        via = Path(run_dir / "admin.via-proxy.kubeconfig")
        assert _cli("env", "--via-proxy", *where).stdout.strip() == f"export KUBECONFIG={via}"
        _wait(
            lambda: _kubectl(via, "get", "--raw", "/readyz").stdout.strip() == "ok",
            30,
            "the proxy to accept again after --for 1",
        )
    finally:
        down = _cli("down", *where)
    assert down.returncode == 0, down.stderr
    assert not [p for p in pids if process.alive(p)]
    assert not (run_dir / "control.sock").exists()
