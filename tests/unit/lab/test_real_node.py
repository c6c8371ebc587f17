"""Real nodes' configuration (pure builders), the local images and what a plain lab needs."""

import gzip
import io
import json
import tarfile
import tomllib
from pathlib import Path

import pytest

from operators.lab import components, images, paths, realnode
from operators.lab.components import Files, Ports, RealNodeFiles

PORTS = Ports(etcd_client=1001, etcd_peer=1002, apiserver=1003, controller_manager=1004, scheduler=1005, kwok=1006)
NODE = RealNodeFiles(Path("/run/lab/nodes/lab-real-0"), "lab-real-0")


def test_a_plain_lab_needs_no_real_node_binary_and_keeps_its_apiserver_flags(tmp_path):
    for name in paths.BINARIES:
        (tmp_path / name).write_text("")
        (tmp_path / name).chmod(0o755)
    assert paths.missing_binaries(tmp_path) == []
    assert "kubelet" in paths.missing_real_node_binaries(tmp_path)
    plain = components.build_apiserver_args(Path("kas"), Files(Path("/run/lab")), PORTS, [])
    assert not [a for a in plain if "kubelet" in a or "admission" in a]
    real = components.build_apiserver_args(Path("kas"), Files(Path("/run/lab")), PORTS, [], real_nodes=True)
    assert set(real) - set(plain) == {
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-client-certificate=/run/lab/pki/admin.crt",
        "--kubelet-client-key=/run/lab/pki/admin.key",
        "--enable-admission-plugins=NodeRestriction",
    }


