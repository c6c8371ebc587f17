"""The permissions the binding operator needs, built for the drivers it serves.

- read and watch ResourceClaims; patch them for the preparation records (annotations);
- patch ``resourceclaims/status`` to write ``status.devices[]`` conditions, and, since 1.36
  (DRAResourceClaimGranularStatusAuthorization), the synthetic ``resourceclaims/driver``
  subresource with the ``arbitrary-node:`` verbs, resourceNames = the served drivers (a
  controller is not associated with the node of the allocation, so ``associated-node:`` does
  not apply);
- DeviceTaintRules for the cool-off taints (list at start-up, apply, get, delete);
- kube-apiserver's ``/metrics`` at start-up: is DRADeviceBindingConditions on;
- Events; and Leases in its own namespace for leader election.

``python -m operators.binding.rbac --drivers fabric-gpu.example.com --namespace dra-operators``
prints the ServiceAccount, ClusterRole, ClusterRoleBinding, Role and RoleBinding as YAML. The
names follow the kustomize base (``dra-operators:<operator>``, ServiceAccount ``dra-<operator>``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from .decisions import DriverFilter

NAME = "dra-operators:binding"
SERVICE_ACCOUNT = "dra-binding"
LEADER_ELECTION = "dra-operators:binding-leader-election"
LEASE = "dra-operators-binding"  # the Lease the operator elects its leader on (operator.py)


def rules(drivers: DriverFilter) -> list[dict[str, Any]]:
    names = drivers.exact_names
    driver_rule: dict[str, Any] = {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/driver"],
        "verbs": ["arbitrary-node:patch", "arbitrary-node:update"],
    }
    if names is not None:
        driver_rule["resourceNames"] = names  # patterns (or *) can only be granted for every driver
    return [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["get", "patch", "update"]},
        driver_rule,
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["devicetaintrules"],
            "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
        },
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
    ]


def cluster_role(drivers: DriverFilter, name: str = NAME) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": rules(drivers),
    }


def _subjects(service_account: str, namespace: str) -> list[dict[str, str]]:
    return [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]


def cluster_role_binding(service_account: str, namespace: str, name: str = NAME) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": _subjects(service_account, namespace),
    }


def leader_election_role(namespace: str, name: str = LEADER_ELECTION, lease: str = LEASE) -> dict[str, Any]:
    """Its own Lease only (``resourceNames``); create cannot be restricted by name in RBAC."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [lease],
                "verbs": ["get", "update"],
            },
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        ],
    }


def leader_election_role_binding(service_account: str, namespace: str, name: str = LEADER_ELECTION) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": _subjects(service_account, namespace),
    }


def manifests(drivers: DriverFilter, namespace: str, service_account: str = SERVICE_ACCOUNT) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": service_account, "namespace": namespace}},
        cluster_role(drivers),
        cluster_role_binding(service_account, namespace),
        leader_election_role(namespace),
        leader_election_role_binding(service_account, namespace),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m operators.binding.rbac", description=__doc__.split("\n\n")[0])
    parser.add_argument("--drivers", required=True, help="DRA_BINDING_DRIVERS of the deployment")
    parser.add_argument("--namespace", default="dra-operators", help="namespace the operator runs in")
    args = parser.parse_args(argv)
    yaml.safe_dump_all(manifests(DriverFilter.parse(args.drivers), args.namespace), sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
