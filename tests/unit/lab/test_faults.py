"""Pure parts of the lab's faults: toxiproxy's configuration and toxics, kubeconfigs through the
proxy, and the two process details restarts depend on (children tied to the process, not to a
thread; control sockets in deep run directories)."""

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from operators.lab import components, control, netfault, process
from operators.lab.components import Files, Ports

PORTS = Ports(
    etcd_client=1001,
    etcd_peer=1002,
    apiserver=1003,
    controller_manager=1004,
    scheduler=1005,
    kwok=1006,
    toxiproxy=1007,
    apiserver_proxy=1008,
)
FILES = Files(Path("/run/lab"))


def test_toxiproxy_listens_on_loopback_and_loads_its_proxy_from_a_file():
    assert components.build_toxiproxy_args(Path("/b/toxiproxy-server"), FILES, PORTS) == [
        "/b/toxiproxy-server",
        "-host=127.0.0.1",
        "-port=1007",
        "-config=/run/lab/toxiproxy.json",
    ]
    assert netfault.proxy_config(1008, 1003) == [
        {"name": "kube-apiserver", "listen": "127.0.0.1:1008", "upstream": "127.0.0.1:1003", "enabled": True}
    ]


def test_black_hole_drops_both_directions_and_never_closes():
    toxics = netfault.black_hole_toxics()
    assert {t["stream"] for t in toxics} == {"upstream", "downstream"}
    assert all(t["type"] == "timeout" and t["attributes"] == {"timeout": 0} and t["toxicity"] == 1.0 for t in toxics)
    assert [t["name"] for t in toxics] == list(netfault.BLACK_HOLE)


def test_latency_holds_answers():
    assert netfault.latency_toxic(250, 50) == {
        "name": "latency",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": 250, "jitter": 50},
    }


@pytest.mark.parametrize("ms,jitter", [(-1, 0), (10, 20), (10, -1)])
def test_latency_rejects_nonsense(ms, jitter):
    with pytest.raises(ValueError):
        netfault.latency_toxic(ms, jitter)


def test_describe_names_each_fault():
    proxy = {
        "listen": "127.0.0.1:1008",
        "upstream": "127.0.0.1:1003",
        "enabled": True,
        "toxics": [*netfault.black_hole_toxics(), netfault.latency_toxic(100, 10)],
    }
    line = netfault.describe(proxy)
    assert line.startswith("127.0.0.1:1008 -> 127.0.0.1:1003 enabled")
    assert "black hole (upstream)" in line and "black hole (downstream)" in line and "latency 100ms±10ms" in line
    assert "DISABLED" in netfault.describe({**proxy, "enabled": False, "toxics": []})
    assert netfault.describe({**proxy, "toxics": []}).endswith("no fault")


def test_kubeconfig_via_proxy_keeps_credentials_and_ca():
    token_config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:1003", "certificate-authority": "/ca"}}],
        "users": [{"name": "sa", "user": {"token": "abc"}}],
        "contexts": [{"name": "sa", "context": {"cluster": "lab", "user": "sa"}}],
    }
    proxied = components.with_server(token_config, "https://127.0.0.1:1008")
    assert proxied["clusters"] == [
        {"name": "lab", "cluster": {"server": "https://127.0.0.1:1008", "certificate-authority": "/ca"}}
    ]
    assert proxied["users"] == token_config["users"] and proxied["contexts"] == token_config["contexts"]
    assert token_config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1003"  # not modified


def test_run_dir_files_for_faults():
    assert FILES.kubeconfig_via_proxy("admin") == Path("/run/lab/admin.via-proxy.kubeconfig")
    assert FILES.control_socket == Path("/run/lab/control.sock")


def test_child_spawned_from_a_thread_outlives_the_thread(tmp_path):
    """PR_SET_PDEATHSIG fires when the forking *thread* ends; spawn() forks from a thread that
    lives as long as the process, so a child started in a short-lived thread stays."""
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(process.spawn(["sleep", "60"], tmp_path / "sleep.log")))
    thread.start()
    thread.join()
    [child] = started
    try:
        # A child tied to the finished thread would get SIGKILL right away; wait() would return.
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=1.0)
        assert process.parent_pid(child.pid) == os.getpid()
    finally:
        process.terminate(child.pid, kill=True)
        child.wait()


def test_children_still_die_with_their_process(tmp_path):
    """The tie itself: a process that spawns a child and is SIGKILLed leaves nothing."""
    script = (
        "import sys, time; from pathlib import Path; from operators.lab import process;"
        f"p = process.spawn(['sleep', '60'], Path({str(tmp_path / 'c.log')!r}));"
        "print(p.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    assert process.alive(child_pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while process.alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process.alive(child_pid)


def test_control_socket_address_in_a_deep_directory(tmp_path):
    deep = tmp_path.joinpath(*["d" * 20] * 6)
    deep.mkdir(parents=True)
    path = deep / "control.sock"
    assert len(str(path)) > 108
    with control._short_path(path) as address:
        assert len(address) < 108
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        server.listen(1)
    assert path.exists()
    with control._short_path(path) as address, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(address)
    server.close()


def test_control_request_without_a_lab_says_so(tmp_path):
    with pytest.raises(control.ControlError, match="is the lab running"):
        control.request(tmp_path, {"op": "ping"})


def test_apiserver_stops_within_seconds_despite_open_watches():
    args = components.build_apiserver_args(Path("/b/apiserver"), FILES, PORTS, [])
    assert "--shutdown-send-retry-after=true" in args
