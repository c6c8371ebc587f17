"""The lint's rules: pure functions from the documents (and, when a cluster answered, what it
serves and publishes) to findings that name the field and the fix.

Each rule is a function ``rule(doc, ctx) -> Iterable[Finding]`` registered in RULES under its
id; tests/unit/lint/test_rules.py has a bad and a fixed YAML for each. Where the API server
decides (validation, served versions), the message follows upstream's rule and cites it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..core.dra.cel import SelectorError, matches
from .documents import Document

Obj = dict[str, Any]
ERROR, WARNING = "error", "warning"

RESOURCE_GROUP = "resource.k8s.io"
# The versions kube-apiserver 1.37 has for resource.k8s.io (k8s.io/api@v0.37.1/resource/*);
# v1 is on by default, the betas only where a cluster turns them on, v1alpha3 holds only
# DeviceTaintRule. Used when no cluster answers.
KNOWN_VERSIONS = ("v1", "v1beta2", "v1beta1", "v1alpha3")
# Kinds of the first DRA design (resource.k8s.io/v1alpha2, removed in 1.31).
REMOVED_KINDS = {
    "ResourceClass": "a DeviceClass (resource.k8s.io/v1) with CEL selectors",
    "ResourceClaimParameters": "the claim's own requests, selectors and config (spec.devices)",
    "ResourceClassParameters": "the DeviceClass's selectors and config",
    "PodSchedulingContext": "nothing: kube-scheduler allocates claims itself since 1.31",
}
# Fields of v1alpha2 ResourceClaim specs (removed in 1.31): what replaced them.
REMOVED_CLAIM_FIELDS = {
    "allocationMode": "drop it: a claim is allocated when the first Pod using it is scheduled (what "
    "WaitForFirstConsumer meant); there is no Immediate allocation any more",
    "resourceClassName": "ask for devices in spec.devices.requests[].exactly.deviceClassName",
    "parametersRef": "put the parameters in spec.devices (requests, selectors, config)",
}
# A v1beta1 request carries these directly; resource.k8s.io/v1 puts them under `exactly`.
EXACTLY_FIELDS = ("deviceClassName", "selectors", "allocationMode", "count", "adminAccess", "tolerations", "capacity")
ALLOCATION_MODES = ("ExactCount", "All")
# Where workloads keep their Pod template.
POD_TEMPLATE_PATHS = {
    "Deployment": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    "PodTemplate": ("template", "spec"),
    "Pod": ("spec",),
}
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
_CEL_KEY = re.compile(r"device\.(attributes|capacity)\s*\[\s*(['\"])([^'\"]*)\2\s*\]")
_CEL_DOT = re.compile(r"device\.(attributes|capacity)\.([A-Za-z_][A-Za-z0-9_]*)")
_CEL_TYPED = re.compile(
    r"device\.attributes\s*\[\s*(['\"])[^'\"]*\1\s*\]\s*\.\s*[A-Za-z_][A-Za-z0-9_]*"
    r"\s*\.\s*(string|int|bool|version|stringValue|intValue|boolValue|versionValue)\b"
)
_DRIVER_LITERAL = re.compile(r"device\.driver\s*==\s*(['\"])([^'\"]+)\1")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str
    file: str
    line: int
    object: str
    field: str
    message: str
    fix: str

    def to_json(self) -> Obj:
        return {k: getattr(self, k) for k in ("rule", "severity", "file", "line", "object", "field", "message", "fix")}


@dataclass
class Context:
    """Everything a rule may look at besides its own document. ``None``: not known (no cluster)."""

    documents: list[Document] = field(default_factory=list)
    default_namespace: str = "default"
    served: dict[str, list[str]] | None = None  # group -> versions the cluster serves
    minor: int | None = None  # the cluster's Kubernetes minor (None: no cluster, the newest rules)
    device_classes: dict[str, Obj] | None = None  # on the cluster, by name
    slices: list[Obj] | None = None  # the cluster's ResourceSlices (v1 layout)
    templates: set[tuple[str, str]] | None = None  # (namespace, name) on the cluster
    claims: set[tuple[str, str]] | None = None
    namespaces: dict[str, Obj] | None = None

    def namespace_of(self, doc: Document) -> str:
        return doc.namespace or self.default_namespace

    def in_files(self, kind: str) -> list[Document]:
        return [d for d in self.documents if d.kind == kind]

    def device_class(self, name: str) -> Obj | None:
        for d in self.in_files("DeviceClass"):
            if d.name == name:
                return d.body
        return (self.device_classes or {}).get(name)

    def class_known(self, name: str) -> bool | None:
        if any(d.name == name for d in self.in_files("DeviceClass")):
            return True
        return None if self.device_classes is None else name in self.device_classes

    def named_in(self, kind: str, namespace: str, name: str, cluster: set[tuple[str, str]] | None) -> bool | None:
        if any(d.name == name and self.namespace_of(d) == namespace for d in self.in_files(kind)):
            return True
        return None if cluster is None else (namespace, name) in cluster

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        for d in self.in_files("Namespace"):
            if d.name == name:
                return d.metadata.get("labels") or {}
        if self.namespaces is None or name not in self.namespaces:
            return None
        return (self.namespaces[name].get("metadata") or {}).get("labels") or {}

    def drivers(self) -> list[str]:
        """Driver names the files and the cluster mention: the domains a fix can suggest."""
        found: list[str] = []
        classes = [d.body for d in self.in_files("DeviceClass")] + list((self.device_classes or {}).values())
        for c in classes:
            for s in (c.get("spec") or {}).get("selectors") or []:
                found += [m.group(2) for m in _DRIVER_LITERAL.finditer(str((s.get("cel") or {}).get("expression", "")))]
        found += [
            str((s.get("spec") or {}).get("driver")) for s in self.slices or [] if (s.get("spec") or {}).get("driver")
        ]
        found += [
            str((d.body.get("spec") or {}).get("driver"))
            for d in self.in_files("ResourceSlice")
            if (d.body.get("spec") or {}).get("driver")
        ]
        return list(dict.fromkeys(found))


def class_driver(device_class: Obj | None) -> str | None:
    """The driver a DeviceClass's selectors pin (``device.driver == "..."``), if one does."""
    for s in ((device_class or {}).get("spec") or {}).get("selectors") or []:
        m = _DRIVER_LITERAL.search(str((s.get("cel") or {}).get("expression", "")))
        if m:
            return m.group(2)
    return None


