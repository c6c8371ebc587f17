"""What the lint asks the API server: the context its rules need, and a server-side apply dry
run of every object (strict field validation), so the cluster's own validation and served
versions answer where they can."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from ..core.api.kube import ApiError, Kube
from ..core.api.resources import (
    DEVICE_CLASSES,
    NAMESPACES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    InvalidPathSegment,
    Resource,
    segment,
)
from .documents import Document
from .rules import ERROR, RESOURCE_GROUP, Context, Finding

FIELD_MANAGER = "dra-operators-lint"
_UNDECLARED = re.compile(r"\): (\S+): field not declared in schema")
APPLY_PATCH = "application/apply-patch+yaml"


async def _list(kube: Kube, res: Resource) -> list[dict[str, Any]]:
    try:
        return await kube.list(res)
    except ApiError as e:
        if e.not_found:
            return []
        raise


async def fill(kube: Kube, ctx: Context) -> None:
    """The cluster's side of ``ctx``: served versions, classes, slices, templates, claims, namespaces."""
    try:
        info = await kube.request("GET", f"/apis/{RESOURCE_GROUP}")
        served = [v["version"] for v in info.get("versions") or []]
    except ApiError as e:
        if not e.not_found:
            raise
        served = []
    ctx.served = {RESOURCE_GROUP: served}
    ctx.minor = release_minor(await kube.server_version())
    if "v1" not in served:
        ctx.device_classes, ctx.slices, ctx.templates, ctx.claims = {}, [], set(), set()
    else:
        classes, slices, templates, claims = await asyncio.gather(
            _list(kube, DEVICE_CLASSES),
            _list(kube, RESOURCE_SLICES),
            _list(kube, RESOURCE_CLAIM_TEMPLATES),
            _list(kube, RESOURCE_CLAIMS),
        )
        ctx.device_classes = {c["metadata"]["name"]: c for c in classes}
        ctx.slices = slices
        ctx.templates = {(t["metadata"]["namespace"], t["metadata"]["name"]) for t in templates}
        ctx.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in claims}
    ctx.namespaces = {n["metadata"]["name"]: n for n in await _list(kube, NAMESPACES)}


def release_minor(version: dict[str, Any]) -> int | None:
    """``/version``'s minor ("34", or "34+" from some providers), None where it is not a number."""
    digits = re.match(r"\d+", str(version.get("minor") or ""))
    return int(digits.group()) if digits else None


class Discovery:
    """apiVersion + kind -> the resource to send it to, from the server's discovery (cached)."""

    def __init__(self, kube: Kube):
        self.kube = kube
        self.lists: dict[str, list[dict[str, Any]] | None] = {}

    async def resource(self, api_version: str, kind: str) -> Resource | None:
        if api_version not in self.lists:
            # An apiVersion from a file: escaped like any name (a "?" must not start a query).
            parts = [segment(p, "apiVersion") for p in api_version.split("/")]
            if len(parts) > 2:
                raise InvalidPathSegment("apiVersion", api_version, "write GROUP/VERSION or VERSION")
            path = "/".join(["/api" if len(parts) == 1 else "/apis", *parts])
            try:
                self.lists[api_version] = (await self.kube.request("GET", path)).get("resources") or []
            except ApiError as e:
                if not e.not_found:
                    raise
                self.lists[api_version] = None
        for r in self.lists[api_version] or []:
            if r.get("kind") == kind and "/" not in r.get("name", ""):
                return Resource(api_version, r["name"], bool(r.get("namespaced")))
        return None


def _server_findings(doc: Document, error: ApiError) -> list[Finding]:
    body = error.body if isinstance(error.body, dict) else {}
    message = str(body.get("message") or error.body)
    causes = (body.get("details") or {}).get("causes") or []
    fix = "change the field as the API server's message says (kube-apiserver validation)"
    if m := _UNDECLARED.search(message):
        # Server-side apply answers a field unknown to the schema with a 500 before any validation.
        return [
            Finding(
                "server-dry-run",
                ERROR,
                doc.file,
                doc.line,
                doc.ref,
                m.group(1).lstrip("."),
                f"the API server refuses it: {m.group(1).lstrip('.')}: field not declared in schema "
                f"of {doc.api_version} {doc.kind}",
                "remove the field, or write it where this version has it",
            )
        ]
    if not causes:
        return [
            Finding(
                "server-dry-run", ERROR, doc.file, doc.line, doc.ref, "", f"the API server refuses it: {message}", fix
            )
        ]
    return [
        Finding(
            "server-dry-run",
            ERROR,
            doc.file,
            doc.line,
            doc.ref,
            str(c.get("field") or "").lstrip("."),
            f"the API server refuses it: {c.get('message') or c.get('reason')}",
            fix,
        )
        for c in causes
    ]


