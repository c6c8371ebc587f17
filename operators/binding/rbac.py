"""The permissions the binding operator needs, as a ClusterRole built for the served drivers.

- read and watch ResourceClaims; patch them for the preparation records (annotations);
- patch ``resourceclaims/status`` to write ``status.devices[]`` conditions, and, since 1.36
  (DRAResourceClaimGranularStatusAuthorization), the synthetic ``resourceclaims/driver``
  subresource with the ``arbitrary-node:`` verbs for each served driver (a controller is not
  associated with the node of the allocation; resourceNames are the driver names);
- DeviceTaintRules for the cool-off taints (list at start-up, apply, get, delete);
- Events.

``config/examples/binding-conditions/rbac.yaml`` is this output for the example driver; a unit
test keeps the two equal.
"""

from __future__ import annotations

from typing import Any

from .decisions import DriverFilter

NAME = "dra-operators-binding"


def rules(drivers: DriverFilter) -> list[dict[str, Any]]:
    names = drivers.exact_names
    driver_rule: dict[str, Any] = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
                                   "verbs": ["arbitrary-node:patch", "arbitrary-node:update"]}
    if names is not None:
        driver_rule["resourceNames"] = names  # patterns (or *) can only be granted for every driver
    return [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["get", "patch", "update"]},
        driver_rule,
        {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
         "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
    ]


def cluster_role(drivers: DriverFilter, name: str = NAME) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": name}, "rules": rules(drivers)}


def cluster_role_binding(service_account: str, namespace: str, name: str = NAME) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]}