def _finding(rule: str, severity: str, doc: Document, path: str, message: str, fix: str) -> Finding:
    return Finding(rule, severity, doc.file, doc.line, doc.ref, path, message, fix)


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _is_resource(doc: Document) -> bool:
    return doc.api_version.split("/")[0] == RESOURCE_GROUP


def _version(doc: Document) -> str:
    return doc.api_version.rpartition("/")[2]


def claim_spec(doc: Document) -> tuple[Obj, str] | None:
    """A ResourceClaim's or ResourceClaimTemplate's claim spec and its field path."""
    if not _is_resource(doc):
        return None
    if doc.kind == "ResourceClaim":
        return (doc.body.get("spec") or {}), "spec"
    if doc.kind == "ResourceClaimTemplate":
        return (_get(doc.body, ("spec", "spec")) or {}), "spec.spec"
    return None


def requests_of(spec: Obj, prefix: str) -> Iterator[tuple[Obj, str, str]]:
    """Each request as it asks for devices: (the fields, their path, the request's name);
    a firstAvailable list gives its subrequests, a v1 request its ``exactly``."""
    for i, request in enumerate(_get(spec, ("devices", "requests")) or []):
        if not isinstance(request, dict):
            continue
        path = f"{prefix}.devices.requests[{i}]"
        name = str(request.get("name", i))
        if isinstance(request.get("exactly"), dict):
            yield request["exactly"], f"{path}.exactly", name
        elif request.get("firstAvailable"):
            for j, sub in enumerate(request["firstAvailable"]):
                if isinstance(sub, dict):
                    yield sub, f"{path}.firstAvailable[{j}]", f"{name}/{sub.get('name', j)}"
        else:
            yield request, path, name  # v1beta1 layout, or a mistake another rule reports


