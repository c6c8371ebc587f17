"""`make run` with KUBECONFIG set (`dra-operators demo --yes`) on a cluster it does not own: the
shared lab, whose kube-controller-manager runs upstream's DRA controllers. The demo says what it
will do, refuses without consent, runs only what the cluster lacks (binding and node agents, not
the claims and taints operators), gets every example Pod running, and on Ctrl-C removes what it
created and leaves what was there before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from operators.core.api.resources import DEVICE_CLASSES, NAMESPACES, RESOURCE_SLICES
from operators.demo import DEMO_NAMESPACE, SIMULATED_DRIVER, device_classes

from .labs import declare_node_feature
from .waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
EVERY_POD_RUNS = "every example Pod runs and holds its device"
MARK = f"demo-{os.getpid()}"
ADMIN_NAMESPACE = "dra-example-admin"  # the admin-access example's own


def _demo(lab, *args: str, **popen) -> subprocess.Popen:
    # MARK is inherited by the processes the demo starts: how the test finds them afterwards.
    env = dict(os.environ, KUBECONFIG=str(lab.kubeconfig), DRA_TEST_DEMO_MARK=MARK)
    env["PATH"] = f"{lab.bin_dir}{os.pathsep}{os.path.dirname(sys.executable)}{os.pathsep}{env.get('PATH', '')}"
    # Started with SIGINT ignored, as a script's background job starts it (`make run &`): Ctrl-C
    # must stop it all the same.
    return subprocess.Popen(
        ["sh", "-c", 'trap "" INT; exec "$0" "$@"', sys.executable, "-m", "operators.cli", "demo", "--interval", "1"]
        + list(args),
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        **popen,
    )


async def _state(kube) -> dict[str, set[str]]:
    """What the demo may create: its namespaces, the DeviceClasses of config/deviceclasses/ and
    the examples', and the simulated driver's ResourceSlices. Only these: the shared lab may still
    be deleting other tests' namespaces while this test runs."""
    ours = {*device_classes(), "fabric-gpu.example.com"}
    return {
        "namespaces": {n["metadata"]["name"] for n in await kube.list(NAMESPACES)} & {DEMO_NAMESPACE, ADMIN_NAMESPACE},
        "deviceclasses": {c["metadata"]["name"] for c in await kube.list(DEVICE_CLASSES)} & ours,
        "slices": {
            s["metadata"]["name"]
            for s in await kube.list(RESOURCE_SLICES)
            if s["spec"].get("driver") in (SIMULATED_DRIVER, "fabric-gpu.example.com")
        },
    }


def _demo_processes() -> list[int]:
    """The demo and the processes it started (they inherit ``MARK``), still alive."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ")[-1][:1]
        except OSError:
            continue
        if f"DRA_TEST_DEMO_MARK={MARK}".encode() in environ and state != "Z":
            alive.append(int(entry.name))
    return alive


async def test_without_consent_it_changes_nothing(lab, kube, controllers):
    controllers.use("upstream")
    before = await _state(kube)
    demo = _demo(lab, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = demo.communicate(timeout=120)
    assert demo.returncode != 0, out + err
    assert "The demo will use the cluster of KUBECONFIG" in err and "--yes" in err, err
    assert await _state(kube) == before


async def test_on_a_cluster_it_does_not_own_it_runs_what_is_missing_and_removes_it_again(
    lab, kube, controllers, tmp_path
):
    controllers.use("upstream")  # kube-controller-manager makes the claims and evicts
    await declare_node_feature(kube, "DRAOptionalNodeOperations")  # for binding-conditions
    before = await _state(kube)
    output = tmp_path / "demo.out"
    with output.open("w") as out:
        demo = _demo(lab, "--yes", stdout=out, stderr=subprocess.STDOUT)
    try:
        await wait_for(
            lambda: _async(EVERY_POD_RUNS in output.read_text() or demo.poll() is not None),
            timeout=300,
            interval=1,
            what="the demo's examples running",
        )
        text = output.read_text()
        assert demo.poll() is None and EVERY_POD_RUNS in text, text[-4000:]
        assert "not run: claims: kube-controller-manager's resourceclaim-controller does this job" in text, text[:3000]
        assert "not run: taints:" in text, text[:3000]
        # (Slices of its node agents: only on Nodes without the simulated driver's slices; the
        # shared lab may have some left by earlier tests, so none may be new.)
        assert DEMO_NAMESPACE in (await _state(kube))["namespaces"]
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)  # Ctrl-C
        await wait_for(lambda: _async(demo.poll() is not None), timeout=180, interval=1, what="the demo exits")
    text = output.read_text()
    assert demo.returncode == 0, text[-4000:]
    assert "demo: stopped" in text and "could not remove" not in text, text[-4000:]
    after = await wait_for(
        lambda: _same_as(kube, before), timeout=120, interval=1, what="the cluster as it was before the demo"
    )
    assert after["namespaces"] == before["namespaces"] and after["deviceclasses"] == before["deviceclasses"]
    assert not _demo_processes(), "the demo left processes running"


async def _same_as(kube, before):
    """Its namespaces and DeviceClasses as before; no slice that was not there before (a slice
    of an earlier test's agent may go meanwhile)."""
    state = await _state(kube)
    same = (
        state["namespaces"] == before["namespaces"]
        and state["deviceclasses"] == before["deviceclasses"]
        and state["slices"] <= before["slices"]
    )
    return state if same else None


async def _async(value):
    return value
