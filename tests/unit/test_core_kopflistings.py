"""The hook on kopf's private watch API: it must still be where kopf calls it, and pass the end of
every listing on to the resource's listeners."""

import inspect

from kopf._cogs.clients import watching
from kopf._core.reactor import queueing

from operators.core import kopflistings


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
