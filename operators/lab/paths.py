"""Where the lab keeps binaries and run directories."""

from __future__ import annotations

import os
from pathlib import Path

BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "toxiproxy-server",
)


def lab_home() -> Path:
    """``$DRA_LAB_HOME``; in a source checkout ``.cache/lab`` (where ``make lab-build`` puts the
    binaries); otherwise ``~/.cache/dra-operators/lab``."""
    if env := os.environ.get("DRA_LAB_HOME"):
        return Path(env).resolve()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "lab" / "versions.env").is_file():
        return checkout / ".cache" / "lab"
    return Path.home() / ".cache" / "dra-operators" / "lab"


def release(kubernetes: str | None = None) -> str | None:
    """The older minor asked for ("1.35"): ``kubernetes``, else ``$DRA_LAB_KUBERNETES``; None: the default."""
    return kubernetes or os.environ.get("DRA_LAB_KUBERNETES") or None


def bin_dir(kubernetes: str | None = None) -> Path:
    """The binaries of the default release, or of the older minor ``release(kubernetes)``, which
    ``lab/build.sh --kubernetes 1.35`` builds into ``1.35/bin``."""
    if env := os.environ.get("DRA_LAB_BIN_DIR"):
        return Path(env)
    minor = release(kubernetes)
    return lab_home() / minor / "bin" if minor else lab_home() / "bin"


def kwok_stages_dir(binaries: Path) -> Path:
    return binaries.parent / "kwok-stages"


def run_dir(name: str) -> Path:
    return lab_home() / "runs" / name


def missing_binaries(binaries: Path) -> list[str]:
    return [b for b in BINARIES if not os.access(binaries / b, os.X_OK)]


def missing_real_node_binaries(binaries: Path) -> list[str]:
    """What ``lab up --real-nodes`` needs beyond a plain lab (``make lab-build-node``)."""
    from .components import REAL_NODE_BINARIES

    return [b for b in REAL_NODE_BINARIES if not os.access(binaries / b, os.X_OK)]
