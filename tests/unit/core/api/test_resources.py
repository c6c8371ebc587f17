import re

import pytest
from aiohttp import web

from operators.core.api.kube import APPLY_PATCH, Kube
from operators.core.api.resources import DEVICE_TAINT_RULES, NODES, PODS, RESOURCE_CLAIMS, InvalidPathSegment


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


def test_names_are_escaped_path_segments():
    """A name from a file (the lint's) stays one segment: ``#`` and ``?`` would end the path and
    drop the query that follows (``dryRun=All``)."""
    assert RESOURCE_CLAIMS.path("default", "x#") == "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/x%23"
    assert RESOURCE_CLAIMS.path("n s", "a?b") == "/apis/resource.k8s.io/v1/namespaces/n%20s/resourceclaims/a%3Fb"
    assert PODS.path("ns", "p&q=1", "status") == "/api/v1/namespaces/ns/pods/p%26q%3D1/status"


@pytest.mark.parametrize(
    "namespace,name,message",
    [
        ("ns", "..", "invalid name '..': may not be '..'"),
        ("ns", "a/b", "invalid name 'a/b': may not contain '/'"),
        ("a%2Fb", "n", "invalid namespace 'a%2Fb': may not contain '%'"),
        (".", "n", "invalid namespace '.'"),
    ],
)
def test_names_client_go_refuses_are_refused(namespace, name, message):
    with pytest.raises(InvalidPathSegment, match=re.escape(message)):
        PODS.path(namespace, name)


async def test_the_server_sees_the_name_and_the_query():
    """Through the client to an HTTP server: the name arrives whole and dryRun=All with it."""
    seen: list[tuple[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append((request.match_info["name"], request.query_string))
        return web.json_response({})

    app = web.Application()
    app.router.add_route("*", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    kube = Kube.with_token(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}", "t", None)
    try:
        for name in ("x#", "a?b", "c d"):
            await kube.request(
                "PATCH",
                RESOURCE_CLAIMS.path("default", name),
                body={},
                content_type=APPLY_PATCH,
                params=[("dryRun", "All")],
            )
    finally:
        await kube.close()
        await runner.cleanup()
    assert seen == [("x#", "dryRun=All"), ("a?b", "dryRun=All"), ("c d", "dryRun=All")]
