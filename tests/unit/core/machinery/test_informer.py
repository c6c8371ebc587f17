"""The informer's relist check, with a stand-in for the API server's reads (the lab tests show the
same against a real kube-apiserver with a compacted etcd)."""

import asyncio

import pytest

from operators.core.machinery.informer import MANY_SUSPECTS, Informer
from operators.core.api.kube import ApiError, ConnectionLost
from operators.core.api.resources import PODS
from operators.core.machinery.store import Store, key_of


def pod(name, uid, rv=1):
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv)}}


class Api:
    """What the API server holds now; counts reads and can fail the first ones."""

    def __init__(self, objects, failures=0):
        self.objects = {key_of(o): o for o in objects}
        self.gets = self.lists = 0
        self.failures = failures

    def _maybe_fail(self):
        if self.failures:
            self.failures -= 1
            raise ConnectionLost("GET", "/api/v1/pods", ConnectionResetError())

    async def get_or_none(self, res, name, namespace=None):
        self.gets += 1
        self._maybe_fail()
        return self.objects.get(f"{namespace}/{name}")

    async def list_with_version(self, res, namespace=None, **_):
        self.lists += 1
        self._maybe_fail()
        return list(self.objects.values()), "100"


class Recorder:
    def __init__(self, store):
        self.store = store
        self.calls = []

    def __call__(self, obj, deleted):
        self.calls.append((obj["metadata"]["name"], obj["metadata"]["uid"], deleted))
        if deleted:
            self.store.delete(obj)
        else:
            self.store.upsert(obj)


async def relisted(informer, objects):
    for obj in objects:
        informer.on_event({"type": None, "object": obj})
    await wait_for(lambda: informer._epoch is None and not informer._verifying)