async def dry_run(kube: Kube, ctx: Context, doc: Document, discovery: Discovery) -> list[Finding]:
    """A server-side apply dry run of ``doc`` with strict field validation: the server's own answer."""
    if not doc.api_version or not doc.kind or not doc.name:
        return [
            Finding(
                "server-dry-run",
                ERROR,
                doc.file,
                doc.line,
                doc.ref,
                "metadata.name" if doc.kind else "kind",
                "apiVersion, kind and metadata.name are required",
                "add the missing field",
            )
        ]
    try:
        return await _dry_run(kube, ctx, doc, discovery)
    except InvalidPathSegment as e:
        # Refused before sending, as client-go refuses it (kubectl says the same).
        field = {"apiVersion": "apiVersion", "namespace": "metadata.namespace"}.get(e.what, "metadata.name")
        return [
            Finding(
                "server-dry-run",
                ERROR,
                doc.file,
                doc.line,
                doc.ref,
                field,
                f"cannot be sent: {e}",
                "use a name of lower-case letters, digits, '-' and '.'",
            )
        ]


async def _dry_run(kube: Kube, ctx: Context, doc: Document, discovery: Discovery) -> list[Finding]:
    resource = await discovery.resource(doc.api_version, doc.kind)
    if resource is None:
        group, _, version = doc.api_version.rpartition("/")
        if group == RESOURCE_GROUP:
            if version not in (ctx.served or {}).get(RESOURCE_GROUP, []):
                return []  # the served-version rule says it, with the fix
            # The version is served, but not this kind in it (DeviceTaintRule: v1 from 1.37).
            elsewhere = [
                v
                for v in (ctx.served or {}).get(RESOURCE_GROUP, [])
                if v != version and await discovery.resource(f"{group}/{v}", doc.kind) is not None
            ]
            return [
                Finding(
                    "server-dry-run",
                    ERROR,
                    doc.file,
                    doc.line,
                    doc.ref,
                    "apiVersion",
                    f"the cluster serves no {doc.kind} in {doc.api_version}"
                    + (
                        f"; it serves {doc.kind} as {', '.join(f'{group}/{v}' for v in elsewhere)}" if elsewhere else ""
                    ),
                    f"write apiVersion: {group}/{elsewhere[0]}"
                    if elsewhere
                    else f"turn on the {doc.kind} API (its feature gate and API version) or leave it out",
                )
            ]
        return [
            Finding(
                "server-dry-run",
                ERROR,
                doc.file,
                doc.line,
                doc.ref,
                "apiVersion",
                f"the cluster serves no {doc.kind} in {doc.api_version}",
                "check apiVersion and kind",
            )
        ]
    namespace = ctx.namespace_of(doc) if resource.namespaced else None
    if namespace and ctx.namespaces is not None and namespace not in ctx.namespaces:
        return []  # created by these files (or missing): nothing to validate against yet
    body = dict(doc.body)
    if namespace:
        body["metadata"] = {**doc.metadata, "namespace": namespace}
    try:
        await kube.request(
            "PATCH",
            resource.path(namespace, doc.name),
            body=body,
            content_type=APPLY_PATCH,
            retry=False,
            params=[
                ("fieldManager", FIELD_MANAGER),
                ("force", "true"),
                ("dryRun", "All"),
                ("fieldValidation", "Strict"),
            ],
        )
    except ApiError as e:
        if 400 <= e.status < 500 or _UNDECLARED.search(str(e.body)):
            return _server_findings(doc, e)
        raise
    return []


async def dry_run_all(kube: Kube, ctx: Context) -> list[Finding]:
    discovery = Discovery(kube)
    found: list[Finding] = []
    for doc in ctx.documents:  # in order: discovery is cached per group-version
        found += await dry_run(kube, ctx, doc, discovery)
    return found
