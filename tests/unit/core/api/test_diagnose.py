import aiohttp
from aiohttp.client_reqrep import ConnectionKey

from operators.core.api.diagnose import kubeconfig_problem, start_failure
from operators.core.api.kube import ApiError, ConnectionLost

HOST = "https://127.0.0.1:1"


def refused() -> ConnectionLost:
    key = ConnectionKey("127.0.0.1", 1, True, True, None, None, None)
    cause = aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "Connect call failed"))
    return ConnectionLost("GET", "/apis/resource.k8s.io/v1/resourceclaims", cause)


def test_an_unreachable_api_server_is_named_with_what_to_check():
    message = start_failure("claims", refused(), HOST, "/tmp/kc")
    assert message.startswith("claims could not start: cannot reach the API server at https://127.0.0.1:1")
    assert "KUBECONFIG (/tmp/kc) names its address and port" in message
    assert "in-cluster ServiceAccount" in start_failure("claims", refused(), HOST, None)


def test_answers_that_are_not_from_an_api_server():
    garbage = ApiError(502, {"reason": "BadResponse", "message": "not JSON: 'hello'"}, "GET", "/api/v1/pods")
    assert "did not answer like a Kubernetes API server" in start_failure("taints", garbage, HOST, "/kc")
    page = ApiError(404, "<html>\n<body>404 page not found</body>\n</html>", "GET", "/api/v1/pods")
    message = start_failure("taints", page, HOST, "/kc")
    assert "did not answer like a Kubernetes API server" in message and "\n" not in message
    missing = ApiError(
        404,
        {"kind": "Status", "reason": "NotFound", "message": "the server could not find"},
        "GET",
        "/apis/resource.k8s.io/v1/resourceclaims",
    )
    assert "resource.k8s.io/v1 (DRA) enabled" in start_failure("claims", missing, HOST, "/kc")


def test_credentials_and_permissions():
    unauthorized = ApiError(401, {"kind": "Status", "reason": "Unauthorized", "message": "Unauthorized"})
    assert "does not accept our credentials" in start_failure("binding", unauthorized, HOST, "/kc")
    forbidden = ApiError(403, {"kind": "Status", "reason": "Forbidden", "message": "cannot list"})
    assert "grant the operator's RBAC" in start_failure("binding", forbidden, HOST, "/kc")


def test_other_failures_keep_their_type_and_message():
    assert (
        start_failure("nodeagent", ValueError("socket path too long"), None, None)
        == "nodeagent could not start: ValueError: socket path too long"
    )


def test_kubeconfig_problems():
    assert "no such file /nope" in kubeconfig_problem("/nope", OSError(), ["/nope"])
    assert "cannot be loaded: ValueError: bad" in kubeconfig_problem("/kc", ValueError("bad"))
    assert "KUBECONFIG is not set" in kubeconfig_problem(None, Exception("Service host/port is not set."))
