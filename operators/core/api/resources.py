"""The Kubernetes resources the suite reads and writes, as plain path descriptors.

The suite works on plain dicts, never typed models: kubernetes-asyncio's models drop fields they
do not know, and DRA adds fields every release.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote


@dataclass(frozen=True)
class Resource:
    group_version: str  # "v1" or "resource.k8s.io/v1"
    plural: str
    namespaced: bool

    @property
    def group(self) -> str:
        return self.group_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.group_version.rpartition("/")[2]

    def path(
        self,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        """The API path, each segment escaped: a name such as ``x#`` or ``a?b`` (from a file the
        lint reads) must stay a name, not end the path and drop the query (``dryRun=All``)."""
        prefix = "/api" if "/" not in self.group_version else "/apis"
        parts = [prefix, *(segment(p, "apiVersion") for p in self.group_version.split("/"))]
        if self.namespaced and namespace:
            parts += ["namespaces", segment(namespace, "namespace")]
        parts.append(segment(self.plural, "resource"))
        if name:
            parts.append(segment(name, "name"))
            if subresource:
                parts.append(segment(subresource, "subresource"))
        return "/".join(parts)

    def with_version(self, version: str) -> Resource:
        group = self.group
        return Resource(f"{group}/{version}" if group else version, self.plural, self.namespaced)


class InvalidPathSegment(ValueError):
    """A name that cannot be a segment of an API path, refused before any request; ``what`` is
    the part of the path (name, namespace, apiVersion, resource, subresource)."""

    def __init__(self, what: str, value: str, problem: str):
        self.what, self.value = what, value
        super().__init__(f"invalid {what} {value!r}: {problem}")


# k8s.io/client-go v0.37.1 rest/request.go IsValidPathSegmentName (NameMayNotBe, NameMayNotContain):
# client-go refuses these in a name, namespace, resource or subresource before it sends anything.
_MAY_NOT_BE = (".", "..")
_MAY_NOT_CONTAIN = ("/", "%")


def segment(value: str, what: str) -> str:
    """``value`` as one escaped path segment (every reserved character quoted), or
    InvalidPathSegment naming ``what`` and why, as client-go says it."""
    problems = [f"may not be '{value}'"] if value in _MAY_NOT_BE else []
    problems += [f"may not contain '{c}'" for c in _MAY_NOT_CONTAIN if c in value]
    if not value:
        problems.append("may not be empty")
    if problems:
        raise InvalidPathSegment(what, value, ", ".join(problems))
    return quote(value, safe="")


RESOURCE_GROUP = "resource.k8s.io"

NAMESPACES = Resource("v1", "namespaces", False)
NODES = Resource("v1", "nodes", False)
PODS = Resource("v1", "pods", True)
EVENTS = Resource("v1", "events", True)
SERVICE_ACCOUNTS = Resource("v1", "serviceaccounts", True)
LEASES = Resource("coordination.k8s.io/v1", "leases", True)
POD_DISRUPTION_BUDGETS = Resource("policy/v1", "poddisruptionbudgets", True)

DEVICE_CLASSES = Resource("resource.k8s.io/v1", "deviceclasses", False)
RESOURCE_CLAIMS = Resource("resource.k8s.io/v1", "resourceclaims", True)
RESOURCE_CLAIM_TEMPLATES = Resource("resource.k8s.io/v1", "resourceclaimtemplates", True)
RESOURCE_SLICES = Resource("resource.k8s.io/v1", "resourceslices", False)
# Served as v1 from 1.37, v1beta2/v1alpha3 before: discover the version (Kube.preferred_version).
DEVICE_TAINT_RULES = Resource("resource.k8s.io/v1", "devicetaintrules", False)
# Alpha (DRAResourcePoolStatus): served only as v1alpha3, and only when the API server enables it.
# PodGroups (KEP-5729): the version upstream's resourceclaim controller reads and writes in 1.37.
POD_GROUPS = Resource("scheduling.k8s.io/v1beta1", "podgroups", True)
RESOURCE_POOL_STATUS_REQUESTS = Resource("resource.k8s.io/v1alpha3", "resourcepoolstatusrequests", False)
