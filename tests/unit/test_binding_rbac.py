from pathlib import Path

import yaml

from operators.binding import rbac
from operators.binding.decisions import DriverFilter

EXAMPLE = Path(__file__).resolve().parents[2] / "config/examples/binding-conditions/rbac.yaml"


def test_example_rbac_is_what_the_module_builds():
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(EXAMPLE.read_text())}
    assert docs["ClusterRole"] == rbac.cluster_role(DriverFilter.parse("fabric-gpu.example.com"))
    assert docs["ClusterRoleBinding"] == rbac.cluster_role_binding(rbac.NAME, "dra-operators")


def test_driver_subresource_is_limited_to_served_drivers_when_it_can_be():
    def driver_rule(text):
        return next(r for r in rbac.rules(DriverFilter.parse(text)) if r["resources"] == ["resourceclaims/driver"])
    assert driver_rule("b.io,a.io") == {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/driver"],
                                         "verbs": ["arbitrary-node:patch", "arbitrary-node:update"],
                                         "resourceNames": ["a.io", "b.io"]}
    assert "resourceNames" not in driver_rule("*.fabric.io")
