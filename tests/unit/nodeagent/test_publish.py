import copy

from operators.nodeagent.publish import copy_taint_time_added, devices_equal, index_length, plan_pool

OWNER = {"name": "n1", "uid": "node-uid"}
KW = dict(driver="d.example.com", pool="n1", node_name="n1", owner=OWNER)


def dev(name, memory="1Gi", taints=None):
    d = {"name": name, "capacity": {"memory": {"value": memory}}}
    if taints:
        d["taints"] = taints
    return d


def published(plan_creates, generation=None, names=None):
    """Turn planned creates into what the API server would store."""
    out = []
    for i, body in enumerate(plan_creates):
        stored = copy.deepcopy(body)
        meta = stored["metadata"]
        meta["name"] = names[i] if names else meta.pop("generateName") + "abcde"
        meta.update(uid=f"uid-{i}", resourceVersion=str(10 + i))
        if generation is not None:
            stored["spec"]["pool"]["generation"] = generation
        out.append(stored)
    return out


def test_new_pool_starts_at_generation_one_with_indexed_names():
    plan = plan_pool([], [{"devices": [dev("a")]}, {"devices": [dev("b")]}], **KW)
    assert plan.generation == 1 and not plan.obsolete and not plan.updates
    assert [c["metadata"]["generateName"] for c in plan.creates] == [
        "00000-d.example.com-n1-",
        "00001-d.example.com-n1-",
    ]
    spec = plan.creates[0]["spec"]
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 2}
    assert spec["nodeName"] == "n1" and spec["driver"] == "d.example.com"
    assert plan.creates[0]["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "node-uid", "controller": True}
    ]


def test_unchanged_pool_needs_nothing_even_with_other_quantity_spelling():
    desired = [{"devices": [dev("a", "1Gi")]}]
    existing = published(plan_pool([], desired, **KW).creates)
    existing[0]["spec"]["devices"][0]["capacity"]["memory"]["value"] = "1073741824"
    assert plan_pool(existing, desired, **KW).empty


def test_one_changed_slice_keeps_generation_two_bump_it():
    desired = [{"devices": [dev("a")]}, {"devices": [dev("b")]}]
    existing = published(plan_pool([], desired, **KW).creates)
    one = plan_pool(existing, [{"devices": [dev("a", "2Gi")]}, {"devices": [dev("b")]}], **KW)
    assert one.generation == 1 and len(one.updates) == 1 and not one.creates
    two = plan_pool(existing, [{"devices": [dev("a", "2Gi")]}, {"devices": [dev("b", "2Gi")]}], **KW)
    assert two.generation == 2 and len(two.updates) == 2
    assert all(u["spec"]["pool"]["generation"] == 2 for u in two.updates)


def test_added_slice_bumps_and_rewrites_all():
    existing = published(plan_pool([], [{"devices": [dev("a")]}], **KW).creates)
    plan = plan_pool(existing, [{"devices": [dev("a")]}, {"devices": [dev("b")]}], **KW)
    assert plan.generation == 2 and len(plan.creates) == 1 and len(plan.updates) == 1
    assert plan.updates[0]["spec"]["pool"] == {"name": "n1", "generation": 2, "resourceSliceCount": 2}


def test_removed_slice_is_obsolete_and_old_generations_and_bad_names_too():
    desired = [{"devices": [dev("a")]}, {"devices": [dev("b")]}]
    existing = published(plan_pool([], desired, **KW).creates)
    stale = copy.deepcopy(existing[0])
    stale["metadata"].update(name="00000-old", uid="old")
    stale["spec"]["pool"]["generation"] = 0
    foreign = copy.deepcopy(existing[0])
    foreign["metadata"].update(name="random-name", uid="random")
    plan = plan_pool(existing + [stale, foreign], [{"devices": [dev("a")]}], **KW)
    assert {s["metadata"]["uid"] for s in plan.obsolete} == {"uid-1", "old", "random"}
    # A shrinking pool changes resourceSliceCount of the kept slice: one update, same generation.
    assert plan.generation == 1 and len(plan.updates) == 1


def test_taint_time_added_is_kept():
    old = [dev("a", taints=[{"key": "k", "value": "1", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}])]
    new = [dev("a", taints=[{"key": "k", "value": "1", "effect": "NoSchedule"}])]
    assert copy_taint_time_added(old, new)[0]["taints"][0]["timeAdded"] == "2026-01-01T00:00:00Z"
    assert devices_equal(old, new)  # no timeAdded on one side equals any
    later = [dev("a", taints=[{"key": "k", "value": "1", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:05Z"}])]
    assert not devices_equal(old, later)


def test_index_length_grows_past_five_hex_digits():
    assert index_length(1) == 5 and index_length(0x100000) == 5 and index_length(0x100001) == 6


def test_devices_that_went_or_came_get_a_new_generation_even_in_one_slice():
    """A MIG reconfiguration changes one slice in place: upstream's rule alone would keep the
    generation; the agent asks for a new one when the hardware changed."""
    existing = published(plan_pool([], [{"devices": [dev("a"), dev("b")]}], **KW).creates)
    same_rule = plan_pool(existing, [{"devices": [dev("a"), dev("c")]}], **KW)
    assert same_rule.generation == 1
    bumped = plan_pool(existing, [{"devices": [dev("a"), dev("c")]}], **KW, new_generation=True)
    assert bumped.generation == 2 and len(bumped.updates) == 1
    assert plan_pool(existing, [{"devices": [dev("a"), dev("b")]}], **KW, new_generation=True).empty