def pod_spec(doc: Document) -> tuple[Obj, str] | None:
    path = POD_TEMPLATE_PATHS.get(doc.kind)
    if path is None or (doc.kind == "Pod" and doc.api_version != "v1"):
        return None
    spec = _get(doc.body, path)
    return (spec, ".".join(path)) if isinstance(spec, dict) else None


def cel_expressions(doc: Document) -> Iterator[tuple[str, str, str | None]]:
    """(expression, field path, class name the selector works with) in a class or a claim."""
    if doc.kind == "DeviceClass" and _is_resource(doc):
        for i, s in enumerate(_get(doc.body, ("spec", "selectors")) or []):
            if isinstance(s, dict) and isinstance(s.get("cel"), dict):
                yield str(s["cel"].get("expression", "")), f"spec.selectors[{i}].cel.expression", doc.name
    found = claim_spec(doc)
    if found:
        spec, prefix = found
        for request, path, _ in requests_of(spec, prefix):
            for i, s in enumerate(request.get("selectors") or []):
                if isinstance(s, dict) and isinstance(s.get("cel"), dict):
                    yield (
                        str(s["cel"].get("expression", "")),
                        f"{path}.selectors[{i}].cel.expression",
                        request.get("deviceClassName"),
                    )


# -- the rules ---------------------------------------------------------------------------------


def served_version(doc: Document, ctx: Context) -> Iterable[Finding]:
    """resource.k8s.io versions the cluster (or 1.37) does not serve, and the kinds of the first design."""
    if not _is_resource(doc):
        return
    if doc.kind in REMOVED_KINDS:
        yield _finding(
            "removed-kind",
            ERROR,
            doc,
            "kind",
            f"{doc.kind} was removed with resource.k8s.io/v1alpha2 "
            "(Kubernetes 1.31) and no API server of 1.31 or later knows it",
            f"use {REMOVED_KINDS[doc.kind]}",
        )
        return
    served = ctx.served.get(RESOURCE_GROUP, []) if ctx.served is not None else list(KNOWN_VERSIONS)
    version = _version(doc)
    if version not in served:
        where = "this cluster serves" if ctx.served is not None else "Kubernetes 1.37 has"
        yield _finding(
            "served-version",
            ERROR,
            doc,
            "apiVersion",
            f"{doc.api_version} is not served: {where} {', '.join(served) or 'no resource.k8s.io API'}",
            "write apiVersion: resource.k8s.io/v1 (GA since 1.34) and the v1 field layout"
            if "v1" in served or ctx.served is None
            else f"use one of {', '.join(served)}",
        )


def removed_claim_fields(doc: Document, ctx: Context) -> Iterable[Finding]:
    """v1alpha2 claim fields (allocationMode: WaitForFirstConsumer, resourceClassName, parametersRef)."""
    found = claim_spec(doc)
    if not found:
        return
    spec, prefix = found
    for name, fix in REMOVED_CLAIM_FIELDS.items():
        if name in spec:
            value = f" ({spec[name]})" if isinstance(spec[name], str) else ""
            yield _finding(
                "removed-claim-field",
                ERROR,
                doc,
                f"{prefix}.{name}",
                f"{prefix}.{name}{value} belongs to resource.k8s.io/v1alpha2, removed in 1.31",
                fix,
            )


