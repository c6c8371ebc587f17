"""The project's container image (make image, image/build.sh): built once per session with buildah
(no Docker engine), then checked as the archive real nodes import and as a container run from it:
its user, its entrypoint and venv, its dependencies, what it leaves out; and a base that does not
exist ends with a message, not a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from operators.lab import image

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="buildah needs root here (its storage in /var/lib/containers, debootstrap's chroot)"
)


@pytest.fixture(scope="session")
def archive() -> Path:
    return image.ensure_image(progress=lambda line: print(line, flush=True))


@pytest.fixture(scope="session")
def archive_config(archive: Path) -> dict:
    """manifest.json's one entry and the image config it points to."""
    with tarfile.open(archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
        assert len(manifest) == 1, manifest
        config = json.load(tar.extractfile(manifest[0]["Config"]))
    return {"manifest": manifest[0], "config": config}


@pytest.fixture(scope="module")
def container(archive: Path) -> str:
    """A working container from the archive itself (not from buildah's storage's tag)."""
    name = f"dra-operators-test-{os.getpid()}"
    subprocess.run(
        ["buildah", "from", "--quiet", "--name", name, f"docker-archive:{archive}"],
        check=True,
        capture_output=True,
        text=True,
    )
    try:
        yield name
    finally:
        subprocess.run(["buildah", "rm", name], capture_output=True)
        # The name the archive gave the image; the image stays under make image's own tag.
        subprocess.run(["buildah", "rmi", image.image_name()], capture_output=True)


OUTPUT = "/run/test-output"  # where run_in's command writes its stdout and stderr


def run_in(container: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in the container as the image's user (no --user), chroot isolation.

    Its output goes to files in a directory mounted from the host, not through buildah's stdio:
    buildah's chroot runtime (1.28, Debian 12) exits with the command's status without waiting
    for the goroutine that relays the command's stdout (``runUsingChrootMain`` in
    chroot/run_common.go), so on a loaded machine the output can be lost. Seen once: ``id -u &&
    id -g`` printed nothing and exited 0."""
    with tempfile.TemporaryDirectory() as out:
        os.chmod(out, 0o777)  # noqa: S103 - written by the image's user, 65532
        buildah = ["buildah", "run", "--isolation", "chroot", "--volume", f"{out}:{OUTPUT}", container, "--"]
        redirected = ["sh", "-c", f'exec "$@" >{OUTPUT}/stdout 2>{OUTPUT}/stderr', "sh", *command]
        result = subprocess.run(
            [*buildah, *redirected],
            capture_output=True,
            text=True,
            timeout=120,
        )
        stdout, stderr = (Path(out, name) for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(
            result.args,
            result.returncode,
            stdout.read_text() if stdout.exists() else "",
            (stderr.read_text() if stderr.exists() else "") + result.stderr,
        )


def test_archive_names_the_image_as_kubelet_resolves_it(archive_config: dict) -> None:
    """Only the name `dra-operators:<version>` resolves to (containerd imports every name it finds)."""
    assert archive_config["manifest"]["RepoTags"] == [f"docker.io/library/dra-operators:{image.version()}"]


def test_image_config(archive_config: dict) -> None:
    config = archive_config["config"]["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["dra-operators", "run"]
    assert config["Cmd"] == ["claims"]
    assert config["Labels"]["org.opencontainers.image.version"] == image.version()


def test_dockerfile_version_default_is_pyprojects() -> None:
    """`docker build .` (no build arguments) labels the image with the package's version."""
    dockerfile = (image.CHECKOUT / "Dockerfile").read_text()
    assert re.search(r"^ARG VERSION=(.+)$", dockerfile, re.M).group(1) == image.version()


def test_version(container: str) -> None:
    result = run_in(container, "dra-operators", "--version")
    assert result.returncode == 0, result.stderr
    print(result.stdout.strip())
    assert f"version {image.version()}" in result.stdout


def test_entrypoint(container: str, archive_config: dict) -> None:
    """The configured entrypoint itself starts (with --help: no cluster needed)."""
    entrypoint = archive_config["config"]["config"]["Entrypoint"]
    result = run_in(container, *entrypoint, "--help")
    assert result.returncode == 0, result.stderr
    assert "Usage: dra-operators run" in result.stdout
    for operator in ("claims", "nodeagent", "binding", "taints"):
        assert operator in result.stdout


def test_runs_as_nonroot(container: str) -> None:
    result = run_in(container, "sh", "-c", "id -u && id -g")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["65532", "65532"]


def test_pip_check(container: str) -> None:
    result = run_in(container, "python", "-m", "pip", "--no-cache-dir", "check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_module_imports(container: str) -> None:
    """Every module of the installed package imports with the image's dependencies alone."""
    script = (
        "import importlib, pkgutil, operators\n"
        "names = [m.name for m in pkgutil.walk_packages(operators.__path__, 'operators.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(len(names))"
    )
    result = run_in(container, "python", "-c", script)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 20


def test_lean(container: str) -> None:
    """No build tools in the final image: no build venv, no setuptools, no compiler, no pip cache."""
    result = run_in(
        container,
        "sh",
        "-c",
        "test ! -e /opt/build && ! command -v gcc && ! command -v cc && "
        "! python -c 'import setuptools' 2>/dev/null && test ! -e /root/.cache/pip && echo lean",
    )
    assert result.stdout.strip() == "lean", result.stdout + result.stderr


def test_missing_base_says_what_to_do(archive: Path) -> None:
    before = archive.stat().st_mtime
    base = "localhost/does-not-exist:0"
    result = subprocess.run(
        [str(image.BUILD_SCRIPT)], env={**os.environ, "IMAGE_BASE": base}, capture_output=True, text=True, timeout=300
    )
    print(result.stderr)
    assert result.returncode != 0
    assert base in result.stderr
    assert "IMAGE_BASE" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert archive.stat().st_mtime == before, "a failed build replaced the archive"
