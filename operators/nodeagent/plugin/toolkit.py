"""The NVIDIA Container Toolkit's CDI spec on the node: which of its device IDs a prepared GPU or
MIG device adds to the claim's own, so that the container runtime injects the driver's libraries,
binaries and hooks (what our claim spec does not carry).

``nvidia-ctk cdi generate`` (or the toolkit's nvidia-cdi-refresh service) writes one spec of kind
``nvidia.com/gpu`` (``/var/run/cdi/nvidia.yaml`` or ``/etc/cdi/nvidia.yaml``), naming each GPU by
index and UUID and each MIG device by ``<gpu>:<mig>`` and UUID; the libraries, binaries and hooks
are its spec-wide containerEdits, applied with any of its devices.
"""

from __future__ import annotations

from pathlib import Path

import yaml

KIND = "nvidia.com/gpu"


class ToolkitMissing(Exception):
    pass


def device_names(dirs: list[str]) -> set[str] | None:
    """Device names of the toolkit's spec(s) in ``dirs`` (I/O); None when there is none."""
    names: set[str] | None = None
    for directory in dirs:
        root = Path(directory)
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                spec = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue
            if isinstance(spec, dict) and spec.get("kind") == KIND:
                names = (names or set()) | {
                    str(d.get("name")) for d in spec.get("devices") or [] if isinstance(d, dict)
                }
    return names


def missing_message(dirs: list[str]) -> str:
    return (
        f"the NVIDIA Container Toolkit's CDI spec (kind {KIND}) is in none of {', '.join(dirs)}: containers "
        "would get the GPU's device nodes but no driver libraries, nvidia-smi or hooks. Install the NVIDIA "
        "Container Toolkit on the node and generate the spec (nvidia-ctk cdi generate "
        "--output=/var/run/cdi/nvidia.yaml, or enable its nvidia-cdi-refresh service), or, where "
        "nvidia-container-runtime is the node's runtime, set DRA_NODEAGENT_NVIDIA_CONTAINER_RUNTIME=true"
    )


def toolkit_id(candidates: list[str], names: set[str], device: str) -> str:
    """The toolkit's CDI ID for a device known by ``candidates`` (UUID first, then index)."""
    for name in candidates:
        if name in names:
            return f"{KIND}={name}"
    raise ToolkitMissing(
        f"the NVIDIA Container Toolkit's CDI spec has no device {' or '.join(candidates)} "
        f"(device {device}): regenerate it after GPU or MIG changes (nvidia-ctk cdi generate)"
    )
