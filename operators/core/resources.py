"""The Kubernetes resources the suite reads and writes, as plain path descriptors.

The suite works on plain dicts, never typed models: kubernetes-asyncio's models drop fields they
do not know, and DRA adds fields every release.
"""

from __future__ import annotations

from dataclasses import dataclass


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
        prefix = "/api/" if "/" not in self.group_version else "/apis/"
        parts = [prefix.rstrip("/") + "/" + self.group_version]
        if self.namespaced and namespace:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    def with_version(self, version: str) -> "Resource":
        group = self.group
        return Resource(f"{group}/{version}" if group else version, self.plural, self.namespaced)


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
RESOURCE_POOL_STATUS_REQUESTS = Resource("resource.k8s.io/v1alpha3", "resourcepoolstatusrequests", False)