async def wait_for(condition, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not met"
        await asyncio.sleep(0.01)


def make(api, settle=0.05):
    store = Store()
    handler = Recorder(store)
    return Informer(api, PODS, store, handler, settle=settle), store, handler


async def test_prime_delivers_every_listed_object():
    api = Api([pod("a", "1"), pod("b", "2")])
    informer, store, handler = make(api)
    assert await informer.prime() == 2
    assert len(store) == 2 and informer.last_rv == 100


async def test_an_object_deleted_while_not_watching_is_reported_deleted_after_a_relist():
    api = Api([pod("a", "1"), pod("b", "2"), pod("c", "3")])
    informer, store, handler = make(api)
    await informer.prime()
    del api.objects["ns/b"]  # deleted in the gap: kopf's relist simply does not list it
    handler.calls.clear()
    await relisted(informer, [pod("a", "1", 5), pod("c", "3", 5)])
    assert ("b", "2", True) in handler.calls
    assert store.get("ns/b") is None and informer.deletions_found == 1
    assert api.gets == 1 and api.lists == 1  # only the suspect was looked up


async def test_a_suspect_that_still_exists_is_kept():
    api = Api([pod("a", "1"), pod("b", "2")])
    informer, store, handler = make(api)
    await informer.prime()
    await relisted(informer, [pod("a", "1")])  # b was not delivered yet, but it exists
    assert store.get("ns/b") is not None and informer.deletions_found == 0


async def test_a_replaced_object_is_deleted_then_the_new_one_added():
    api = Api([pod("web-0", "old")])
    informer, store, handler = make(api)
    await informer.prime()
    api.objects["ns/web-0"] = pod("web-0", "new", 9)
    api.objects["ns/x"] = pod("x", "x")
    handler.calls.clear()
    await relisted(informer, [pod("x", "x")])
    assert handler.calls[-2:] == [("web-0", "old", True), ("web-0", "new", False)]
    assert store.get("ns/web-0")["metadata"]["uid"] == "new"


async def test_an_object_stored_after_the_relist_began_is_no_suspect():
    api = Api([pod("a", "1")])
    informer, store, handler = make(api, settle=0.2)
    await informer.prime()
    informer.on_event({"type": None, "object": pod("a", "1")})
    store.upsert(pod("created-by-us", "w"))  # a write's result, during the relist
    await wait_for(lambda: informer._epoch is None and not informer._verifying)
    assert store.get("ns/created-by-us") is not None and api.gets == 0


async def test_many_suspects_are_checked_with_one_list():
    objects = [pod(f"p{i}", str(i)) for i in range(MANY_SUSPECTS + 10)]
    api = Api(objects)
    informer, store, handler = make(api)
    await informer.prime()
    api.objects = {}
    await relisted(informer, [])  # an empty relist never opens an epoch ...
    assert len(store) == len(objects)
    api.objects["ns/keep"] = pod("keep", "k")
    await relisted(informer, [pod("keep", "k")])  # ... a relist of one object does
    assert len(store) == 1 and api.lists == 2 and api.gets == 0


async def test_the_check_is_retried_until_the_api_answers():
    api = Api([pod("a", "1"), pod("b", "2")])
    informer, store, handler = make(api)
    await informer.prime()
    del api.objects["ns/b"]
    api.failures = 1
    informer.on_event({"type": None, "object": pod("a", "1")})
    await wait_for(lambda: store.get("ns/b") is None, timeout=10)


async def test_watch_events_pass_through_and_deletes_match_uids():
    api = Api([])
    informer, store, handler = make(api)
    await informer.prime()
    informer.on_event({"type": "ADDED", "object": pod("a", "1", 300)})
    informer.on_event({"type": "DELETED", "object": pod("a", "1", 400)})
    informer.on_event({"type": "MODIFIED", "object": pod("a", "1", 300)})  # late: the UID is dead
    assert store.get("ns/a") is None and informer.last_rv == 400


class WatchApi(Api):
    def __init__(self, text="", error=None):
        super().__init__([])
        self.text, self.error = text, error

    async def request(self, *args, **kwargs):
        if self.error:
            raise self.error
        return self.text


async def test_a_silent_watch_is_stale_only_when_the_resource_changed_and_nothing_arrived():
    changed = '{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"50"}}}\n'
    api = WatchApi(changed)
    informer, store, handler = make(api)
    informer.silence = 0.0
    informer.last_rv = 10
    assert await informer.check_stale() == ""        # asked; now waits a round for delivery
    assert "resourceVersion 50 not delivered" in await informer.check_stale()
    informer.on_event({"type": "MODIFIED", "object": pod("a", "1", 50)})
    assert informer.stale_reason == ""


async def test_a_change_before_the_watchs_bookmark_is_not_a_stuck_watch():
    """An object deleted between the start-up LIST (rv 10) and the watch's own listing, which
    ends with a bookmark at rv 60: the watch will never deliver rv 50, and need not (it failed
    liveness in a full test run before bookmarks were heard)."""
    deleted = '{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"50"}}}\n'
    informer, _, _ = make(WatchApi(deleted))
    informer.silence, informer.last_rv = 0.0, 10
    informer.reached(60)
    informer.last_event_at -= 1  # a silence of 0 s has passed
    assert await informer.check_stale() == "" and await informer.check_stale() == ""
    # A bookmark arriving after the probe settles it too.
    informer, _, _ = make(WatchApi(deleted))
    informer.silence, informer.last_rv = 0.0, 10
    assert await informer.check_stale() == ""
    informer.reached(60)
    assert await informer.check_stale() == ""


async def test_a_quiet_resource_is_not_stale_and_a_compacted_probe_says_nothing():
    informer, _, _ = make(WatchApi(""))
    informer.silence, informer.last_rv = 0.0, 10
    assert await informer.check_stale() == "" and await informer.check_stale() == ""
    informer, _, _ = make(WatchApi(error=ApiError(410, {"reason": "Expired"})))
    informer.silence, informer.last_rv = 0.0, 10
    assert await informer.check_stale() == "" and await informer.check_stale() == ""
    gone = '{"type":"ERROR","object":{"code":410}}\n'
    informer, _, _ = make(WatchApi(gone))
    informer.silence, informer.last_rv = 0.0, 10
    assert await informer.check_stale() == "" and await informer.check_stale() == ""


if __name__ == "__main__":
    pytest.main([__file__])


async def test_an_empty_relisting_still_finds_the_objects_deleted_meanwhile():
    """kopf delivers no event at all for a listing that finds nothing; the end of the listing
    (kopflistings) is what tells the informer to check."""
    api = Api([pod("a", "1"), pod("b", "2")])
    informer, store, handler = make(api)
    await informer.prime()
    api.objects.clear()  # both deleted while the watch was away
    informer.on_listed()
    await wait_for(lambda: informer._epoch is None and not informer._verifying)
    assert sorted(handler.calls[-2:]) == [("a", "1", True), ("b", "2", True)] and len(store) == 0
    assert informer.deletions_found == 2


async def test_the_end_of_a_listing_before_its_objects_events_keeps_the_listed_objects():
    api = Api([pod("a", "1"), pod("b", "2")])
    informer, store, handler = make(api)
    await informer.prime()
    del api.objects["ns/b"]
    informer.on_listed()  # kopf's workers deliver the listed objects a moment later
    informer.on_event({"type": None, "object": pod("a", "1", rv=2)})
    await wait_for(lambda: informer._epoch is None and not informer._verifying)
    assert ("b", "2", True) in handler.calls and ("a", "1", True) not in handler.calls
    assert list(store.keys()) == ["ns/a"]


async def test_a_stopped_informer_starts_no_relist_check_and_cancels_a_running_one():
    api = Api([pod("a", "1")], failures=100)  # every read fails: the check keeps retrying
    informer, store, handler = make(api)
    api.failures = 0
    await informer.prime()
    api.failures = 100
    informer.on_listed()
    await wait_for(lambda: informer._verifying)
    informer.stop()
    await wait_for(lambda: not informer._verifying)
    informer.on_listed()  # kopf relisting while it stops
    assert informer._epoch is None and informer._settle_timer is None


async def test_objects_refused_by_keep_cost_nothing_unless_already_stored():
    uses = lambda obj: bool(obj["metadata"].get("labels"))  # noqa: E731 - stands for "uses claims"
    store = Store()
    handler = Recorder(store)
    informer = Informer(Api([pod("plain", "1")]), PODS, store, handler, keep=uses)
    assert await informer.prime() == 1 and len(store) == 0 and handler.calls == []
    informer.on_event({"type": "ADDED", "object": pod("other", "2", 200)})
    kept = {**pod("dra", "3", 201), "metadata": {**pod("dra", "3", 201)["metadata"], "labels": {"a": "b"}}}
    informer.on_event({"type": "ADDED", "object": kept})
    assert store.keys() == ["ns/dra"]
    # Once stored, the handler sees it change (even to something it would not keep) and go.
    informer.on_event({"type": "MODIFIED", "object": pod("dra", "3", 202)})
    informer.on_event({"type": "DELETED", "object": pod("dra", "3", 203)})
    assert [c[0] for c in handler.calls] == ["dra", "dra", "dra"] and len(store) == 0
    assert informer.last_rv == 203


async def test_a_long_listing_of_objects_nobody_keeps_is_one_epoch_without_suspects():
    """Pods with claims listed first, then many more seconds of plain Pods (dropped by ``keep``,
    or their lines skipped unparsed), then the listing's end: all were listed, nothing to check.
    Before, the epoch closed during the plain Pods and the end opened another in which every
    cached Pod was a suspect (a GET each, or one more LIST of all Pods)."""
    dra = [pod(f"dra-{i}", f"d{i}") for i in range(5)]
    api = Api(dra)
    store = Store()
    informer = Informer(api, PODS, store, Recorder(store), settle=0.05,
                        keep=lambda o: o["metadata"]["name"].startswith("dra-"))
    await informer.prime()
    for obj in dra:
        informer.on_event({"type": None, "object": obj})
    for i in range(30):  # 0.3 s of the listing, six times the settle time
        if i % 2:
            informer.on_event({"type": None, "object": pod(f"plain-{i}", f"p{i}")})  # kopf's LIST: dropped
        else:
            informer.skipped(100 + i)  # streamed initial events: the line is never parsed
        await asyncio.sleep(0.01)
    informer.on_listed()
    await wait_for(lambda: informer._epoch is None and not informer._verifying)
    assert (api.gets, api.lists, informer.relists) == (0, 1, 1) and len(store) == 5  # the one list: prime
