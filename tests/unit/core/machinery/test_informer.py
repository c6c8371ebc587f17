"""The informer's side of client-go's ``Replace``: a relist's snapshot against the cache, exact
without timers (the reflector's HTTP side: test_watch.py; against a real kube-apiserver with a
compacted etcd: tests/integration/test_chaos.py)."""

import pytest

from operators.core.api.kube import ApiError
from operators.core.api.resources import PODS
from operators.core.machinery.informer import Informer
from operators.core.machinery.store import Store, key_of


def pod(name, uid, rv=1, **labels):
    meta = {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": str(rv)}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta}


class Api:
    """The start-up LIST's answer."""

    def __init__(self, objects, version="100"):
        self.objects, self.version = objects, version

    async def list_with_version(self, res, namespace=None, keep=None, **_):
        return [o for o in self.objects if keep is None or keep(o)], self.version


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


def make(objects=(), **options):
    store = Store()
    handler = Recorder(store)
    return Informer(Api(list(objects)), PODS, store, handler, kind="Pod", **options), store, handler


def relist(informer, objects):
    informer.begin_relist()
    for obj in objects:
        informer.listed(obj)
    return informer.end_relist()


async def test_prime_delivers_every_listed_object_and_keeps_the_lists_version():
    informer, store, handler = make([pod("a", "1"), pod("b", "2")])
    assert await informer.prime() == 2
    assert store.keys() == ["ns/a", "ns/b"] and informer.list_version == "100" and informer.last_rv == 100
    assert store.get("ns/a")["kind"] == "Pod"  # a LIST's items carry no kind


async def test_an_object_deleted_while_not_watching_is_reported_deleted_by_the_relist():
    informer, store, handler = make([pod("a", "1"), pod("b", "2")])
    await informer.prime()
    assert relist(informer, [pod("a", "1", 150)]) == 1
    assert store.get("ns/b") is None and ("b", "2", True) in handler.calls
    assert informer.deletions_found == 1 and informer.relists == 1


async def test_an_empty_snapshot_deletes_everything_cached():
    informer, store, _ = make([pod("a", "1"), pod("b", "2")])
    await informer.prime()
    assert relist(informer, []) == 2 and len(store) == 0


async def test_a_replaced_object_is_deleted_then_the_new_one_added():
    informer, store, handler = make([pod("a", "1")])
    await informer.prime()
    relist(informer, [pod("a", "9", 150)])
    assert handler.calls[-2:] == [("a", "1", True), ("a", "9", False)]
    assert store.get("ns/a")["metadata"]["uid"] == "9" and informer.deletions_found == 1


async def test_an_object_stored_after_the_relist_began_is_not_deleted():
    """The controller's own write (a claim it just created) lands in the cache during the relist:
    the snapshot may predate it, the object exists."""
    informer, store, handler = make([pod("a", "1")])
    await informer.prime()
    informer.begin_relist()
    store.upsert(pod("made", "7", 160))
    informer.listed(pod("a", "1", 150))
    assert informer.end_relist() == 0 and store.get("ns/made") is not None


async def test_a_broken_relist_concludes_nothing():
    informer, store, _ = make([pod("a", "1"), pod("b", "2")])
    await informer.prime()
    informer.begin_relist()
    informer.listed(pod("a", "1"))
    informer.abort_relist()
    assert informer.end_relist() == 0 and len(store) == 2


async def test_an_unparsed_line_of_a_cached_object_counts_as_listed():
    informer, store, _ = make([pod("a", "1")])
    await informer.prime()
    informer.begin_relist()
    informer.listed_key("ns/a")
    assert informer.end_relist() == 0 and store.get("ns/a") is not None


async def test_watch_events_pass_through_and_deletes_match_uids():
    informer, store, _ = make()
    await informer.prime()
    informer.on_event({"type": "ADDED", "object": pod("a", "1", 300)})
    informer.on_event({"type": "DELETED", "object": pod("a", "1", 400)})
    informer.on_event({"type": "MODIFIED", "object": pod("a", "1", 300)})  # late: the UID is dead
    assert store.get("ns/a") is None and informer.last_rv == 400


async def test_objects_refused_by_keep_cost_nothing_unless_already_stored():
    informer, store, handler = make(
        [pod("plain", "1"), pod("dra", "3", 1, uses="claims")], keep=lambda obj: bool(obj["metadata"].get("labels"))
    )
    assert await informer.prime() == 1 and store.keys() == ["ns/dra"]
    informer.on_event({"type": "ADDED", "object": pod("other", "2", 200)})
    assert store.keys() == ["ns/dra"]
    # Once stored, the handler sees it change (even to something it would not keep) and go.
    informer.on_event({"type": "MODIFIED", "object": pod("dra", "3", 202)})
    informer.on_event({"type": "DELETED", "object": pod("dra", "3", 203)})
    assert [c[0] for c in handler.calls] == ["dra", "dra", "dra"] and len(store) == 0


# -- the stale-watch check --------------------------------------------------------------------


class WatchApi(Api):
    def __init__(self, text="", error=None):
        super().__init__([])
        self.text, self.error = text, error

    async def request(self, *args, **kwargs):
        if self.error:
            raise self.error
        return self.text


def stale_probe(text="", error=None):
    informer = Informer(WatchApi(text, error), PODS, Store(), lambda obj, deleted: None)
    informer.silence, informer.last_rv = 0.0, 10
    return informer


async def test_a_silent_watch_is_stale_only_when_the_resource_changed_and_nothing_arrived():
    informer = stale_probe('{"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"50"}}}\n')
    assert await informer.check_stale() == ""  # asked; now waits a round for delivery
    assert "resourceVersion 50 not delivered" in await informer.check_stale()
    informer.on_event({"type": "MODIFIED", "object": pod("a", "1", 50)})
    assert informer.stale_reason == ""


async def test_a_bookmark_past_the_change_settles_the_probe():
    deleted = '{"type":"DELETED","object":{"metadata":{"name":"a","resourceVersion":"50"}}}\n'
    informer = stale_probe(deleted)
    assert await informer.check_stale() == ""
    informer.on_bookmark(60)
    assert await informer.check_stale() == "" and informer.bookmarks == 1


@pytest.mark.parametrize(
    "text,error",
    [("", None), ("", ApiError(410, {"reason": "Expired"})), ('{"type":"ERROR","object":{"code":410}}\n', None)],
    ids=["quiet", "compacted", "compacted-in-stream"],
)
async def test_a_quiet_resource_is_not_stale_and_a_compacted_probe_says_nothing(text, error):
    informer = stale_probe(text, error)
    assert await informer.check_stale() == "" and await informer.check_stale() == ""


def test_keys_are_namespace_and_name():
    assert key_of(pod("a", "1")) == "ns/a"


async def test_catch_up_delivers_only_what_the_cache_lacks_or_holds_older():
    """A new leader's fresh read beside a running watch: new objects and newer versions are
    delivered; a newer cached copy, a UID seen deleted and objects the listing lacks stay as
    the watch left them (the listing may predate them)."""
    informer, store, handler = make()
    store.upsert(pod("same", "1", rv=5))
    store.upsert(pod("newer-cached", "2", rv=9))
    store.upsert(pod("older-cached", "3", rv=3))
    store.upsert(pod("replaced", "4", rv=2))
    store.upsert(pod("created-after-listing", "5", rv=20))
    store.upsert(pod("deleted", "6", rv=4))
    store.delete(pod("deleted", "6"))
    informer.kube = Api(
        [
            pod("same", "1", rv=5),
            pod("newer-cached", "2", rv=8),
            pod("older-cached", "3", rv=7),
            pod("replaced", "40", rv=11),
            pod("deleted", "6", rv=4),
            pod("missed", "7", rv=12),
        ]
    )
    assert await informer.catch_up() == 4
    assert handler.calls == [
        ("older-cached", "3", False),
        ("replaced", "4", True),
        ("replaced", "40", False),
        ("deleted", "6", False),  # delivered; the store refuses the deleted UID
        ("missed", "7", False),
    ]
    assert "ns/deleted" not in store and store.get("ns/missed")["kind"] == "Pod"
    assert store.get("ns/newer-cached")["metadata"]["resourceVersion"] == "9"
    assert store.get("ns/older-cached")["metadata"]["resourceVersion"] == "7"
    assert "ns/created-after-listing" in store and uid_of_stored(store, "ns/replaced") == "40"


def uid_of_stored(store, key):
    return store.get(key)["metadata"]["uid"]


async def test_prime_has_each_listed_object_trimmed_as_it_comes_as_the_store_keeps_it():
    class Trimming(Api):
        async def list_with_version(self, res, namespace=None, keep=None, trim=None, **_):
            self.trim = trim
            return [trim(o) for o in self.objects if keep is None or keep(o)], self.version

    listed = pod("a", "1")
    listed["metadata"]["managedFields"] = [{"manager": "kube-scheduler"}]
    listed["spec"] = {"containers": [{"name": "big"}]}
    api, store = Trimming([listed]), Store(transform=lambda obj: {"metadata": obj["metadata"]})
    handler = Recorder(store)
    assert await Informer(api, PODS, store, handler, kind="Pod").prime() == 1
    assert api.trim == store.trim  # the list trims: whole objects are not all held at once
    assert store.get("ns/a") == {"metadata": listed["metadata"]}
    assert Store().trim(listed)["metadata"].get("managedFields") is None
    api.trim = None
    await Informer(api, PODS, store, handler, kind="Pod").list_again()  # a relist's LIST too
    assert api.trim == store.trim
