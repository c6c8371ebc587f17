from operators.core.machinery.store import Store


def obj(name, rv, uid="u", ns="ns", owner=None, **meta_extra):
    meta = {"name": name, "namespace": ns, "resourceVersion": str(rv), "uid": uid, **meta_extra}
    if owner:
        meta["owner"] = owner
    return {"metadata": meta}


def test_newer_version_wins_and_older_is_ignored():
    store = Store()
    assert store.upsert(obj("a", 5))
    assert not store.upsert(obj("a", 4))  # a late watch event cannot roll back our own write
    assert store.get("ns/a")["metadata"]["resourceVersion"] == "5"
    assert store.upsert(obj("a", 3, uid="new"))  # a new object of the same name replaces it


def test_indexes_follow_updates_and_deletes():
    store = Store({"owner": lambda o: [o["metadata"]["owner"]] if o["metadata"].get("owner") else []})
    store.upsert(obj("a", 1, owner="x"))
    store.upsert(obj("b", 1, owner="x"))
    assert [o["metadata"]["name"] for o in store.by_index("owner", "x")] == ["a", "b"]
    store.upsert(obj("a", 2, owner="y"))
    assert [o["metadata"]["name"] for o in store.by_index("owner", "x")] == ["b"]
    store.delete("ns/b")
    assert store.by_index("owner", "x") == [] and len(store) == 1


def test_a_late_delete_of_the_old_object_keeps_the_new_one_of_the_same_name():
    store = Store()
    store.upsert(obj("web-0", 1, uid="old"))
    store.upsert(obj("web-0", 9, uid="new"))
    assert store.delete(obj("web-0", 8, uid="old")) is None
    assert store.get("ns/web-0")["metadata"]["uid"] == "new"


def test_a_deleted_uid_never_comes_back():
    store = Store()
    store.upsert(obj("a", 1, uid="u1"))
    assert store.delete(obj("a", 2, uid="u1")) is not None
    assert not store.upsert(obj("a", 3, uid="u1"))  # a late MODIFIED, a stale write result, a relist
    assert store.get("ns/a") is None
    assert store.upsert(obj("a", 4, uid="u2"))  # another object of the same name is welcome


def test_a_write_result_that_is_already_deleted_counts_as_a_delete():
    store = Store()
    store.upsert(obj("claim", 1, uid="c", finalizers=["x"], deletionTimestamp="2026-01-01T00:00:00Z"))
    # Removing the last finalizer: the API answers with the object it just deleted.
    assert not store.upsert(obj("claim", 2, uid="c", deletionTimestamp="2026-01-01T00:00:00Z"))
    assert store.get("ns/claim") is None and store.was_deleted("c")


def test_discard_forgets_without_a_tombstone():
    store = Store()
    store.upsert(obj("a", 1, uid="u1"))
    store.discard("ns/a")
    assert store.upsert(obj("a", 2, uid="u1"))


def test_stamps_grow_with_every_store():
    store = Store()
    store.upsert(obj("a", 1))
    first = store.stamp("ns/a")
    boundary = store.next_stamp()
    store.upsert(obj("b", 1, uid="b"))
    assert first < boundary < store.stamp("ns/b")
    assert store.stamp("ns/missing") == 0


def test_managed_fields_are_not_cached():
    store = Store()
    store.upsert(
        {
            "metadata": {
                "name": "a",
                "namespace": "ns",
                "uid": "1",
                "resourceVersion": "1",
                "managedFields": [{"manager": "kubectl"}],
            },
            "spec": {"x": 1},
        }
    )
    assert "managedFields" not in store.get("ns/a")["metadata"] and store.get("ns/a")["spec"] == {"x": 1}
