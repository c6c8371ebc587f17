"""Readiness of the kubelet plugin: registered means kubelet said so and still holds its
connection to the DRA socket. kubelet drops a registration whose NotifyRegistrationStatus call
timed out, while the agent may still read the late "registered"; a rolling update that trusted it
removed the old agent with no plugin left in kubelet ("DRA driver ... is not registered")."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from grpclib.client import Channel
from grpclib.exceptions import GRPCError

from operators.nodeagent.plugin.kubeletapi import pluginregistration_v1_grpc, pluginregistration_v1_pb2
from operators.nodeagent.plugin.server import KubeletPlugin
from tests.fakeapi import FakeApi

DRIVER = "gpu.example.com"
HOLD = (
    "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
    "print('in', flush=True); sys.stdin.read()"
)


@pytest.fixture
async def plugin():
    # Under /tmp, not tmp_path: a socket path has at most 107 characters, and pytest's directories
    # under xdist (.../popen-gw0/test_<name>0/...) leave too few.
    tmp_path = Path(tempfile.mkdtemp(prefix="rr-", dir="/tmp"))
    agent = SimpleNamespace(driver=DRIVER, node_name="n1", node=None, health_listeners=[], published_devices=lambda: [])
    plugin = KubeletPlugin(
        agent,
        FakeApi(),
        registry_dir=str(tmp_path / "reg"),
        plugins_dir=str(tmp_path / "plugins"),
        cdi_root=str(tmp_path / "cdi"),
        pod_uid="6d0c1a9e-2f0b-4a43-9c3c-0b1f0f1f0f1f",
    )
    try:
        await plugin.start()
        yield plugin
        await plugin.stop()
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


async def notify(plugin: KubeletPlugin, registered: bool) -> None:
    """What kubelet's plugin manager sends after RegisterPlugin (here from this process)."""
    channel = Channel(path=str(plugin.registration_socket))
    try:
        await pluginregistration_v1_grpc.RegistrationStub(channel).NotifyRegistrationStatus(
            pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=registered), timeout=10
        )
    except GRPCError:
        assert not registered  # the servicer answers a refusal with an error, as the Go helper does
    finally:
        channel.close()


async def until(condition, what: str) -> None:
    for _ in range(1000):  # a guard against a hang, not a time limit on the answer
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def kubelet_connection(plugin: KubeletPlugin) -> subprocess.Popen:
    """A client in another process holding a connection to the DRA socket, as kubelet's gRPC
    client does for every plugin it has registered."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(plugin.dra_socket)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "in"
    return proc


async def test_registered_only_while_kubelet_said_so_and_holds_its_connection(plugin):
    assert not plugin.registered()  # nothing said yet
    await notify(plugin, True)
    # kubelet said "registered", but no other process holds a connection: a late answer to a
    # call kubelet gave up on, after which kubelet dropped the registration.
    assert plugin.registration == (True, "")
    assert not plugin.registered()

    held = kubelet_connection(plugin)
    try:
        await until(plugin.registered, "registered once kubelet's connection is open")
    finally:
        held.communicate("")  # kubelet's remove() closes its connection
    await until(lambda: not plugin.registered(), "not registered once kubelet's connection is closed")

    held = kubelet_connection(plugin)
    try:
        await until(plugin.registered, "registered again when kubelet connects again")
        await notify(plugin, False)  # kubelet refused a registration: the connection does not outweigh it
        assert not plugin.registered()
    finally:
        held.communicate("")


async def test_this_processs_own_calls_do_not_count(plugin):
    """The self-check calls the DRA socket from the agent's own process every period."""
    await notify(plugin, True)
    channel = Channel(path=str(plugin.dra_socket))
    try:
        await channel.__connect__()
        await until(lambda: len(plugin._servers[0].clients()) >= 1, "the agent's own connection seen")
        assert not plugin.registered()
    finally:
        channel.close()
