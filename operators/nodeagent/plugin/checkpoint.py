"""The node agent's record of prepared claims, so a restarted agent answers unprepare and never
prepares twice. A versioned JSON document, written atomically and durably (``durable``):

``checkpoint.nodeagent.dra-operators.dev/v2``::

    {"kind": "Checkpoint", "apiVersion": ".../v2",
     "preparedClaims": [{"uid", "namespace", "name",
                         "devices": [{"requestNames", "pool", "device", "shareID", "adminAccess",
                                      "cdiDeviceIDs", "config"}]}]}

v1 (UIDs only, as dra-example-driver writes) is still read and upgraded; its claims come back
without device details, which unprepare does not need.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import durable
from .cdi import CLAIM_ANNOTATION, DEVICE_ANNOTATION

GROUP = "checkpoint.nodeagent.dra-operators.dev"
V1, V2 = f"{GROUP}/v1", f"{GROUP}/v2"
CURRENT = V2


class CheckpointCorrupt(Exception):
    pass


@dataclass
class PreparedDevice:
    pool: str
    device: str
    requestNames: list[str] = field(default_factory=list)
    shareID: str | None = None
    adminAccess: bool = False
    cdiDeviceIDs: list[str] = field(default_factory=list)
    config: dict[str, Any] | None = None  # the merged opaque configuration applied (compatible v2 addition)


@dataclass
class PreparedClaim:
    uid: str
    namespace: str = ""
    name: str = ""
    devices: list[PreparedDevice] = field(default_factory=list)


def encode(claims: dict[str, PreparedClaim]) -> dict[str, Any]:
    document: dict[str, Any] = {"kind": "Checkpoint", "apiVersion": CURRENT}
    if claims:
        document["preparedClaims"] = [asdict(c) for c in sorted(claims.values(), key=lambda c: c.uid)]
    return document


def decode(document: Any) -> dict[str, PreparedClaim]:
    """Any known version to the current model; CheckpointCorrupt for anything else."""
    if not isinstance(document, dict) or document.get("kind") != "Checkpoint":
        raise CheckpointCorrupt("not a Checkpoint document")
    version = document.get("apiVersion")
    if version not in (V1, V2):
        raise CheckpointCorrupt(f"unknown checkpoint version {version!r}")
    claims: dict[str, PreparedClaim] = {}
    try:
        for entry in document.get("preparedClaims") or []:
            if version == V1:
                claims[entry["uid"]] = PreparedClaim(uid=entry["uid"])
                continue
            devices = [PreparedDevice(**d) for d in entry.get("devices") or []]
            claims[entry["uid"]] = PreparedClaim(uid=entry["uid"], namespace=entry.get("namespace", ""),
                                                 name=entry.get("name", ""), devices=devices)
    except (KeyError, TypeError) as e:
        raise CheckpointCorrupt(f"malformed entry: {e}") from e
    return claims


def load(path: Path) -> dict[str, PreparedClaim]:
    """Prepared claims on disk; a missing file is an empty checkpoint."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        # Invalid UTF-8 (a torn write, a disk error) is corruption like any other, not a crash.
        return decode(json.loads(data.decode("utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointCorrupt(f"{path}: {type(e).__name__}: {e}") from e


def save(path: Path, claims: dict[str, PreparedClaim]) -> None:
    durable.write_text(path, json.dumps(encode(claims), indent=2, sort_keys=True), prefix="tmp-checkpoint-")


def rebuild_from_cdi(specs: list[dict[str, Any]]) -> dict[str, PreparedClaim]:
    """Prepared claims as recorded in our CDI specs' annotations (when the checkpoint is lost)."""
    claims: dict[str, PreparedClaim] = {}
    for spec in specs:
        try:
            claim = json.loads(spec["annotations"][CLAIM_ANNOTATION])
            devices = [PreparedDevice(**json.loads(d["annotations"][DEVICE_ANNOTATION])) for d in spec["devices"]]
            prepared = PreparedClaim(uid=str(claim["uid"]), namespace=str(claim["namespace"]),
                                     name=str(claim["name"]), devices=devices)
        except (KeyError, TypeError, ValueError):
            continue  # not one of ours, or damaged as well: nothing to rebuild from it
        claims[prepared.uid] = prepared
    return claims
