"""Container images for real nodes, without a registry: OCI archives built from one busybox binary
(Debian's busybox-static, unpacked by ``lab/build.sh --node``) and imported into each node's
containerd (namespace ``k8s.io``, where the CRI plugin looks).

- ``PAUSE_IMAGE``: containerd's sandbox image (its config points at it); a shell that waits.
- ``WORKLOAD_IMAGES``: busybox under the names the examples and tests use (``busybox:1.37``
  resolves to ``docker.io/library/busybox:1.37``). Its version is Debian's, not 1.37: the tag is
  only the name the examples pull. Pods must not use ``imagePullPolicy: Always`` (nothing to pull).

The archives are deterministic (fixed times, sorted entries), cached next to the binaries and
rebuilt only when busybox changes.

``E2E_IMAGES``: what upstream's DRA e2e suite (``make e2e``) pulls, under its own names: its busybox
(``test/utils/image`` manifest.go), SIG Storage's hostpathplugin, whose proxy mode is the only part
the suite runs (``lab/e2e/hostpathplugin``, a stand-in), and upstream's sample device plugin, each
binary built by ``lab/build.sh --e2e``.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

PAUSE_IMAGE = "lab.local/pause:3.10"
WORKLOAD_IMAGES = ("docker.io/library/busybox:1.37", "lab.local/busybox:1")
# Waits for SIGTERM (as PID 1 a process ignores signals it has no handler for).
_PAUSE_ENTRYPOINT = ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"]
# image name -> (its one extra binary in the lab's bin directory or "", its entrypoint)
E2E_IMAGES: dict[str, tuple[str, list[str] | None]] = {
    "registry.k8s.io/e2e-test-images/busybox:1.37.0-2": ("", None),
    "registry.k8s.io/sig-storage/hostpathplugin:v1.17.1": ("hostpathplugin", None),
    # test/images/sample-device-plugin (its Dockerfile's entrypoint), for the extended-resource cases.
    "registry.k8s.io/e2e-test-images/sample-device-plugin:1.8.0": (
        "sampledeviceplugin",
        ["/sampledeviceplugin", "-alsologtostderr"],
    ),
}
_DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "root")


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted({a for a in out.split() if a and "/" not in a and a != "busybox"})


def _layer(busybox: Path, extras: dict[str, Path] | None = None) -> bytes:
    """One uncompressed tar: /bin/busybox, a symlink per applet, the usual empty directories and
    an /etc/passwd and /etc/group with root and nobody; ``extras`` (path in the image -> file)
    beside them."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, kind: bytes, data: bytes = b"", mode: int = 0o755, link: str = "") -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.linkname = kind, mode, 0, link
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)

        for d in _DIRS:
            add(d, tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        add("bin/busybox", tarfile.REGTYPE, busybox.read_bytes())
        for applet in _applets(busybox):
            add(f"bin/{applet}", tarfile.SYMTYPE, link="busybox", mode=0o777)
        add(
            "etc/passwd",
            tarfile.REGTYPE,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
            mode=0o644,
        )
        add("etc/group", tarfile.REGTYPE, b"root:x:0:\nnogroup:x:65534:\n", mode=0o644)
        for name, source in sorted((extras or {}).items()):
            add(name, tarfile.REGTYPE, source.read_bytes())
    return buf.getvalue()


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def build_archive(
    busybox: Path,
    name: str,
    entrypoint: list[str] | None,
    cmd: list[str] | None,
    target: Path,
    extras: dict[str, Path] | None = None,
) -> Path:
    """An OCI image layout as a tar archive at ``target``, its index naming the image ``name``."""
    layer = _layer(busybox, extras)
    compressed = gzip.compress(layer, mtime=0)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            **({"Entrypoint": entrypoint} if entrypoint else {}),
            **({"Cmd": cmd} if cmd else {}),
            "WorkingDir": "/",
        },
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
        "history": [{"created_by": "dra-operators lab: Debian busybox-static"}],
    }
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": _digest(config_bytes),
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": _digest(compressed),
                "size": len(compressed),
            }
        ],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [
            {
                "mediaType": manifest["mediaType"],
                "digest": _digest(manifest_bytes),
                "size": len(manifest_bytes),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                },
            }
        ],
    }
    files = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index, sort_keys=True).encode(),
    }
    for blob in (compressed, config_bytes, manifest_bytes):
        files[f"blobs/sha256/{_digest(blob).split(':', 1)[1]}"] = blob
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(target)
    return target


def archives(bin_dir: Path, e2e: bool = False) -> dict[str, Path]:
    """image name -> OCI archive, built once per busybox version (cached in ``<lab home>/images``);
    with ``e2e`` also ``E2E_IMAGES`` (rebuilt when the hostpathplugin binary changes too)."""
    busybox = bin_dir / "busybox"
    digest = hashlib.sha256(busybox.read_bytes())
    wanted: dict[str, tuple[list[str] | None, list[str] | None, dict[str, Path]]] = {
        PAUSE_IMAGE: (_PAUSE_ENTRYPOINT, None, {})
    }
    wanted.update({name: (None, ["sh"], {}) for name in WORKLOAD_IMAGES})
    if e2e:
        for name, (binary, entrypoint) in E2E_IMAGES.items():
            extras = {}
            if binary:
                extras[binary] = bin_dir / binary
                if not extras[binary].is_file():
                    raise FileNotFoundError(f"{extras[binary]} is missing: run `lab/build.sh --e2e` (make e2e does)")
                digest.update(extras[binary].read_bytes())
            wanted[name] = (entrypoint, None if entrypoint else ["sh"], extras)
    directory = bin_dir.parent / "images" / digest.hexdigest()[:16]
    result = {}
    for name, (entrypoint, cmd, extras) in wanted.items():
        target = directory / (name.replace("/", "_").replace(":", "_") + ".tar")
        if not target.exists():
            build_archive(busybox, name, entrypoint, cmd, target, extras)
        result[name] = target
    return result
