from operators.core.store import Store


def obj(name, rv, uid="u", ns="ns", owner=None):
    meta = {"name": name, "namespace": ns, "resourceVersion": str(rv), "uid": uid}
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