def request_layout(doc: Document, ctx: Context) -> Iterable[Finding]:
    """A v1 request written in the v1beta1 layout (deviceClassName directly on the request), and
    allocationMode values that are not ExactCount or All."""
    found = claim_spec(doc)
    if not found:
        return
    spec, prefix = found
    v1 = _version(doc) == "v1"
    for i, request in enumerate(_get(spec, ("devices", "requests")) or []):
        if not isinstance(request, dict):
            continue
        path = f"{prefix}.devices.requests[{i}]"
        flat = [k for k in EXACTLY_FIELDS if k in request]
        if v1 and flat:
            yield _finding(
                "v1-request-layout",
                ERROR,
                doc,
                f"{path}.{flat[0]}",
                f"resource.k8s.io/v1 has no {', '.join(flat)} directly on a request (that is the v1beta1 layout)",
                f"move {', '.join(flat)} under {path}.exactly (or list alternatives under firstAvailable)",
            )
        elif v1 and "exactly" not in request and "firstAvailable" not in request:
            yield _finding(
                "v1-request-layout",
                ERROR,
                doc,
                path,
                "a request needs `exactly` or `firstAvailable` (validation.go validateDeviceRequest)",
                f"add {path}.exactly.deviceClassName",
            )
    for request, path, _ in requests_of(spec, prefix):
        mode = request.get("allocationMode")
        if mode is not None and mode not in ALLOCATION_MODES:
            yield _finding(
                "allocation-mode",
                ERROR,
                doc,
                f"{path}.allocationMode",
                f"allocationMode {mode!r} is not a request's mode (ExactCount or All)"
                + (
                    "; WaitForFirstConsumer/Immediate were the whole claim's allocation timing in v1alpha2"
                    if mode in ("WaitForFirstConsumer", "Immediate")
                    else ""
                ),
                "remove it (ExactCount with count 1 is the default) or write allocationMode: All",
            )
        if mode == "All" and "count" in request:
            yield _finding(
                "allocation-mode",
                ERROR,
                doc,
                f"{path}.count",
                "count is only for allocationMode ExactCount",
                "remove count: All takes every matching device",
            )


def slice_layout(doc: Document, ctx: Context) -> Iterable[Finding]:
    """sharedCounters and devices in one ResourceSlice (1.35 and later reject it: validation.go
    validateResourceSliceSpec; 1.34 wants exactly that, and its server's dry run says so
    otherwise), and a v1 device still wrapped in v1beta1's ``basic``."""
    if doc.kind != "ResourceSlice" or not _is_resource(doc):
        return
    spec = doc.body.get("spec") or {}
    newer = ctx.minor is None or ctx.minor >= 35
    if newer and spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        pool = (spec.get("pool") or {}).get("name", "POOL")
        yield _finding(
            "slice-counters-with-devices",
            ERROR,
            doc,
            "spec.sharedCounters",
            "only one of `sharedCounters` or `devices` is allowed in a ResourceSlice (kube-apiserver 1.35 and later, "
            "validation.go validateResourceSliceSpec)",
            f"publish the counters in a ResourceSlice of their own in the same pool ({pool}) and "
            "raise pool.resourceSliceCount in both slices to count it",
        )
    if _version(doc) != "v1beta1":
        for i, device in enumerate(spec.get("devices") or []):
            if isinstance(device, dict) and "basic" in device:
                yield _finding(
                    "device-layout",
                    ERROR,
                    doc,
                    f"spec.devices[{i}].basic",
                    f"{doc.api_version} has no `basic`: that wrapper is v1beta1's",
                    f"move the fields of spec.devices[{i}].basic onto the device itself",
                )


def constraint_attributes(doc: Document, ctx: Context) -> Iterable[Finding]:
    """matchAttribute/distinctAttribute must be domain/name (validation.go validateFullyQualifiedName)."""
    found = claim_spec(doc)
    if not found:
        return
    spec, prefix = found
    for i, constraint in enumerate(_get(spec, ("devices", "constraints")) or []):
        for key in ("matchAttribute", "distinctAttribute"):
            value = (constraint or {}).get(key)
            if isinstance(value, str) and "/" not in value:
                domain = _domain_for(spec, prefix, ctx)
                yield _finding(
                    "unqualified-attribute",
                    ERROR,
                    doc,
                    f"{prefix}.devices.constraints[{i}].{key}",
                    f"{key} {value!r} has no domain: a fully qualified name must be a domain and a name "
                    "separated by a slash",
                    f"write {key}: {domain}/{value}",
                )


