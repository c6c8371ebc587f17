"""Device metadata for containers (KEP-5304): one file per claim and request, mounted read-only
into the containers that use the request (pure, plus a durable writer and a remover).

As upstream's kubelet plugin helper writes it (k8s.io/dynamic-resource-allocation@v0.37.1,
kubeletplugin/metadata.go, ``metadataWriter``), so the consumers written against it
(``devicemetadata.DecodeMetadataFromStream``, the e2e cases "must mount device metadata ...")
read ours unchanged:

- on the host: ``<plugin data dir>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json``
  (``metadataFilePath``);
- in the container (api/metadata/helpers.go): ``/var/run/kubernetes.io/dra-device-attributes/
  resourceclaims/<claim>/<request>/<driver>-metadata.json``, or ``resourceclaimtemplates/
  <pod claim name>/<request>/...`` for a claim made from a template (its pod-claim-name
  annotation), whose generated name a Pod spec cannot know;
- the content: a JSON stream, the same ``DeviceMetadata`` once per API version, newest first
  (``encodeMetadataStream``), each as Go's ``json.MarshalIndent(obj, "", "  ")`` and a newline.

``<request>`` is the top-level request (a subrequest is cut off, ``resourceclaim.BaseRequestRef``);
the content names the request as allocated, subrequest included.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ...core.dra.devicemetadata import GROUP
from ...core.dra.resourceclaim import POD_CLAIM_ANNOTATION
from . import durable

KIND = "DeviceMetadata"

HOST_SUBDIR = "dra-device-metadata"  # metadataSubDir
HOST_FILE = "metadata.json"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"  # metadata.ContainerDir
CLAIMS_SUBDIR, TEMPLATES_SUBDIR = "resourceclaims", "resourceclaimtemplates"

GO_ESCAPED = "<>&\u2028\u2029"  # what encoding/json escapes beyond what Python's json does

# resourceapi.DeviceAttribute's fields in the order Go writes them.
ATTRIBUTE_FIELDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")


def base_request(request: str) -> str:
    return request.split("/", 1)[0]


def pod_claim_name(claim: dict[str, Any]) -> str | None:
    """The Pod's name for a claim made from a template (newClaimRef)."""
    return ((claim.get("metadata") or {}).get("annotations") or {}).get(POD_CLAIM_ANNOTATION)


# -- paths ---------------------------------------------------------------------------------


def claim_dir_name(namespace: str, name: str) -> str:
    # Neither a namespace nor a claim name can hold "_": the pair is unambiguous.
    return f"{namespace}_{name}"


def claim_dir(data_dir: Path, namespace: str, name: str) -> Path:
    return data_dir / HOST_SUBDIR / claim_dir_name(namespace, name)


def host_path(data_dir: Path, namespace: str, name: str, request: str) -> Path:
    return claim_dir(data_dir, namespace, name) / base_request(request) / HOST_FILE


def container_path(driver: str, claim_name: str, request: str, pod_claim: str | None = None) -> str:
    """metadataWriter.containerFilePath: by the Pod's name of the claim when it has one."""
    subdir, key = (TEMPLATES_SUBDIR, pod_claim) if pod_claim else (CLAIMS_SUBDIR, claim_name)
    return f"{CONTAINER_DIR}/{subdir}/{key}/{base_request(request)}/{driver}-metadata.json"


def mount(host: Path, container: str) -> dict[str, Any]:
    """The CDI mount of one file (writeCDISpec): read-only bind."""
    return {"hostPath": str(host), "containerPath": container, "options": ["ro", "bind"]}


# -- the document --------------------------------------------------------------------------


def _attribute(value: dict[str, Any]) -> dict[str, Any]:
    return {k: value[k] for k in ATTRIBUTE_FIELDS if k in value}


def build_device_metadata(
    driver: str,
    claim: dict[str, str],
    request: str,
    devices: list[dict[str, Any]],
    *,
    pod_claim: str | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    """The internal ``DeviceMetadata`` of one request (buildDeviceMetadata), without apiVersion
    and kind: ``claim`` {namespace, name, uid}; ``devices`` {pool, name, attributes} with the
    attributes as in the ResourceSlice (names as published: unqualified ones are the driver's)."""
    # ObjectMeta's order; Go omits each when empty (omitempty).
    values = (("name", claim.get("name")), ("namespace", claim.get("namespace")), ("uid", claim.get("uid")))
    meta: dict[str, Any] = {k: v for k, v in (*values, ("generation", generation)) if v}
    document: dict[str, Any] = {"metadata": meta}
    if pod_claim is not None:
        document["podClaimName"] = pod_claim
    entries = []
    for d in devices:
        entry: dict[str, Any] = {"driver": driver, "pool": d["pool"], "name": d["name"]}
        if d.get("attributes"):
            entry["attributes"] = {k: _attribute(v) for k, v in sorted(d["attributes"].items())}
        entries.append(entry)
    request_entry: dict[str, Any] = {"name": request}
    if entries:
        request_entry["devices"] = entries
    document["requests"] = [request_entry]
    return document


def _go_json(value: Any) -> str:
    """Go's json.MarshalIndent(value, "", "  ") of an already ordered value: its HTML-safe
    escapes of <, > and & and of U+2028/U+2029 (these only occur inside strings), non-ASCII
    text as is. Map keys must be sorted by the caller, as Go sorts them."""
    text = json.dumps(value, indent=2, ensure_ascii=False)
    for char in GO_ESCAPED:
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def encode_stream(document: dict[str, Any], versions: tuple[str, ...]) -> str:
    """The file's content: the document once per version in the order given, kind and
    apiVersion first (TypeMeta), each followed by a newline (encodeMetadataStream)."""
    return "".join(
        _go_json({"kind": KIND, "apiVersion": f"{GROUP}/{version}", **document}) + "\n" for version in versions
    )


def decode_stream(text: str) -> list[dict[str, Any]]:
    """The documents of a stream in order (for reading a file back; ValueError when torn)."""
    decoder, at = json.JSONDecoder(), 0
    documents: list[Any] = []
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return documents
        document, at = decoder.raw_decode(text, at)
        documents.append(document)


# -- files ---------------------------------------------------------------------------------


def write_file(path: Path, content: str) -> None:
    """Atomically and durably; readable by every container user (metadataFilePerms 0644: the
    bind mount keeps the file's mode, the host directories are only walked by the runtime)."""
    durable.write_text(path, content, mode=0o644, prefix="metadata.")


def read_file(path: Path) -> list[dict[str, Any]] | None:
    """The documents of a file as written, or None when it is gone or does not parse."""
    try:
        documents = decode_stream(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return documents if documents and all(isinstance(d, dict) for d in documents) else None


def remove_claim(data_dir: Path, namespace: str, name: str) -> bool:
    """A claim's metadata directory and everything in it (cleanupClaim); whether it was there."""
    directory = claim_dir(data_dir, namespace, name)
    if not directory.exists():
        return False
    shutil.rmtree(directory)
    durable.sync_directory(directory.parent)
    return True


def claim_dirs(data_dir: Path) -> set[str]:
    """The ``<namespace>_<claim>`` directories on disk."""
    root = data_dir / HOST_SUBDIR
    return {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
