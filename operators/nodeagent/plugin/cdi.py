"""CDI (Container Device Interface) specs for prepared claims (pure, plus a durable writer and readers).

One transient spec per claim, ``<cdi root>/k8s.<driver>-claim_<claimUID>.json``, kind
``k8s.<driver>/claim``, one device per prepared device named ``<claimUID>-<device>`` (plus
``-<shareID>`` for a share). The claim and each device's allocation are recorded as annotations,
so a lost checkpoint can be rebuilt from the CDI root. The first device of each request also
mounts that request's device metadata file (``metadata``), as upstream's helper adds its
metadata CDI device to the first device of each request. ``cdiVersion`` is the lowest version the
content needs (older runtimes reject newer versions); the annotations make that at least 0.6.0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from . import durable

CLASS = "claim"
CLAIM_ANNOTATION = "nodeagent.dra-operators.dev/claim"
DEVICE_ANNOTATION = "nodeagent.dra-operators.dev/device"
# What the claim annotation records: "metadata" only for a claim with device metadata files,
# so the specs of claims prepared without them stay byte for byte as before.
CLAIM_FIELDS = ("namespace", "name", "uid", "metadata")


def kind(driver: str) -> str:
    return f"k8s.{driver}/{CLASS}"


def spec_file_name(driver: str, claim_uid: str) -> str:
    return f"k8s.{driver}-{CLASS}_{claim_uid}.json"


def device_name(claim_uid: str, device: str, share_id: str | None = None) -> str:
    return f"{claim_uid}-{device}" + (f"-{share_id}" if share_id else "")


def qualified_id(driver: str, name: str) -> str:
    return f"{kind(driver)}={name}"


def env_key(device: str) -> str:
    """``gpu-0`` -> ``GPU_0``: upper case, every run of other characters one underscore."""
    return re.sub(r"[^A-Za-z0-9]+", "_", device).strip("_").upper()


def minimum_version(spec: dict[str, Any]) -> str:
    """The lowest cdiVersion this content needs (the CDI library's MinimumRequiredVersion)."""
    version = (0, 3, 0)

    def need(v: tuple[int, int, int]) -> None:
        nonlocal version
        version = max(version, v)

    edits = [spec.get("containerEdits") or {}] + [d.get("containerEdits") or {} for d in spec.get("devices", [])]
    if any(e.get("netDevices") for e in edits) or any(
        (e.get("intelRdt") or {}).get(k) for e in edits for k in ("schemata", "enableMonitoring")
    ):
        need((1, 1, 0))
    if any(e.get("intelRdt") or e.get("additionalGids") for e in edits):
        need((0, 7, 0))
    if (
        spec.get("annotations")
        or any(d.get("annotations") for d in spec.get("devices", []))
        or "." in spec["kind"].split("/", 1)[1]
    ):
        need((0, 6, 0))
    if any(d["name"][:1].isdigit() for d in spec.get("devices", [])) or any(
        n.get("hostPath") for e in edits for n in e.get("deviceNodes") or []
    ):
        need((0, 5, 0))
    if any(m.get("type") for e in edits for m in e.get("mounts") or []):
        need((0, 4, 0))
    return ".".join(map(str, version))


def merge_edits(*edits: dict[str, Any] | None) -> dict[str, Any] | None:
    """containerEdits one after the other (lists appended), or None when all are empty."""
    merged: dict[str, Any] = {}
    for e in edits:
        for key, value in (e or {}).items():
            merged[key] = [*merged.get(key, []), *value] if isinstance(value, list) else value
    return merged or None


def build_claim_spec(
    driver: str, claim: dict[str, str], devices: list[dict[str, Any]], common_edits: dict[str, Any] | None = None
) -> dict[str, Any]:
    """``claim``: {uid, namespace, name} and its device metadata record when it has one;
    ``devices``: {cdi_name, edits, record} where
    ``record`` is the allocation kept in the device annotation."""
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": kind(driver),
        "annotations": {
            CLAIM_ANNOTATION: json.dumps({k: claim[k] for k in CLAIM_FIELDS if k in claim}, sort_keys=True)
        },
        "devices": [
            {
                "name": d["cdi_name"],
                "annotations": {DEVICE_ANNOTATION: json.dumps(d["record"], sort_keys=True)},
                "containerEdits": d["edits"],
            }
            for d in devices
        ],
    }
    if common_edits:
        spec["containerEdits"] = common_edits
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def write_spec(root: Path, file_name: str, spec: dict[str, Any]) -> Path:
    """Atomically and durably (``durable.write_text``)."""
    target = root / file_name
    durable.write_text(target, json.dumps(spec, indent=2, sort_keys=True), mode=0o644, prefix="spec.")
    return target


def spec_files(root: Path, driver: str) -> dict[str, Path]:
    """Our claim specs in ``root`` by claim UID (from the file name)."""
    prefix = f"k8s.{driver}-{CLASS}_"
    return {
        path.name[len(prefix) : -len(".json")]: path
        for path in (sorted(root.glob(f"{prefix}*.json")) if root.is_dir() else [])
    }


def read_spec(path: Path) -> dict[str, Any] | None:
    """A spec as written, or None when it is gone or does not parse."""
    try:
        spec = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # unreadable, not JSON, nested past the stack
        return None
    return spec if isinstance(spec, dict) else None


def read_claim_specs(root: Path, driver: str) -> list[dict[str, Any]]:
    """Our claim specs in ``root`` that still parse (for rebuilding a lost checkpoint)."""
    return [spec for spec in map(read_spec, spec_files(root, driver).values()) if spec is not None]
