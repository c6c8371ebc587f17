"""Whether this agent's plugin directory belongs to someone else (I/O at the edge, a pure verdict).

NVIDIA's DRA driver uses the driver name ``gpu.nvidia.com`` too, so with the defaults both would
share ``<plugins dir>/gpu.nvidia.com/`` (DRA socket, checkpoint.json) and the registration socket
``gpu.nvidia.com-reg.sock``. Its checkpoint (``{"checksum", "v1", "v2"}``, k8s-dra-driver-gpu
cmd/gpu-kubelet-plugin/checkpoint.go) is not ours; a socket that answers is a live plugin. Either
means another driver serves this name on this node: the agent refuses to start and says why,
instead of overwriting NVIDIA's checkpoint or stealing its sockets.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from .checkpoint import GROUP


class ForeignPlugin(Exception):
    pass


def checkpoint_owner(document: object) -> str | None:
    """None for our checkpoint (or one too damaged to tell); else whose it looks like."""
    if not isinstance(document, dict):
        return None
    if document.get("kind") == "Checkpoint" and str(document.get("apiVersion", "")).startswith(GROUP + "/"):
        return None
    if "checksum" in document and ("v1" in document or "v2" in document):
        return "NVIDIA's DRA driver (k8s-dra-driver-gpu)"
    return "another program"


def socket_answers(path: Path) -> bool:
    """Whether a process listens on the Unix socket ``path``. Only a refusal (or no file) says
    nobody does: a listener whose backlog is full (EAGAIN) or that does not accept in time is a
    busy plugin, and deleting its socket would deregister it from kubelet."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        try:
            s.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # stale: nobody listens
        except OSError:
            pass  # busy (EAGAIN, timeout): someone listens
        return True


def check(driver: str, checkpoint_path: Path, sockets: list[Path]) -> None:
    """Raise ForeignPlugin when the checkpoint or a socket is someone else's."""
    problems = []
    try:
        document = json.loads(checkpoint_path.read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        document = None  # missing, or corrupt: ours to rebuild
    owner = checkpoint_owner(document)
    if owner:
        problems.append(f"{checkpoint_path} is a checkpoint of {owner}, not of this agent")
    problems += [f"{path} is served by a running plugin" for path in sockets if socket_answers(path)]
    if problems:
        raise ForeignPlugin(
            f"another DRA driver uses the driver name {driver} on this node: {'; '.join(problems)}. Run this agent "
            "instead of NVIDIA's DRA driver (remove its kubelet plugin from this node and delete its checkpoint), or "
            "beside it under another name (DRA_NODEAGENT_DRIVER and DeviceClasses that select it)"
        )
