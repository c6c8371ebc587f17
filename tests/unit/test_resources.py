from operators.core.resources import DEVICE_TAINT_RULES, NODES, PODS, RESOURCE_CLAIMS


def test_core_paths():
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert NODES.path(name="n") == "/api/v1/nodes/n"


def test_group_paths_and_versions():
    assert RESOURCE_CLAIMS.path("ns", "c") == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"
    assert RESOURCE_CLAIMS.path() == "/apis/resource.k8s.io/v1/resourceclaims"
    rule = DEVICE_TAINT_RULES.with_version("v1alpha3")
    assert rule.path(name="r") == "/apis/resource.k8s.io/v1alpha3/devicetaintrules/r"
    assert (rule.group, rule.version) == ("resource.k8s.io", "v1alpha3")
