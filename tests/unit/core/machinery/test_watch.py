"""The reflector over real HTTP: a scripted API server on loopback answers each request as the
case needs (watch streams, 410 Gone, broken connections, streamed initial events), and the
informer's cache must end as client-go's would. The same against a real kube-apiserver with a
compacted etcd and a cut network: tests/integration/test_chaos.py."""

import asyncio
import contextlib
import json

import pytest
from aiohttp import web

from operators.core.api.kube import Kube, RetryPolicy
from operators.core.api.resources import PODS
from operators.core.machinery import watch as watch_module
from operators.core.machinery.informer import Informer
from operators.core.machinery.store import Store
from operators.core.machinery.watch import Reflector


def pod(name, uid, rv, claims=True):
    obj = {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv)}}
    if claims:
        obj["spec"] = {"resourceClaims": [{"name": "gpu"}]}
    return obj


def event(kind, obj):
    return (json.dumps({"type": kind, "object": obj}, separators=(",", ":")) + "\n").encode()


def bookmark(rv, end=False):
    meta = {"resourceVersion": str(rv)}
    if end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return event("BOOKMARK", {"metadata": meta})


class Server:
    """Each request takes the next script entry: ("list", items, rv), ("watch", [lines], then)
    where then is "end" (the server closes the watch), "drop" (the connection breaks) or "hang",
    or ("status", code)."""

    def __init__(self):
        self.script: list = []
        self.requests: list[dict] = []
        self.done = asyncio.Event()
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(dict(request.query))
        if not self.script:
            self.done.set()
            await self.release.wait()
            return web.Response(status=503)
        what = self.script.pop(0)
        if what[0] == "list":
            return web.json_response(
                {"kind": "PodList", "metadata": {"resourceVersion": str(what[2])}, "items": what[1]}
            )
        if what[0] == "status":
            return web.json_response({"kind": "Status", "code": what[1], "reason": "Expired"}, status=what[1])
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        for line in what[1]:
            await response.write(line)
        if what[2] == "drop":
            await response.write(b'{"type":"MODIFIED","obj')  # torn mid-event
            request.transport.close()
        elif what[2] == "hang":
            await self.release.wait()
        return response


