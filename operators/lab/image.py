"""The project's container image as a docker-archive, for tests and real nodes: built by
``image/build.sh`` (``make image``) into ``.cache/image/dra-operators-<version>.tar`` of a source
checkout, naming the image ``docker.io/library/dra-operators:<version>`` (what ``dra-operators:<version>``
resolves to; ``ctr -n k8s.io images import`` takes the archive as it is).
"""

from __future__ import annotations

import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = CHECKOUT / "image" / "build.sh"
# What the image is built from; the archive is stale when any of them is newer.
_INPUTS = ("Dockerfile", "requirements.lock", "pyproject.toml", "image", "operators")


class ImageBuildError(RuntimeError):
    """``image/build.sh`` failed; the message ends with its last lines of output."""


def version() -> str:
    """The package version in the checkout's pyproject.toml (the image's tag)."""
    with open(CHECKOUT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def image_name() -> str:
    return f"docker.io/library/dra-operators:{version()}"


def archive_path() -> Path:
    return CHECKOUT / ".cache" / "image" / f"dra-operators-{version()}.tar"


def _newest_input() -> float:
    newest = 0.0
    for name in _INPUTS:
        path = CHECKOUT / name
        files = [path] if path.is_file() else path.rglob("*")
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc":
                newest = max(newest, f.stat().st_mtime)
    return newest


def ensure_image(progress: Callable[[str], object] = print) -> Path:
    """The archive for the current version, built (or rebuilt, when an input is newer) with
    ``image/build.sh``, whose progress lines go to ``progress``. Needs root and a source checkout."""
    archive = archive_path()
    if archive.is_file() and archive.stat().st_mtime >= _newest_input():
        return archive
    if not BUILD_SCRIPT.is_file():
        raise ImageBuildError(f"{BUILD_SCRIPT} not found: building the image needs a source checkout")
    tail: list[str] = []
    with subprocess.Popen(
        [str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail = (tail + [line])[-20:]
            # The script's own lines and buildah's steps; pip's and buildah's chatter only on failure.
            if line.startswith("image:") or "STEP " in line:
                progress(line)
    if proc.returncode != 0 or not archive.is_file():
        raise ImageBuildError(f"image/build.sh exited with {proc.returncode}:\n" + "\n".join(tail))
    return archive