def test_containerd_config_keeps_everything_under_the_node_dir():
    config = tomllib.loads(components.build_containerd_config(NODE, Path("/bin/lab"), images.PAUSE_IMAGE))
    assert config["version"] == 3
    assert config["root"] == "/run/lab/nodes/lab-real-0/containerd/root"
    assert config["grpc"]["address"] == "/run/lab/nodes/lab-real-0/containerd/containerd.sock"
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE on these machines
    assert runtime["cdi_spec_dirs"] == ["/run/lab/nodes/lab-real-0/cdi"]
    assert runtime["netns_mounts_under_state_dir"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {
        "BinaryName": "/bin/lab/runc",
        "Root": "/run/lab/nodes/lab-real-0/containerd/state/runc",
        "SystemdCgroup": False,
    }
    assert runtime["cni"]["bin_dirs"] == ["/bin/lab/cni"]
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == images.PAUSE_IMAGE


def test_kubelet_config_for_cgroup_v1_without_systemd():
    config = components.build_kubelet_config(
        NODE, "10.88.7.1", 4001, 4002, Path("/run/lab/pki/ca.crt"), ["DRAAdminAccess"]
    )
    assert (config["cgroupDriver"], config["cgroupsPerQOS"], config["failCgroupV1"]) == ("cgroupfs", False, False)
    assert config["enforceNodeAllocatable"] == [] and config["evictionHard"] == {}
    assert config["address"] == "10.88.7.1" and config["port"] == 4001 and config["readOnlyPort"] == 0
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authentication"]["x509"]["clientCAFile"] == "/run/lab/pki/ca.crt"
    assert config["containerRuntimeEndpoint"] == "unix:///run/lab/nodes/lab-real-0/containerd/containerd.sock"
    assert config["podLogsDir"] == "/run/lab/nodes/lab-real-0/pods"
    assert config["featureGates"] == {"DRAAdminAccess": True}
    args = components.build_kubelet_args(Path("kubelet"), NODE, "10.88.7.1")
    assert "--root-dir=/run/lab/nodes/lab-real-0/kubelet" in args and "--node-ip=10.88.7.1" in args
    assert "--hostname-override=lab-real-0" in args
    assert NODE.plugins_registry == Path("/run/lab/nodes/lab-real-0/kubelet/plugins_registry")


def test_cni_bridge_without_masquerade_and_ipam_under_the_node():
    config = components.build_cni_config("labbr", "10.88.7.0/24", NODE.cni_ipam)
    [bridge] = config["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["isGateway"], bridge["ipMasq"]) == ("bridge", "labbr", True, False)
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.88.7.0/24"}]]
    assert bridge["ipam"]["dataDir"] == "/run/lab/nodes/lab-real-0/cni/ipam"


def test_node_roots_are_short_enough_for_plugin_sockets_of_long_driver_names():
    root = components.real_node_root(Path("/work/a/very/long/checkout/.cache/lab/runs/some-lab-name"), "lab-real-0")
    assert str(root).startswith("/run/dra-lab/") and root.name == "lab-real-0"
    socket = RealNodeFiles(root, "lab-real-0").plugins_registry / f"{'d' * 40}-reg.sock"
    assert len(str(socket)) <= 107
    assert components.real_node_root(Path("/tmp/x"), "lab-real-0") != components.real_node_root(
        Path("/tmp/y"), "lab-real-0"
    )


def test_bridge_names_fit_ifnamsiz_and_differ_per_lab_and_node():
    names = {realnode.bridge_name(Path(f"/tmp/lab-{i}"), n) for i in range(20) for n in range(3)}
    assert len(names) == 60 and all(len(n) <= 15 for n in names)
    info = realnode.RealNodeInfo("lab-real-0", "/run/lab/nodes/lab-real-0", "b", "10.88.7.0/24", 1, 2)
    assert info.node_ip == "10.88.7.1" and info.files() == NODE


def test_mounts_under_reads_mountinfo_deepest_first(monkeypatch):
    lines = (
        "1 2 0:1 / /run/lab/nodes/x rw - tmpfs t rw\n"
        "3 1 0:2 / /run/lab/nodes/x/a/b rw - tmpfs t rw\n"
        "4 1 0:3 / /run/lab/nodes/x\\040y rw - tmpfs t rw\n"
        "5 1 0:4 / /run/other rw - tmpfs t rw\n"
    )
    monkeypatch.setattr(realnode.Path, "read_text", lambda self: lines)
    assert realnode.mounts_under(Path("/run/lab/nodes/x")) == ["/run/lab/nodes/x/a/b", "/run/lab/nodes/x"]


BUSYBOX = paths.bin_dir() / "busybox"


@pytest.mark.skipif(not BUSYBOX.exists(), reason="no busybox (make lab-build-node)")
def test_oci_archive_names_the_image_and_holds_busybox(tmp_path):
    busybox = BUSYBOX
    archive = images.build_archive(busybox, "docker.io/library/busybox:1.37", None, ["sh"], tmp_path / "bb.tar")
    with tarfile.open(archive) as tar:
        index = json.load(tar.extractfile("index.json"))
        [entry] = index["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == "docker.io/library/busybox:1.37"
        manifest = json.load(tar.extractfile(f"blobs/sha256/{entry['digest'].split(':')[1]}"))
        layer = tar.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}").read()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as rootfs:
        names = rootfs.getnames()
        assert "bin/busybox" in names and "bin/sh" in names and rootfs.getmember("bin/sh").issym()
    again = images.build_archive(busybox, "docker.io/library/busybox:1.37", None, ["sh"], tmp_path / "again.tar")
    assert again.read_bytes() == archive.read_bytes()  # deterministic


def test_an_e2e_lab_node_sees_its_own_directories_at_the_suites_paths():
    """Upstream's e2e suite assumes /var/lib/kubelet and /var/run/cdi on every node: each node's
    mount namespace binds its own there, and its kubelet uses the short path (rolling-update
    sockets carry a UID and would not fit under /run/dra-lab/...)."""
    files = RealNodeFiles(Path("/run/dra-lab/0123abcd/lab-real-1"), "lab-real-1")
    args = realnode.mount_namespace_args(files)
    assert args[:5] == ["unshare", "--mount", "--propagation", "slave", "--"]
    script = args[-1]
    assert "mount --bind /run/dra-lab/0123abcd/lab-real-1/kubelet /var/lib/kubelet" in script
    assert "mount --bind /run/dra-lab/0123abcd/lab-real-1/cdi /var/run/cdi" in script
    assert script.endswith("exec sleep infinity")
    kubelet = components.build_kubelet_args(Path("/bin/kubelet"), files, "10.88.0.1", realnode.E2E_KUBELET_DIR)
    assert "--root-dir=/var/lib/kubelet" in kubelet
    assert "--root-dir=/run/dra-lab/0123abcd/lab-real-1/kubelet" in components.build_kubelet_args(
        Path("/bin/kubelet"), files, "10.88.0.1"
    )


@pytest.mark.skipif(not BUSYBOX.exists(), reason="no busybox (make lab-build-node)")
def test_e2e_images_carry_their_binary_under_upstreams_names(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "busybox").write_bytes(BUSYBOX.read_bytes())
    (bin_dir / "busybox").chmod(0o755)
    with pytest.raises(FileNotFoundError, match="lab/build.sh --e2e"):
        images.archives(bin_dir, e2e=True)
    for binary in ("hostpathplugin", "sampledeviceplugin"):
        (bin_dir / binary).write_bytes(b"#!/bin/sh\n")
    found = images.archives(bin_dir, e2e=True)
    assert set(images.E2E_IMAGES) <= set(found) and images.PAUSE_IMAGE in found
    with tarfile.open(found["registry.k8s.io/sig-storage/hostpathplugin:v1.17.1"]) as tar:
        index = json.load(tar.extractfile("index.json"))
        manifest = json.load(tar.extractfile(f"blobs/sha256/{index['manifests'][0]['digest'].split(':')[1]}"))
        layer = tar.extractfile(f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}").read()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as rootfs:
        assert "hostpathplugin" in rootfs.getnames() and "bin/sh" in rootfs.getnames()
    assert set(images.archives(bin_dir)) == {images.PAUSE_IMAGE, *images.WORKLOAD_IMAGES}