def _domain_for(spec: Obj, prefix: str, ctx: Context) -> str:
    for request, _, _ in requests_of(spec, prefix):
        driver = class_driver(ctx.device_class(str(request.get("deviceClassName", ""))))
        if driver:
            return driver
    drivers = ctx.drivers()
    return drivers[0] if len(drivers) == 1 else "<driver domain, e.g. gpu.nvidia.com>"


def cel_attributes(doc: Document, ctx: Context) -> Iterable[Finding]:
    """CEL that looks attributes up without their domain, or reads them as typed wrappers:
    ``device.attributes`` maps a domain to that domain's attributes, already typed values."""
    for expression, path, class_name in cel_expressions(doc):
        driver = class_driver(ctx.device_class(str(class_name or ""))) or (
            ctx.drivers()[0] if len(ctx.drivers()) == 1 else "DOMAIN"
        )
        for m in _CEL_KEY.finditer(expression):
            kind, key = m.group(1), m.group(3)
            if "/" in key:
                domain, _, name = key.partition("/")
                yield _finding(
                    "cel-attribute-domain",
                    ERROR,
                    doc,
                    path,
                    f"device.{kind}[{key!r}] looks a fully qualified name up as a domain: the map's keys are domains",
                    f"write device.{kind}['{domain}'].{name}",
                )
            elif "." not in key:
                yield _finding(
                    "cel-attribute-domain",
                    ERROR,
                    doc,
                    path,
                    f"device.{kind}[{key!r}]: {key!r} is not a domain, so the lookup finds nothing "
                    f"(device.{kind} is keyed by the attributes' domain, the driver name for unqualified ones)",
                    f"write device.{kind}['{driver}'].{key}",
                )
        for m in _CEL_DOT.finditer(expression):
            yield _finding(
                "cel-attribute-domain",
                ERROR,
                doc,
                path,
                f"device.{m.group(1)}.{m.group(2)} has no domain: device.{m.group(1)} is keyed by domain",
                f"write device.{m.group(1)}['{driver}'].{m.group(2)}",
            )
        for m in _CEL_TYPED.finditer(expression):
            yield _finding(
                "cel-typed-accessor",
                ERROR,
                doc,
                path,
                f"'.{m.group(2)}' after an attribute: CEL sees the attribute's value itself (a string, int, "
                "bool or semver), not the YAML wrapper {string: ...}",
                f"drop '.{m.group(2)}': {m.group(0)[: m.start(2) - m.start(0)].rstrip().rstrip('.')}",
            )


