import yaml

from operators.binding import rbac
from operators.binding.decisions import DriverFilter


def test_printed_manifests(capsys):
    rbac.main(["--drivers", "fabric-gpu.example.com", "--namespace", "ops"])
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]
    assert docs == rbac.manifests(DriverFilter.parse("fabric-gpu.example.com"), "ops")
    sa, role, binding, lease_role, lease_binding = docs
    assert sa["metadata"] == {"name": "dra-binding", "namespace": "ops"}
    assert (
        binding["subjects"]
        == lease_binding["subjects"]
        == [{"kind": "ServiceAccount", "name": "dra-binding", "namespace": "ops"}]
    )
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == "dra-operators:binding"
    assert lease_role["metadata"]["namespace"] == "ops"
    assert lease_role["rules"][0]["resources"] == ["leases"]
    status = next(r for r in role["rules"] if r.get("resources") == ["resourceclaims/status"])
    assert "patch" in status["verbs"]


def test_driver_subresource_is_limited_to_served_drivers_when_it_can_be():
    def driver_rule(text):
        return next(r for r in rbac.rules(DriverFilter.parse(text)) if r.get("resources") == ["resourceclaims/driver"])

    assert driver_rule("b.io,a.io") == {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceclaims/driver"],
        "verbs": ["arbitrary-node:patch", "arbitrary-node:update"],
        "resourceNames": ["a.io", "b.io"],
    }
    assert "resourceNames" not in driver_rule("*.fabric.io")