@pytest.fixture
async def api(monkeypatch):
    monkeypatch.setattr(watch_module, "backoff", lambda: iter([0.0] * 100))
    server = Server()
    app = web.Application()
    app.router.add_get("/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    kube = Kube.for_host(f"http://127.0.0.1:{port}", retry=RetryPolicy(attempts=1))
    yield server, kube
    server.release.set()
    await kube.close()
    await runner.cleanup()


async def run(server, kube, initial, *, watch_list=False, keep=None, keep_line=None):
    """Prime with ``initial`` at rv 10, run the reflector until the script is used up."""
    store = Store()
    calls = []

    def handler(obj, deleted):
        calls.append((obj["metadata"]["name"], deleted))
        store.delete(obj) if deleted else store.upsert(obj)

    informer = Informer(kube, PODS, store, handler, keep=keep, keep_line=keep_line)
    server.script.insert(0, ("list", initial, 10))
    await informer.prime()
    reflector = Reflector(kube, informer, watch_list=watch_list)
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(server.done.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return store, informer, calls


async def test_the_watch_starts_at_the_lists_version_and_resumes_from_the_last_one_heard(api):
    server, kube = api
    server.script = [
        ("watch", [event("ADDED", pod("b", "2", 11))], "end"),
        ("watch", [bookmark(20)], "end"),
        ("watch", [event("DELETED", pod("a", "1", 21))], "end"),
    ]
    store, informer, _ = await run(server, kube, [pod("a", "1", 5)])
    watches = [r for r in server.requests if r.get("watch")]
    assert [w["resourceVersion"] for w in watches[:3]] == ["10", "11", "20"]
    assert all(w["allowWatchBookmarks"] == "true" and 300 <= int(w["timeoutSeconds"]) < 600 for w in watches)
    assert store.keys() == ["ns/b"] and informer.bookmarks == 1 and informer.relists == 0
    assert watches[3]["resourceVersion"] == "21"


async def test_a_broken_connection_resumes_from_the_same_version_without_a_relist(api):
    server, kube = api
    server.script = [
        ("watch", [event("ADDED", pod("b", "2", 11))], "drop"),
        ("watch", [event("ADDED", pod("c", "3", 12))], "end"),
    ]
    store, informer, _ = await run(server, kube, [])
    watches = [r for r in server.requests if r.get("watch")]
    assert [w["resourceVersion"] for w in watches[:3]] == ["10", "11", "12"]
    assert store.keys() == ["ns/b", "ns/c"] and informer.relists == 0


@pytest.mark.parametrize("gone", ["answer", "event"])
async def test_gone_relists_with_list_and_reports_what_was_deleted_meanwhile(api, gone):
    server, kube = api
    expired = ("status", 410) if gone == "answer" else ("watch", [event("ERROR", {"code": 410})], "hang")
    server.script = [
        ("watch", [], "end"),
        expired,
        ("list", [pod("a", "1", 30), pod("c", "3", 31)], 40),
        ("watch", [event("ADDED", pod("d", "4", 41))], "end"),
    ]
    store, informer, calls = await run(server, kube, [pod("a", "1", 5), pod("b", "2", 6)])
    assert store.keys() == ["ns/a", "ns/c", "ns/d"] and ("b", True) in calls
    assert informer.relists == 1 and informer.deletions_found == 1
    watches = [r for r in server.requests if r.get("watch")]
    assert watches[-2]["resourceVersion"] == "40"  # after the relist, from the list's version


async def test_a_streamed_relist_replaces_at_its_bookmark_and_the_same_request_goes_on(api):
    server, kube = api
    server.script = [
        ("status", 410),
        (
            "watch",
            [event("ADDED", pod("a", "1", 30)), bookmark(40, end=True), event("ADDED", pod("e", "5", 41))],
            "end",
        ),
        ("watch", [], "end"),
    ]
    store, informer, calls = await run(server, kube, [pod("a", "1", 5), pod("b", "2", 6)], watch_list=True)
    relist = server.requests[2]
    assert relist["sendInitialEvents"] == "true" and relist["resourceVersionMatch"] == "NotOlderThan"
    assert "resourceVersion" not in relist
    assert store.keys() == ["ns/a", "ns/e"] and ("b", True) in calls and informer.deletions_found == 1
    assert server.requests[3]["resourceVersion"] == "41"


async def test_a_streamed_relist_that_breaks_before_its_end_concludes_nothing(api):
    server, kube = api
    server.script = [
        ("status", 410),
        ("watch", [event("ADDED", pod("a", "1", 30))], "drop"),
        (
            "watch",
            [event("ADDED", pod("a", "1", 30)), event("ADDED", pod("b", "2", 31)), bookmark(40, end=True)],
            "end",
        ),
    ]
    store, informer, calls = await run(server, kube, [pod("a", "1", 5), pod("b", "2", 6)], watch_list=True)
    assert store.keys() == ["ns/a", "ns/b"] and not any(deleted for _, deleted in calls)
    assert informer.relists == 2 and informer.deletions_found == 0


async def test_a_server_refusing_streamed_initial_events_is_relisted_with_list(api):
    server, kube = api
    server.script = [("status", 410), ("status", 422), ("list", [], 40), ("watch", [], "end")]
    store, informer, _ = await run(server, kube, [pod("a", "1", 5)], watch_list=True)
    assert len(store) == 0 and informer.deletions_found == 1


async def test_lines_nobody_keeps_are_not_parsed_but_advance_the_version(api):
    server, kube = api
    uses = lambda obj: bool((obj.get("spec") or {}).get("resourceClaims"))  # noqa: E731
    line = lambda raw: b"resourceClaims" in raw  # noqa: E731
    server.script = [
        ("watch", [event("ADDED", pod("plain", "9", 11, claims=False)), event("ADDED", pod("b", "2", 12))], "end"),
        ("watch", [event("MODIFIED", pod("plain", "9", 13, claims=False))], "end"),
    ]
    store, informer, _ = await run(server, kube, [], keep=uses, keep_line=line)
    watches = [r for r in server.requests if r.get("watch")]
    assert [w["resourceVersion"] for w in watches[:3]] == ["10", "12", "13"]
    assert store.keys() == ["ns/b"] and informer.lines_skipped == 2


async def test_a_cached_object_whose_line_is_skipped_in_a_streamed_relist_stays(api):
    """keep_line may refuse a line of an object already cached (kept when it changed to one keep
    refuses): its key still counts as listed."""
    server, kube = api
    uses = lambda obj: bool((obj.get("spec") or {}).get("resourceClaims"))  # noqa: E731
    line = lambda raw: b"resourceClaims" in raw  # noqa: E731
    server.script = [
        ("status", 410),
        ("watch", [event("ADDED", pod("a", "1", 30, claims=False)), bookmark(40, end=True)], "end"),
    ]
    store, informer, _ = await run(server, kube, [pod("a", "1", 5)], watch_list=True, keep=uses, keep_line=line)
    assert store.keys() == ["ns/a"] and informer.deletions_found == 0


# -- list_streamed (kubectl dra devices' Pods) -------------------------------------------------


async def test_list_streamed_keeps_what_it_wants_and_never_parses_the_other_lines(api, monkeypatch):
    server, kube = api
    plain = event("ADDED", pod("plain", "2", 12, claims=False))
    server.script = [
        ("watch", [event("ADDED", pod("a", "1", 11)), plain, bookmark(15, end=True)], "hang"),
    ]
    parsed = []
    real_decode = watch_module._decode
    monkeypatch.setattr(watch_module, "_decode", lambda line: parsed.append(line) or real_decode(line))
    items, version = await watch_module.list_streamed(
        kube, PODS, "ns", keep=lambda obj: "spec" in obj, keep_line=lambda line: b'"resourceClaims"' in line
    )
    assert [i["metadata"]["name"] for i in items] == ["a"] and version == "15"
    assert plain not in parsed  # refused by its line: never decoded
    request = server.requests[0]
    assert request["sendInitialEvents"] == "true" and request["resourceVersionMatch"] == "NotOlderThan"


async def test_list_streamed_decodes_with_the_cyclic_collector_paused(api):
    import gc

    server, kube = api
    server.script = [("watch", [event("ADDED", pod("a", "1", 11)), bookmark(15, end=True)], "hang")]
    collector_on = []
    await watch_module.list_streamed(
        kube, PODS, keep=lambda obj: collector_on.append(gc.isenabled()) or True, keep_line=lambda line: True
    )
    assert collector_on == [False] and gc.isenabled()


async def test_list_streamed_falls_back_to_a_list_where_streaming_is_refused(api):
    server, kube = api
    server.script = [("status", 422), ("list", [pod("a", "1", 5), pod("p", "2", 6, claims=False)], 9)]
    items, version = await watch_module.list_streamed(
        kube, PODS, keep=lambda obj: "spec" in obj, keep_line=lambda line: True
    )
    assert [i["metadata"]["name"] for i in items] == ["a"] and version == "9"


@pytest.mark.parametrize(
    "failure",
    [("watch", [event("ADDED", pod("a", "1", 11))], "end"), ("watch", [], "drop"), ("status", 503)],
    ids=["ended-early", "cut", "503"],
)
async def test_list_streamed_that_fails_lists_instead(api, failure):
    server, kube = api
    server.script = [failure, ("list", [pod("a", "1", 5)], 9)]
    items, version = await watch_module.list_streamed(kube, PODS, keep=lambda obj: True, keep_line=lambda line: True)
    assert [i["metadata"]["name"] for i in items] == ["a"] and version == "9"


async def test_list_streamed_forbidden_is_an_error(api):
    server, kube = api
    server.script = [("status", 403)]
    with pytest.raises(watch_module.ApiError):
        await watch_module.list_streamed(kube, PODS, keep=lambda obj: True, keep_line=lambda line: True)


def line_filtered(kube, store):
    return Informer(
        kube,
        PODS,
        store,
        lambda obj, deleted: store.delete(obj) if deleted else store.upsert(obj),
        keep=lambda obj: "spec" in obj,
        keep_line=lambda line: b'"resourceClaims"' in line,
    )


@contextlib.asynccontextmanager
async def primed_by_its_reflector(kube, store):
    """A line-filtering informer whose reflector primes it (``run(listing_first=True)``),
    stopped at the end."""
    informer = line_filtered(kube, store)
    reflector = Reflector(kube, informer, watch_list=True)
    task = asyncio.create_task(reflector.run(listing_first=True))
    try:
        yield informer, reflector
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_informer_with_a_line_filter_primes_from_streamed_events_and_watches_on(api):
    """The snapshot as streamed initial events, then the same request goes on as the watch: a
    new watch from the snapshot's resourceVersion met 410 at the envelope (issue 32)."""
    server, kube = api
    server.script = [
        (
            "watch",
            [
                event("ADDED", pod("a", "1", 11)),
                event("ADDED", pod("p", "2", 12, claims=False)),
                bookmark(15, end=True),
                event("ADDED", pod("b", "3", 16)),
            ],
            "end",
        ),
        ("watch", [], "end"),
    ]
    store = Store()
    async with primed_by_its_reflector(kube, store) as (informer, reflector):
        await asyncio.wait_for(reflector.wait_synced(), 10)
        assert informer.primed and informer.list_version == "15" and "ns/a" in store.keys()
        await asyncio.wait_for(server.done.wait(), 10)
    assert store.keys() == ["ns/a", "ns/b"]
    first, then = server.requests[0], server.requests[1]
    assert first["sendInitialEvents"] == "true" and "resourceVersion" not in first
    assert then["resourceVersion"] == "16" and "sendInitialEvents" not in then
    assert informer.relists == 0 and informer.deletions_found == 0


async def test_a_first_listing_the_api_refuses_fails_the_start_up(api):
    server, kube = api
    server.script = [("status", 403)]
    async with primed_by_its_reflector(kube, Store()) as (_, reflector):
        with pytest.raises(watch_module.ApiError) as refused:
            await asyncio.wait_for(reflector.wait_synced(), 10)
    assert refused.value.status == 403


async def test_a_first_listing_without_streamed_events_lists_and_is_synced(api):
    server, kube = api
    server.script = [("status", 422), ("list", [pod("a", "1", 11)], 20), ("watch", [], "end")]
    store = Store()
    async with primed_by_its_reflector(kube, store) as (informer, reflector):
        await asyncio.wait_for(reflector.wait_synced(), 10)
        assert store.keys() == ["ns/a"] and informer.list_version == "20" and informer.relists == 0
        await asyncio.wait_for(server.done.wait(), 10)
    assert server.requests[2]["resourceVersion"] == "20"


@pytest.mark.parametrize("primed_by", ["list", "reflector"])
async def test_a_reflector_restarted_after_a_failure_resumes_where_it_got_to(api, primed_by):
    """The supervisor calls ``run`` again after a failure (here a handler's): the watch goes on
    from the last version heard, the failed event again, never from the start's version (by
    then compacted away: 410 and a relist of every Pod)."""
    server, kube = api
    store, failures = Store(), []

    def handler(obj, deleted):
        if obj["metadata"]["name"] == "boom" and not failures:
            failures.append(obj)
            raise RuntimeError("a handler's bug")
        store.delete(obj) if deleted else store.upsert(obj)

    informer = Informer(
        kube, PODS, store, handler, keep=lambda obj: "spec" in obj, keep_line=lambda line: b'"resourceClaims"' in line
    )
    changes = [event("ADDED", pod("b", "2", 16)), bookmark(20), event("ADDED", pod("boom", "3", 21))]
    if primed_by == "list":
        server.script = [("list", [pod("a", "1", 11)], 15), ("watch", changes, "hang")]
        await informer.prime()
    else:
        server.script = [("watch", [event("ADDED", pod("a", "1", 11)), bookmark(15, end=True), *changes], "hang")]
    reflector = Reflector(kube, informer, watch_list=True)
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(reflector.run(listing_first=primed_by == "reflector"), 10)
    server.script = [("watch", [event("ADDED", pod("boom", "3", 21))], "end")]  # the same event again
    again = asyncio.create_task(reflector.run(listing_first=primed_by == "reflector"))
    try:
        await asyncio.wait_for(server.done.wait(), 10)
    finally:
        again.cancel()
        await asyncio.gather(again, return_exceptions=True)
    resumed = [r for r in server.requests if r.get("watch")][-2]
    assert resumed["resourceVersion"] == "20" and "sendInitialEvents" not in resumed
    assert store.keys() == ["ns/a", "ns/b", "ns/boom"] and informer.relists == 0