def pod_claims(doc: Document, ctx: Context) -> Iterable[Finding]:
    """Pod (and Pod template) claim references: resourceClaimTemplates is not a Pod field, the
    1.26-1.30 ``source`` wrapper is gone, containers name declared claims, the template or claim
    exists (in the files or the cluster), one shared claim for every replica is a warning."""
    found = pod_spec(doc)
    if not found:
        return
    spec, prefix = found
    namespace = ctx.namespace_of(doc)
    if "resourceClaimTemplates" in spec:
        yield _finding(
            "claim-templates-in-pod",
            ERROR,
            doc,
            f"{prefix}.resourceClaimTemplates",
            "a Pod spec has no resourceClaimTemplates field (it is dropped, or rejected by strict validation)",
            "create a ResourceClaimTemplate object of its own in the namespace and reference it from "
            f"{prefix}.resourceClaims[].resourceClaimTemplateName",
        )
    declared = set()
    for i, claim in enumerate(spec.get("resourceClaims") or []):
        if not isinstance(claim, dict):
            continue
        path = f"{prefix}.resourceClaims[{i}]"
        declared.add(claim.get("name"))
        source = claim.get("source")
        if isinstance(source, dict):
            key = "resourceClaimTemplateName" if "resourceClaimTemplateName" in source else "resourceClaimName"
            yield _finding(
                "claim-source",
                ERROR,
                doc,
                f"{path}.source",
                "resourceClaims[].source was removed in 1.31",
                f"write {key}: {source.get(key, 'NAME')} directly on {path}",
            )
        if template := claim.get("resourceClaimTemplateName"):
            if ctx.named_in("ResourceClaimTemplate", namespace, template, ctx.templates) is False:
                yield _finding(
                    "missing-template",
                    ERROR,
                    doc,
                    f"{path}.resourceClaimTemplateName",
                    f"ResourceClaimTemplate {template!r} is neither in these files nor in namespace {namespace}: "
                    "the Pod stays Pending",
                    f"create ResourceClaimTemplate {template} in namespace {namespace} (or fix the name)",
                )
        if name := claim.get("resourceClaimName"):
            if ctx.named_in("ResourceClaim", namespace, name, ctx.claims) is False:
                yield _finding(
                    "missing-claim",
                    WARNING,
                    doc,
                    f"{path}.resourceClaimName",
                    f"ResourceClaim {name!r} is neither in these files nor in namespace {namespace}: "
                    "the Pod waits for it",
                    f"create ResourceClaim {name} in namespace {namespace}, or use resourceClaimTemplateName "
                    "for a claim per Pod",
                )
            replicas = _get(doc.body, ("spec", "replicas"))
            if (
                doc.kind in ("Deployment", "ReplicaSet", "StatefulSet")
                and (replicas is None or replicas > 1)
                or doc.kind == "DaemonSet"
            ):
                yield _finding(
                    "shared-claim-in-workload",
                    WARNING,
                    doc,
                    f"{path}.resourceClaimName",
                    f"every replica of this {doc.kind} shares ResourceClaim {name!r} (same devices, same node)",
                    "use resourceClaimTemplateName for one claim (and device) per replica",
                )
    for c_kind in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(c_kind) or []):
            for j, ref in enumerate(_get(container, ("resources", "claims")) or []):
                if isinstance(ref, dict) and ref.get("name") not in declared:
                    yield _finding(
                        "undeclared-claim",
                        ERROR,
                        doc,
                        f"{prefix}.{c_kind}[{i}].resources.claims[{j}].name",
                        f"claim {ref.get('name')!r} is not in {prefix}.resourceClaims",
                        f"add {{name: {ref.get('name')}, resourceClaimTemplateName: ...}} to {prefix}.resourceClaims",
                    )


def device_classes_exist(doc: Document, ctx: Context) -> Iterable[Finding]:
    """A request's (or subrequest's) deviceClassName that names no DeviceClass in the files or on the cluster."""
    found = claim_spec(doc)
    if not found:
        return
    spec, prefix = found
    for request, path, _ in requests_of(spec, prefix):
        name = request.get("deviceClassName")
        if name and ctx.class_known(str(name)) is False:
            known = sorted((ctx.device_classes or {}).keys())
            yield _finding(
                "missing-device-class",
                ERROR,
                doc,
                f"{path}.deviceClassName",
                f"DeviceClass {name!r} is neither in these files nor on the cluster",
                f"use one of {', '.join(known)}" if known else "create the DeviceClass (config/deviceclasses)",
            )


def admin_access_namespace(doc: Document, ctx: Context) -> Iterable[Finding]:
    """adminAccess needs the namespace label (resourceclaim strategy: authorizedForAdmin)."""
    found = claim_spec(doc)
    if not found:
        return
    spec, prefix = found
    namespace = ctx.namespace_of(doc)
    for request, path, _ in requests_of(spec, prefix):
        if request.get("adminAccess") is True:
            labels = ctx.namespace_labels(namespace)
            if labels is not None and labels.get(ADMIN_LABEL) != "true":
                yield _finding(
                    "admin-access-namespace",
                    ERROR,
                    doc,
                    f"{path}.adminAccess",
                    f'adminAccess is only allowed in namespaces labelled {ADMIN_LABEL}="true"; {namespace} is not',
                    f"kubectl label namespace {namespace} {ADMIN_LABEL}=true (a cluster admin's decision)",
                )


