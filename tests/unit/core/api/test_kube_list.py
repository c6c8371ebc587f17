"""``Kube.list_with_version`` against a paging HTTP server on loopback: only what ``keep`` accepts
is collected, the list's resourceVersion is its first page's, and a continue token that expired
restarts the list from its first page (the lab test test_startup_memory measures the memory)."""

import pytest
from aiohttp import web

from operators.core.api.kube import ApiError, Kube, RetryPolicy
from operators.core.api.resources import PODS


def pod(i: int, claims: bool) -> dict:
    spec = {"resourceClaims": [{"name": "gpu", "resourceClaimName": f"c{i}"}]} if claims else {}
    return {"metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"}, "spec": spec}


@pytest.fixture
async def server():
    """Pages of ``limit`` Pods; every tenth uses a claim. ``expire``: continue tokens that answer 410
    once. Each list's first page names the resourceVersion it was listed at (one more per list)."""
    state = {"pods": [pod(i, i % 10 == 0) for i in range(95)], "expire": set(), "pages": [], "lists": 0}

    async def handle(request: web.Request) -> web.Response:
        limit, token = int(request.query["limit"]), request.query.get("continue", "")
        state["pages"].append(token)
        if token in state["expire"]:
            state["expire"].discard(token)
            return web.json_response({"kind": "Status", "reason": "Expired", "message": "too old"}, status=410)
        if not token:
            state["lists"] += 1
        version, start = (str(100 + state["lists"]), 0) if not token else token.split(":")
        start = int(start)
        end = start + limit
        meta = {"resourceVersion": version, **({"continue": f"{version}:{end}"} if end < len(state["pods"]) else {})}
        return web.json_response({"kind": "PodList", "metadata": meta, "items": state["pods"][start:end]})

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    kube = Kube.for_host(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=1))
    yield kube, state
    await kube.close()
    await runner.cleanup()


def uses_claims(obj: dict) -> bool:
    return bool(obj["spec"].get("resourceClaims"))


async def test_only_kept_objects_are_collected_page_by_page(server):
    kube, state = server
    items, version = await kube.list_with_version(PODS, limit=20, keep=uses_claims)
    assert [i["metadata"]["name"] for i in items] == [f"p{i}" for i in range(0, 95, 10)]
    assert version == "101" and len(state["pages"]) == 5
    everything, _ = await kube.list_with_version(PODS, limit=20)
    assert len(everything) == 95


async def test_an_expired_continue_token_restarts_the_list_at_a_new_resource_version(server):
    kube, state = server
    state["expire"] = {"101:40"}
    items, version = await kube.list_with_version(PODS, limit=20, keep=uses_claims)
    # The broken attempt's two pages are not kept twice; the list is the second one's.
    assert [i["metadata"]["name"] for i in items] == [f"p{i}" for i in range(0, 95, 10)]
    assert version == "102" and state["pages"] == ["", "101:20", "101:40", "", "102:20", "102:40", "102:60", "102:80"]


async def test_a_list_that_keeps_expiring_gives_up_with_the_410(server):
    kube, state = server
    state["expire"] = {"101:20", "102:20", "103:20"}
    with pytest.raises(ApiError) as raised:
        await kube.list_with_version(PODS, limit=20, keep=uses_claims)
    assert raised.value.status == 410


async def test_pages_are_decoded_with_the_cyclic_collector_paused(server):
    import gc

    kube, _ = server
    collector_on = set()
    await kube.list_with_version(PODS, limit=20, keep=lambda obj: collector_on.add(gc.isenabled()) or True)
    assert collector_on == {False} and gc.isenabled()


async def test_each_kept_object_is_trimmed_as_its_page_comes(server):
    """What is collected is ``trim``'s result, made before the next page is asked for: the whole
    objects of a large list are never all held at once (at the envelope they were most of an
    operator's memory, which stayed with the process after start-up)."""
    kube, state = server
    trimmed_at: list[int] = []

    def trim(obj: dict) -> dict:
        trimmed_at.append(len(state["pages"]))
        return {"metadata": {"name": obj["metadata"]["name"]}}

    items, _ = await kube.list_with_version(PODS, limit=20, keep=uses_claims, trim=trim)
    assert items == [{"metadata": {"name": f"p{i}"}} for i in range(0, 95, 10)]
    assert trimmed_at == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]  # two claim Pods a page, trimmed on arrival
