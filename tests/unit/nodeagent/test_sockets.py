"""Socket names per plugin instance: the Go helper's (kubeletplugin RollingUpdateRegistrarSocketFile)."""

import base64
import hashlib

from operators.nodeagent.plugin import sockets


def test_without_a_pod_uid_the_fixed_names():
    assert sockets.registration_name("/var/lib/kubelet/plugins_registry", "gpu.x", "") == "gpu.x-reg.sock"
    assert sockets.dra_name("/var/lib/kubelet/plugins/gpu.x", "") == "dra.sock"


def test_with_a_pod_uid_the_first_name_that_fits():
    uid = "0b6f5e9e-5b0e-4d39-9f0b-2f6c3f7c1a11"
    assert sockets.registration_name("/r", "gpu.x", uid) == f"gpu.x-{uid}-reg.sock"
    assert sockets.dra_name("/var/lib/kubelet/plugins/gpu.x", uid) == f"dra-{uid}.sock"
    # The lab's real nodes: kubelet's directories under /run/dra-lab/<hash>/<node> are longer.
    lab = "/run/dra-lab/86054f1b/lab-real-0/kubelet/plugins/gpu.sim.dra-operators.dev"
    short = sockets.dra_name(lab, uid)
    assert short.startswith("dra-") and short.endswith(".sock") and len(f"{lab}/{short}") <= sockets.MAX_SOCKET_PATH
    assert sockets.is_ours(short, "gpu.sim.dra-operators.dev", "dra")
    long_dir = "/" + "d" * 60
    hashed = base64.urlsafe_b64encode(hashlib.sha256(uid.encode()).digest()[:8]).decode().rstrip("=")
    assert sockets.registration_name(long_dir, "gpu.x", uid) == f"gpu.x-{hashed}-reg.sock"
    name = sockets.registration_name("/" + "d" * 70, "a-long-driver-name.example.com", uid)
    assert name.startswith("dra-") and name.endswith("-reg.sock") and len("/" + "d" * 70 + "/" + name) <= 107


def test_which_sockets_are_an_instance_of_ours():
    assert sockets.is_ours("gpu.x-reg.sock", "gpu.x", "registration")
    assert sockets.is_ours("gpu.x-abc-reg.sock", "gpu.x", "registration")
    assert not sockets.is_ours("gpu.y-reg.sock", "gpu.x", "registration")
    assert sockets.is_ours("dra-abc.sock", "gpu.x", "dra") and sockets.is_ours("dra.sock", "gpu.x", "dra")
    assert not sockets.is_ours("checkpoint.json", "gpu.x", "dra")
