"""Socket names of a plugin instance (pure), for kubelet's seamless plugin update.

During a DaemonSet rolling update (``maxSurge: 1, maxUnavailable: 0``) the old and the new agent
run side by side on a node, each registered with kubelet under its own sockets, in the same plugin
data directory (kubelet uses the newest connected instance for each call). With the Pod's UID
(``POD_UID`` through the downward API) the names are the Go helper's
(k8s.io/dynamic-resource-allocation v0.37.1 kubeletplugin/draplugin.go
``RollingUpdateRegistrarSocketFile`` and ``dra<-uid>.sock``): registration
``<driver>-<uid>-reg.sock``, else ``<driver>-<b64url(sha256(uid))[:8]>-reg.sock``, else
``dra-<b64url(sha256(driver NUL uid))[:16]>-reg.sock``, whichever first fits; DRA service
``dra-<uid>.sock`` (hashed the same way where too long). Without a UID: ``<driver>-reg.sock`` and
``dra.sock``, as before.
"""

from __future__ import annotations

import base64
import hashlib
import os

MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with its NUL (the Go helper allows 108)


def _b64(data: str, size: int) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data.encode()).digest()[:size]).decode().rstrip("=")


def registration_name(registry_dir: str, driver: str, pod_uid: str) -> str:
    if not pod_uid:
        return f"{driver}-reg.sock"
    candidates = [
        f"{driver}-{pod_uid}-reg.sock",
        f"{driver}-{_b64(pod_uid, 8)}-reg.sock",
        f"dra-{_b64(driver + chr(0) + pod_uid, 16)}-reg.sock",
    ]
    for name in candidates:
        if len(os.path.join(registry_dir, name)) <= MAX_SOCKET_PATH:
            return name
    return candidates[-1]


def dra_name(data_dir: str, pod_uid: str) -> str:
    """``dra-<uid>.sock``, or ``dra-<b64url(sha256(uid))[:8]>.sock`` where the whole path would
    pass the socket limit (long kubelet directories, such as the lab's real nodes'; kubelet
    dials whatever endpoint the registration names)."""
    if not pod_uid:
        return "dra.sock"
    name = f"dra-{pod_uid}.sock"
    return name if len(os.path.join(data_dir, name)) <= MAX_SOCKET_PATH else f"dra-{_b64(pod_uid, 8)}.sock"


def is_ours(name: str, driver: str, kind: str) -> bool:
    """Whether a socket name is one an instance of ``driver`` uses (``kind``: registration or dra).
    The hashed ``dra-...-reg.sock`` form cannot be told apart from another driver's; it is left alone."""
    if kind == "registration":
        return name == f"{driver}-reg.sock" or (name.startswith(f"{driver}-") and name.endswith("-reg.sock"))
    return name == "dra.sock" or (name.startswith("dra-") and name.endswith(".sock"))
