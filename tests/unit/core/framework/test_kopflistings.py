"""The hook on kopf's private watch API: it must still be where kopf calls it, and pass the end of
every listing on to the resource's listeners."""

import inspect

from kopf._cogs.clients import watching
from kopf._core.reactor import queueing

from operators.core.framework import kopflistings


def test_kopf_still_starts_its_watches_through_the_wrapped_name():
    assert hasattr(watching, "infinite_watch") and watching.Bookmark.LISTED
    assert "watching.infinite_watch(" in inspect.getsource(queueing.watcher)


class Res:
    group, plural = "resource.k8s.io", "resourceslices"


async def test_listeners_hear_the_end_of_each_listing_even_an_empty_one(monkeypatch):
    async def original(*, settings, resource, namespace, **_):
        yield watching.Bookmark.LISTED           # an empty listing
        yield {"type": "ADDED", "object": {}}
        yield watching.Bookmark.LISTED           # a relisting
    monkeypatch.setattr(kopflistings, "_original", original)
    heard, other = [], []
    undo = kopflistings.listen("resource.k8s.io", "resourceslices", lambda: heard.append(1))
    undo_other = kopflistings.listen("", "pods", lambda: other.append(1))
    try:
        assert watching.infinite_watch is kopflistings._infinite_watch
        events = [e async for e in watching.infinite_watch(settings=None, resource=Res(), namespace=None)]
        assert len(events) == 3 and heard == [1, 1] and other == []
    finally:
        undo()
        undo_other()


async def test_closing_the_wrapper_closes_kopfs_generator_at_once(monkeypatch):
    closed = []

    async def original(*, settings, resource, namespace, **_):
        try:
            while True:
                yield {"type": "ADDED", "object": {}}
        finally:
            closed.append(True)
    monkeypatch.setattr(kopflistings, "_original", original)
    stream = kopflistings._infinite_watch(settings=None, resource=Res(), namespace=None)
    await stream.__anext__()  # kopf's watcher holds an event when it is cancelled
    await stream.aclose()
    assert closed == [True]


async def test_consumers_get_the_events_and_kopf_only_the_rest(monkeypatch):
    async def original(*, settings, resource, namespace, **_):
        yield {"type": None, "object": {"n": 1}}
        yield watching.Bookmark.LISTED
        yield {"type": "ADDED", "object": {"n": 2}}
        yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}}
        yield {"type": "MODIFIED", "object": {"n": 3}}
    monkeypatch.setattr(kopflistings, "_original", original)
    got = []

    def consumer(event):
        got.append(event["object"]["n"])
        if event["object"]["n"] == 2:
            raise RuntimeError("a bad event")  # logged; the watch goes on

    undo = kopflistings.consume("resource.k8s.io", "resourceslices", consumer)
    try:
        events = [e async for e in watching.infinite_watch(settings=None, resource=Res(), namespace=None)]
    finally:
        undo()
    assert got == [1, 2, 3]
    assert events == [watching.Bookmark.LISTED, {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "5"}}}]
    events = [e async for e in watching.infinite_watch(settings=None, resource=Res(), namespace=None)]
    assert len(events) == 5  # no consumer left: kopf gets everything again


async def test_bookmarks_are_heard_with_their_version_and_still_reach_kopf(monkeypatch):
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "77",
                                                            "annotations": {"k8s.io/initial-events-end": "true"}}}}

    async def original(*, settings, resource, namespace, **_):
        yield watching.Bookmark.LISTED
        yield bookmark
        yield {"type": "BOOKMARK", "object": {"metadata": {}}}  # garbage: heard as 0, never an error
    monkeypatch.setattr(kopflistings, "_original", original)
    heard, other = [], []
    undo = kopflistings.listen_bookmarks("resource.k8s.io", "resourceslices", heard.append)
    undo_other = kopflistings.listen_bookmarks("", "pods", other.append)
    try:
        events = [e async for e in watching.infinite_watch(settings=None, resource=Res(), namespace=None)]
    finally:
        undo()
        undo_other()
    assert heard == [77, 0] and other == []
    assert events[1] is bookmark  # kopf keeps its resourceVersion for the next watch request


def test_kopf_still_reads_watch_lines_through_the_wrapped_name():
    from kopf._cogs.clients import api

    assert "iter_jsonlines(response.content)" in inspect.getsource(api.stream)


class Wants:
    def __init__(self, marker: bytes):
        self.marker, self.versions = marker, []

    def wants(self, line: bytes) -> bool:
        return self.marker in line

    def skipped(self, resource_version: int) -> None:
        self.versions.append(resource_version)


def _line(kind: str, name: str, rv: int, extra: str = "") -> bytes:
    return (f'{{"type":"{kind}","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}",'
            f'"resourceVersion":"{rv}","ownerReferences":[]}},"spec":{{{extra}}}}}}}').encode()


LINES = [_line("ADDED", "plain", 10), _line("MODIFIED", "dra", 11, '"resourceClaims":[{"name":"g"}]'),
         b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}',
         _line("DELETED", "plain", 13), b'{"type":"ERROR","object":{"code":410}}']


async def _read(monkeypatch, key, consumers):
    async def original(content, *args, **kwargs):
        for line in content:
            yield line
    monkeypatch.setattr(kopflistings, "_original_lines", original)
    undo = [kopflistings.consume(*key, lambda event: None, lines) for lines in consumers]
    token = kopflistings._watching.set(key)
    try:
        return [line async for line in kopflistings._iter_jsonlines(LINES)]
    finally:
        kopflistings._watching.reset(token)
        for u in undo:
            u()


async def test_lines_no_consumer_wants_are_dropped_before_parsing_with_their_versions_reported(monkeypatch):
    claims, taints = Wants(b'"resourceClaims"'), Wants(b'"resourceClaims"')
    kept = await _read(monkeypatch, ("", "pods"), [claims, taints])
    # Bookmarks and errors always pass; object events only when someone wants them.
    assert kept == [LINES[1], LINES[2], LINES[4]]
    assert claims.versions == taints.versions == [10, 13]


async def test_one_consumer_that_wants_every_line_keeps_them_all(monkeypatch):
    assert await _read(monkeypatch, ("", "pods"), [Wants(b"resourceClaims"), None]) == LINES
    assert await _read(monkeypatch, ("", "pods"), []) == LINES


async def test_another_resources_watch_is_not_filtered(monkeypatch):
    claims = Wants(b'"resourceClaims"')
    undo = kopflistings.consume("", "pods", lambda event: None, claims)
    try:
        assert await _read(monkeypatch, ("resource.k8s.io", "resourceclaims"), []) == LINES
    finally:
        undo()
    assert claims.versions == []


def test_the_pod_line_test_never_refuses_a_pod_the_informer_keeps():
    import json

    from operators.core.dra import resourceclaim as rc

    pods = [{"metadata": {"name": "a"}, "spec": {"containers": []}},
            {"metadata": {"name": "b"}, "spec": {"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}},
            {"metadata": {"name": "c"}, "spec": {}, "status": {"extendedResourceClaimStatus": {
                "resourceClaimName": "c-extended", "requestMappings": []}}}]
    for pod in pods:
        line = json.dumps({"type": "MODIFIED", "object": pod}, separators=(",", ":")).encode()
        assert rc.may_use_claims(line) == rc.uses_claims(pod), pod["metadata"]["name"]