def selectors_match(doc: Document, ctx: Context) -> Iterable[Finding]:
    """A request whose class and own selectors select none of the devices the cluster publishes
    (ResourceSlices in the files count too): it can never be allocated as things are. In a
    firstAvailable list only when no alternative selects any (a first choice that is not there
    is what the list is for)."""
    found = claim_spec(doc)
    if not found or ctx.slices is None:
        return
    spec, prefix = found
    devices = [
        (str((s.get("spec") or {}).get("driver", "")), d)
        for s in ctx.slices + [x.body for x in ctx.in_files("ResourceSlice")]
        for d in (s.get("spec") or {}).get("devices") or []
    ]
    groups: dict[str, list[Finding] | None] = {}  # request -> its problems; None: an alternative can match
    for request, path, name in requests_of(spec, prefix):
        group = name.split("/")[0]
        problems = list(_selector_problems(doc, request, path, devices, ctx))
        if not problems:
            groups[group] = None
        elif (group_so_far := groups.setdefault(group, [])) is not None:
            group_so_far += problems
    for group_problems in groups.values():
        yield from group_problems or []


def _selector_problems(
    doc: Document, request: Obj, path: str, devices: list[tuple[str, Obj]], ctx: Context
) -> Iterator[Finding]:
    device_class = ctx.device_class(str(request.get("deviceClassName", "")))
    if device_class is None:
        return  # missing-device-class says it
    class_cel = [
        s["cel"]["expression"] for s in (device_class.get("spec") or {}).get("selectors") or [] if s.get("cel")
    ]
    own = [(i, s["cel"]["expression"]) for i, s in enumerate(request.get("selectors") or []) if s.get("cel")]
    try:
        of_class = [(drv, d) for drv, d in devices if all(matches(e, drv, d) for e in class_cel)]
    except SelectorError:
        return  # a class the cluster cannot evaluate either; the dry run or kube-scheduler says why
    if not of_class:
        yield _finding(
            "selector-never-matches",
            WARNING,
            doc,
            f"{path}.deviceClassName",
            f"DeviceClass {request.get('deviceClassName')!r} selects none of the {len(devices)} devices published now",
            "check that the driver's node agent runs, or pick another class",
        )
        return
    for i, expression in own:
        try:
            hits = [1 for drv, d in of_class if matches(expression, drv, d)]
        except SelectorError as e:
            yield _finding(
                "selector-never-matches",
                ERROR,
                doc,
                f"{path}.selectors[{i}].cel.expression",
                f"the selector fails on the class's devices: {e}",
                "compare it with the devices' attributes: kubectl get resourceslices -o yaml",
            )
            continue
        if not hits:
            names = sorted({k for _, d in of_class for k in (d.get("attributes") or {})})
            yield _finding(
                "selector-never-matches",
                WARNING,
                doc,
                f"{path}.selectors[{i}].cel.expression",
                f"selects none of the {len(of_class)} devices of class {request.get('deviceClassName')!r} "
                "published now",
                f"their attributes are {', '.join(names)}; check names and values",
            )


RULES: dict[str, Callable[[Document, Context], Iterable[Finding]]] = {
    "served-version": served_version,
    "removed-claim-field": removed_claim_fields,
    "request-layout": request_layout,
    "slice-layout": slice_layout,
    "unqualified-attribute": constraint_attributes,
    "cel-attribute": cel_attributes,
    "pod-claims": pod_claims,
    "missing-device-class": device_classes_exist,
    "admin-access-namespace": admin_access_namespace,
    "selector-never-matches": selectors_match,
}


def check(ctx: Context) -> list[Finding]:
    """Every rule over every document, in file order."""
    return [f for doc in ctx.documents for rule in RULES.values() for f in rule(doc, ctx)]
