"""The node agent's record of prepared claims, so a restarted agent answers unprepare and never
prepares twice. A versioned JSON document, written atomically and durably (``durable``):

``checkpoint.nodeagent.dra-operators.dev/v2``::

    {"kind": "Checkpoint", "apiVersion": ".../v2",
     "preparedClaims": [{"uid", "namespace", "name",
                         "devices": [{"requestNames", "pool", "device", "shareID", "adminAccess",
                                      "cdiDeviceIDs", "config"}],
                         "metadata": {"versions", "podClaimName", "requests"}}]}

``metadata`` (a compatible v2 addition, absent when off) is what prepare decided for the
device metadata files (``metadata``): the versions written, the Pod's name of the claim and the
request each top-level request was allocated as (``gpu/large`` for a subrequest), so a lost file
and the spec's mounts are written again as they were. Older agents ignore it.

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
class MetadataRecord:
    versions: list[str]
    podClaimName: str | None = None
    requests: dict[str, str] = field(default_factory=dict)  # top-level request -> as allocated


@dataclass
class PreparedClaim:
    uid: str
    namespace: str = ""
    name: str = ""
    devices: list[PreparedDevice] = field(default_factory=list)
    metadata: MetadataRecord | None = None


def _claim_document(c: PreparedClaim) -> dict[str, Any]:
    document = asdict(c)
    if c.metadata is None:
        del document["metadata"]  # what an agent without device metadata wrote
    return document


def encode(claims: dict[str, PreparedClaim]) -> dict[str, Any]:
    document: dict[str, Any] = {"kind": "Checkpoint", "apiVersion": CURRENT}
    if claims:
        document["preparedClaims"] = [_claim_document(c) for c in sorted(claims.values(), key=lambda c: c.uid)]
    return document


def _device(d: Any) -> PreparedDevice:
    """One device entry, its fields of the declared types (TypeError naming the field)."""
    if not isinstance(d, dict):
        raise TypeError(f"a device is a {type(d).__name__}, not an object")
    unknown = set(d) - set(PreparedDevice.__dataclass_fields__)
    if unknown:
        raise TypeError(f"unknown device fields {sorted(map(str, unknown))}")
    device = PreparedDevice(**d)
    for name, kind in (("pool", str), ("device", str), ("adminAccess", bool)):
        if not isinstance(getattr(device, name), kind):
            raise TypeError(f"device field {name} is a {type(getattr(device, name)).__name__}, not a {kind.__name__}")
    for name in ("requestNames", "cdiDeviceIDs"):
        value = getattr(device, name)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"device field {name} is not a list of strings")
    if device.shareID is not None and not isinstance(device.shareID, str):
        raise TypeError("device field shareID is not a string")
    if device.config is not None and not isinstance(device.config, dict):
        raise TypeError("device field config is not an object")
    return device


def metadata_record(m: Any) -> MetadataRecord | None:
    """A claim's metadata entry, its fields of the declared types (TypeError naming the field)."""
    if m is None:
        return None
    if not isinstance(m, dict):
        raise TypeError(f"metadata is a {type(m).__name__}, not an object")
    versions, pod_claim, requests = m.get("versions"), m.get("podClaimName"), m.get("requests") or {}
    if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
        raise TypeError("metadata field versions is not a list of strings")
    if pod_claim is not None and not isinstance(pod_claim, str):
        raise TypeError("metadata field podClaimName is not a string")
    if not isinstance(requests, dict) or not all(isinstance(v, str) for v in requests.values()):
        raise TypeError("metadata field requests is not an object of strings")
    return MetadataRecord(versions=versions, podClaimName=pod_claim, requests=requests)


def _text(entry: dict[str, Any], key: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise TypeError(f"claim field {key} is {'missing' if value is None else 'a ' + type(value).__name__}")
    return value


def decode(document: Any) -> dict[str, PreparedClaim]:
    """Any known version to the current model; CheckpointCorrupt for anything else, including
    fields of the wrong type (they would fail the calls that use them later)."""
    if not isinstance(document, dict) or document.get("kind") != "Checkpoint":
        raise CheckpointCorrupt("not a Checkpoint document")
    version = document.get("apiVersion")
    if version not in (V1, V2):
        raise CheckpointCorrupt(f"unknown checkpoint version {version!r}")
    claims: dict[str, PreparedClaim] = {}
    entries = document.get("preparedClaims") or []
    if not isinstance(entries, list):
        raise CheckpointCorrupt(f"preparedClaims is a {type(entries).__name__}, not a list")
    for i, entry in enumerate(entries):
        try:
            if not isinstance(entry, dict):
                raise TypeError(f"a {type(entry).__name__}, not an object")
            uid = _text(entry, "uid")
            if version == V1:
                claims[uid] = PreparedClaim(uid=uid)
                continue
            devices = entry.get("devices") or []
            if not isinstance(devices, list):
                raise TypeError(f"devices is a {type(devices).__name__}, not a list")
            claims[uid] = PreparedClaim(
                uid=uid,
                namespace=_text(entry, "namespace", ""),
                name=_text(entry, "name", ""),
                devices=[_device(d) for d in devices],
                metadata=metadata_record(entry.get("metadata")),
            )
        except TypeError as e:
            raise CheckpointCorrupt(f"malformed entry preparedClaims[{i}]: {e}") from None
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
    except CheckpointCorrupt as e:
        raise CheckpointCorrupt(f"{path}: {e}") from None
    except (ValueError, RecursionError) as e:
        raise CheckpointCorrupt(f"{path}: {type(e).__name__}: {e}") from None


def save(path: Path, claims: dict[str, PreparedClaim]) -> None:
    durable.write_text(path, json.dumps(encode(claims), indent=2, sort_keys=True), prefix="tmp-checkpoint-")


def rebuild_from_cdi(specs: list[dict[str, Any]]) -> dict[str, PreparedClaim]:
    """Prepared claims as recorded in our CDI specs' annotations (when the checkpoint is lost)."""
    claims: dict[str, PreparedClaim] = {}
    for spec in specs:
        try:
            claim = json.loads(spec["annotations"][CLAIM_ANNOTATION])
            devices = [_device(json.loads(d["annotations"][DEVICE_ANNOTATION])) for d in spec["devices"]]
            prepared = PreparedClaim(
                uid=_text(claim, "uid"),
                namespace=_text(claim, "namespace"),
                name=_text(claim, "name"),
                devices=devices,
                metadata=metadata_record(claim.get("metadata")),
            )
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
            continue  # not one of ours, or damaged as well: nothing to rebuild from it
        claims[prepared.uid] = prepared
    return claims
