"""The API client against a misbehaving HTTP server on loopback: 429 with Retry-After, 5xx,
dropped connections, hangs and garbage, for idempotent and non-idempotent requests."""

import asyncio
import time

import pytest
from aiohttp import web

from operators.core.api.kube import APPLY_PATCH, JSON_PATCH, ApiError, ConnectionLost, Kube, RetryPolicy, should_retry


@pytest.fixture
async def server():
    """``script`` is a list of behaviours, one per request: an int status, "drop", "hang", "garbage"."""
    state = {"script": [], "calls": [], "bodies": []}
    release = asyncio.Event()  # ends hung and dropped handlers at teardown

    async def handle(request: web.Request) -> web.StreamResponse:
        state["calls"].append(request.method)
        state["bodies"].append(await request.read())
        what = state["script"].pop(0) if state["script"] else 200
        if what == "drop":
            request.transport.close()
            await release.wait()
        if what == "hang":
            await release.wait()
        if what == "garbage":
            return web.Response(status=200, text="<html>proxy error</html>")
        if what == 429:
            return web.json_response(
                {"kind": "Status", "reason": "TooManyRequests"}, status=429, headers={"Retry-After": "1"}
            )
        if isinstance(what, int) and what >= 400:
            return web.json_response({"kind": "Status", "reason": "InternalError", "message": "boom"}, status=what)
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    kube = Kube.for_host(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=4, initial=0.01, maximum=0.05))
    yield kube, state
    release.set()
    await kube.close()
    await runner.cleanup()


async def test_429_is_retried_after_retry_after_even_for_a_create(server):
    kube, state = server
    state["script"] = [429]
    started = time.monotonic()
    assert (await kube.request("POST", "/api/v1/namespaces/ns/pods", body={}))["kind"] == "Pod"
    assert state["calls"] == ["POST", "POST"] and time.monotonic() - started >= 0.9


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_is_retried_for_reads_and_idempotent_writes(server, status):
    kube, state = server
    for method, content_type in (
        ("GET", "application/json"),
        ("PUT", "application/json"),
        ("DELETE", "application/json"),
        ("PATCH", APPLY_PATCH),
    ):
        state["script"], state["calls"] = [status, status], []
        await kube.request(method, "/api/v1/namespaces/ns/pods/p", body={}, content_type=content_type)
        assert len(state["calls"]) == 3


async def test_5xx_on_a_create_or_json_patch_is_not_repeated(server):
    kube, state = server
    for method, content_type in (("POST", "application/json"), ("PATCH", JSON_PATCH)):
        state["script"], state["calls"] = [500], []
        with pytest.raises(ApiError) as e:
            await kube.request(method, "/api/v1/namespaces/ns/pods", body={}, content_type=content_type)
        assert e.value.status == 500 and len(state["calls"]) == 1


async def test_a_dropped_connection_is_retried_for_a_get_and_reported_for_a_create(server):
    kube, state = server
    state["script"] = ["drop"]
    assert (await kube.request("GET", "/api/v1/pods"))["kind"] == "Pod"
    state["script"], state["calls"] = ["drop"], []
    with pytest.raises(ConnectionLost):
        await kube.request("POST", "/api/v1/namespaces/ns/pods", body={})
    assert state["calls"] == ["POST"]


async def test_a_hung_request_times_out_as_connection_lost(server):
    kube, state = server
    state["script"] = ["hang"] * 4
    with pytest.raises(ConnectionLost):
        await kube.request("GET", "/api/v1/pods", timeout=0.2)


async def test_garbage_with_200_is_an_error_not_data(server):
    kube, state = server
    state["script"] = ["garbage"] * 4
    with pytest.raises(ApiError) as e:
        await kube.request("POST", "/api/v1/namespaces/ns/pods", body={})
    assert e.value.status == 502 and "not JSON" in e.value.message


async def test_errors_that_are_answers_are_never_retried(server):
    kube, state = server
    for status in (400, 403, 404, 409, 410, 422):
        state["script"], state["calls"] = [status], []
        with pytest.raises(ApiError):
            await kube.request("GET", "/api/v1/pods")
        assert len(state["calls"]) == 1


