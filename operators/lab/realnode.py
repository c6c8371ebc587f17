"""Real nodes of a lab: a containerd and a kubelet per node, with runc, the bridge CNI network of
the node's own pod CIDR, and the lab's local images (``lab up --real-nodes N``).

Everything of node ``lab-real-<i>`` is under ``/run/dra-lab/<hash of the run dir>/lab-real-<i>``
(short: kubelet's plugin socket paths must fit in 107 characters), linked from
``<run dir>/nodes/lab-real-<i>``; ``cleanup`` removes it. What is not (the
bridge device, mounts of container root filesystems, volumes and network namespaces, runc's shims
and containers) is found from there and removed by ``cleanup``, which ``Lab.stop``, ``lab down``
and the next start in the same run directory call. A watchdog process (``main`` here,
``--watch PID``) does the same if the lab's owner dies without stopping
(SIGKILL): shims and containers are not its children, so they would outlive it.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import ipaddress
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .components import RealNodeFiles

_MNT_DETACH = 2
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


@dataclass
class RealNodeInfo:
    """What ``lab.json`` keeps of a real node (for status, down and cleanup)."""

    name: str
    root: str
    bridge: str
    subnet: str
    kubelet_port: int
    healthz_port: int

    @property
    def node_ip(self) -> str:
        """The Node's InternalIP, where kubelet listens: its bridge's gateway address."""
        return str(next(ipaddress.ip_network(self.subnet).hosts()))

    def files(self) -> RealNodeFiles:
        return RealNodeFiles(Path(self.root), self.name)


# Where upstream's e2e suite expects every node's kubelet directory and CDI specs
# (``--kubelet-root-dir``'s default; the test driver's hostPath for CDI).
E2E_KUBELET_DIR = Path("/var/lib/kubelet")
E2E_CDI_DIR = Path("/var/run/cdi")


def mount_namespace_args(files: RealNodeFiles) -> list[str]:
    """A process that binds the node's directories at the e2e suite's paths in a new mount
    namespace and then only waits (it holds the namespace for the node's containerd and kubelet)."""
    script = (
        f"mount --bind {shlex.quote(str(files.kubelet_root))} {E2E_KUBELET_DIR} && "
        f"mount --bind {shlex.quote(str(files.cdi))} {E2E_CDI_DIR} && exec sleep infinity"
    )
    return ["unshare", "--mount", "--propagation", "slave", "--", "sh", "-c", script]


def mount_namespace_ready(pid: int) -> bool:
    """The holder has made its mounts (it became ``sleep`` only after both succeeded)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
    except OSError:
        return False


def node_name(index: int) -> str:
    return f"lab-real-{index}"


def bridge_name(run_dir: Path, index: int) -> str:
    """Unique per run directory and node, at most 15 characters (IFNAMSIZ)."""
    digest = hashlib.sha256(str(run_dir).encode()).hexdigest()[:8]
    return f"lab{digest}r{index}"[:15]


def _used_subnets() -> set[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    used = {ipaddress.ip_interface(m).network for m in re.findall(r"inet (\S+)", out)}
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    for token in re.findall(r"^(\d+\.\d+\.\d+\.\d+/\d+)", routes, re.M):
        used.add(ipaddress.ip_network(token, strict=False))
    return used


def claim_bridge(bridge: str, run_dir: Path, index: int) -> str:
    """Create ``bridge`` with the gateway address of a /24 in 10.88.0.0/16 that no interface or
    route of this machine uses yet, and return that pod CIDR. Creating the bridge at once makes
    the subnet visible to other labs choosing theirs."""
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    start = int(hashlib.sha256(f"{run_dir}/{index}".encode()).hexdigest(), 16) % 250
    for attempt in range(250):
        subnet = ipaddress.ip_network(f"10.88.{(start + attempt) % 250 + 1}.0/24")
        if any(subnet.overlaps(u) for u in _used_subnets()):
            continue
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True, capture_output=True)
        gateway = f"{next(subnet.hosts())}/{subnet.prefixlen}"
        added = subprocess.run(["ip", "addr", "add", gateway, "dev", bridge], capture_output=True, text=True)
        if added.returncode == 0:
            subprocess.run(["ip", "link", "set", bridge, "up"], check=True, capture_output=True)
            return str(subnet)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    raise RuntimeError("no free /24 left in 10.88.0.0/16 for a real node's pods")


def _unescape(path: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    points = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = _unescape(fields[4])
            if point.startswith(prefix) or point == str(root):
                points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def unmount_all(root: Path) -> list[str]:
    """Lazily unmount everything below ``root`` (container root filesystems, pod volumes, shm,
    network namespaces); returns what could not be unmounted."""
    failed: list[str] = []
    for _ in range(3):  # stacked mounts need more than one pass
        points = mounts_under(root)
        if not points:
            return []
        failed = []
        for point in points:
            if _libc.umount2(point.encode(), _MNT_DETACH) != 0:
                failed.append(f"{point}: {os.strerror(ctypes.get_errno())}")
    return failed


def _pids_mentioning(needle: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_containers(files: RealNodeFiles, runc: Path) -> None:
    """Every container of the node (runc's own state is in the node's containerd state
    directory), then the shims of its containerd."""
    runc_root = files.containerd_state / "runc"
    for namespace_dir in sorted(runc_root.iterdir()) if runc_root.is_dir() else []:
        listed = subprocess.run(
            [str(runc), "--root", str(namespace_dir), "list", "-f", "json"], capture_output=True, text=True
        )
        try:
            containers = json.loads(listed.stdout or "null") or []
        except ValueError:
            containers = []
        for container in containers:
            subprocess.run(
                [str(runc), "--root", str(namespace_dir), "delete", "--force", container["id"]], capture_output=True
            )
    for pid in _pids_mentioning(f"-address {files.containerd_socket}"):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def cleanup(info: RealNodeInfo, runc: Path) -> list[str]:
    """Containers, shims, mounts and the bridge of one real node (its kubelet and containerd
    stopped already, or about to be killed). Returns what is left (empty when all is gone)."""
    files = info.files()
    kill_containers(files, runc)
    for pid in _pids_mentioning(str(files.containerd_config)) + _pids_mentioning(str(files.kubelet_config)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.2)
    left = unmount_all(files.root)
    if not left:
        subprocess.run(["rm", "-rf", "--one-file-system", str(files.root)], capture_output=True)
        try:
            files.root.parent.rmdir()  # the lab's directory, once its last node is gone
        except OSError:
            pass
    deleted = subprocess.run(["ip", "link", "del", info.bridge], capture_output=True, text=True)
    if (
        deleted.returncode != 0
        and "Cannot find device" not in deleted.stderr
        and "does not exist" not in deleted.stderr
    ):
        left.append(f"bridge {info.bridge}: {deleted.stderr.strip()}")
    return left


def watch(owner: int, state_file: Path, runc: Path) -> int:
    """Wait for ``owner`` to end; then clean up the real nodes listed in ``state_file``."""
    while True:
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            break
        except PermissionError:
            pass
        time.sleep(1)
    try:
        nodes = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return 0
    for raw in nodes:
        for problem in cleanup(RealNodeInfo(**raw), runc):
            print(f"real node cleanup: {problem}", flush=True)
    return 0


def write_watch_state(path: Path, nodes: list[RealNodeInfo]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(n) for n in nodes]))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operators.lab.realnode")
    parser.add_argument("--watch", type=int, required=True, help="the lab owner's pid")
    parser.add_argument("--state", type=Path, required=True)
    parser.add_argument("--runc", type=Path, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the lab stopped cleanly: nothing to do
    return watch(args.watch, args.state, args.runc)


if __name__ == "__main__":
    sys.exit(main())