def test_should_retry_rules():
    assert should_retry(ApiError(429, {}), "POST", "application/json")
    assert not should_retry(ApiError(503, {}), "POST", "application/json")
    assert should_retry(ConnectionLost("PUT", "/", OSError()), "PUT", "application/json")
    assert not should_retry(ConnectionLost("PATCH", "/", OSError()), "PATCH", JSON_PATCH)
    assert not should_retry(KeyError("x"), "GET", "application/json")


async def test_a_client_side_limit_spaces_requests_after_the_burst(server):
    kube, state = server
    from operators.core.api.ratelimit import TokenBucket

    limited = Kube(
        kube.cluster, kube.retry, TokenBucket(20, 2), session=kube.session
    )  # DRA_API_QPS=20, DRA_API_BURST=2
    started = time.monotonic()
    await asyncio.gather(*(limited.request("GET", "/api/v1/pods") for _ in range(6)))
    assert len(state["calls"]) == 6 and time.monotonic() - started >= 4 / 20 - 0.01
    assert limited.without_retries().limiter is limited.limiter


async def test_the_session_trusts_the_environment_only_when_a_proxy_variable_is_set(monkeypatch):
    """Without a proxy variable there is nothing to find: an aiohttp session that trusts the
    environment reads ~/.netrc for every request (bench/RESULTS.md)."""
    from operators.core.api import kube as kube_module

    for name in kube_module.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    plain = Kube.for_host("http://127.0.0.1:1")
    assert not plain.session.trust_env
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    with_proxy = Kube.for_host("http://127.0.0.1:1")
    assert with_proxy.session.trust_env
    await plain.close()
    await with_proxy.close()


async def test_bodies_go_out_as_go_writes_json(server):
    """Compact, as Go's encoding/json: kubernetes-asyncio's json.dumps put spaces into raw-extension
    fields, which the API server then saw as changed."""
    kube, state = server
    body = {"metadata": {"name": "a", "labels": {"x": "y"}}, "spec": {"n": [1, 2.5, True, None]}}
    await kube.request("PUT", "/api/v1/namespaces/ns/pods/a", body=body)
    assert state["bodies"][-1] == b'{"metadata":{"name":"a","labels":{"x":"y"}},"spec":{"n":[1,2.5,true,null]}}'


@pytest.fixture
async def watch_server():
    """A watch that streams its initial events and the end-of-initial-events BOOKMARK, the
    marker split over two writes, then stays open (as kube-apiserver until timeoutSeconds)."""
    release = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n')
        await response.write(b'{"type":"BOOKMARK","object":{"metadata":{"annotations":{"k8s.io/initial-')
        await asyncio.sleep(0.05)
        await response.write(b'events-end":"true"},"resourceVersion":"7"}}}\n')
        await release.wait()  # open until the test ends
        return response

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    kube = Kube.for_host(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=1))
    yield kube
    release.set()
    await kube.close()
    await runner.cleanup()


async def test_stop_at_ends_a_watch_read_at_its_marker_instead_of_the_servers_timeout(watch_server):
    text = await asyncio.wait_for(
        watch_server.request(
            "GET",
            "/api/v1/pods",
            params=[("watch", "true")],
            raw=True,
            stop_at="k8s.io/initial-events-end",
            retry=False,
            timeout=3600,
        ),
        30,
    )
    assert '"name":"a"' in text and "k8s.io/initial-events-end" in text
    # Without the marker the read goes on until the server ends the watch (here: never).
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(watch_server.request("GET", "/api/v1/pods", raw=True, retry=False, timeout=3600), 1)


async def test_a_closed_write_gate_stops_a_write_between_its_attempts_and_leaves_reads(server):
    """A leader whose Lease may have passed on sends no more writes, even the retry of one it
    sent while it led; reads go on (a standby keeps its cache warm)."""
    from operators.core.api.kube import NotLeader

    kube, state = server
    open_ = iter([True])
    kube.write_gate = lambda: next(open_, False)
    state["script"] = [503]
    with pytest.raises(NotLeader):
        await kube.request("PUT", "/api/v1/namespaces/ns/pods/p", body={})
    assert state["calls"] == ["PUT"]
    with pytest.raises(NotLeader):
        await kube.request("POST", "/api/v1/namespaces/ns/pods", body={})
    assert (await kube.request("GET", "/api/v1/namespaces/ns/pods/p"))["kind"] == "Pod"
    assert state["calls"] == ["PUT", "GET"]
