"""Which watch events make the taints controller look at which Pods (no API calls involved)."""

import copy

from operators.taints.controller import POD_PREFIX, RULE_PREFIX, TaintsController

DRIVER = "drv"


def slice_(taints_on=()):
    devices = [{"name": f"gpu-{i}"} for i in range(3)]
    for dev in devices:
        if dev["name"] in taints_on:
            dev["taints"] = [{"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}]
    return {
        "metadata": {"name": "s", "resourceVersion": "1"},
        "spec": {"driver": DRIVER, "pool": {"name": "n0", "generation": 1}, "devices": devices},
    }


def claim(name, device):
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"c-{name}", "resourceVersion": "1"},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "n0", "device": device}]}
            },
            "reservedFor": [{"resource": "pods", "name": f"p-{name}", "uid": f"u-{name}"}],
        },
    }


def pod(name, claim_name):
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{claim_name}", "resourceVersion": "1"},
        "spec": {"nodeName": "n0", "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]},
        "status": {"phase": "Running"},
    }


def rule(selector, rv="1", status=None):
    r = {
        "metadata": {"name": "r", "uid": "ur", "generation": 1, "resourceVersion": rv},
        "spec": {"deviceSelector": selector, "taint": {"key": "k", "effect": "NoExecute"}},
    }
    if status:
        r["status"] = status
    return r


def controller():
    c = TaintsController(kube=None, rules=None, rule_status=False)
    c.prime(
        rules=[],
        classes=[],
        slices=[slice_()],
        claims=[claim("a", "gpu-0"), claim("b", "gpu-1")],
        pods=[pod("p-a", "a"), pod("p-b", "b")],
    )
    c.queued = []
    c.queue.add = c.queued.append
    return c


def test_prime_gives_listed_pods_their_kind_and_queues_pods_with_claims():
    c = TaintsController(kube=None, rules=None, rule_status=False)
    c.prime(rules=[], classes=[], slices=[], claims=[], pods=[pod("p-a", "a")])
    assert c.pods.get("ns/p-a")["kind"] == "Pod" and c.pods.get("ns/p-a")["apiVersion"] == "v1"


def test_slice_taint_change_looks_only_at_pods_of_that_device():
    c = controller()
    changed = slice_(taints_on=["gpu-1"])
    changed["metadata"]["resourceVersion"] = "2"
    c.on_slice(changed, deleted=False)
    assert c.queued == [POD_PREFIX + "ns/p-b"]
    c.queued.clear()
    again = copy.deepcopy(changed)
    again["metadata"]["resourceVersion"] = "3"
    again["spec"]["devices"][0]["attributes"] = {"x": {"int": 1}}  # not a taint change
    c.on_slice(again, deleted=False)
    assert c.queued == []


def test_rule_changes_look_at_pods_matched_before_and_after():
    c = controller()
    c.on_rule(rule({"driver": DRIVER, "device": "gpu-0"}), deleted=False)
    assert c.queued == [RULE_PREFIX + "r", POD_PREFIX + "ns/p-a"]
    c.queued.clear()
    c.on_rule(rule({"driver": DRIVER, "device": "gpu-1"}, rv="2"), deleted=False)
    assert sorted(c.queued) == [POD_PREFIX + "ns/p-a", POD_PREFIX + "ns/p-b", RULE_PREFIX + "r"]
    c.queued.clear()
    status = {"conditions": [{"type": "EvictionInProgress", "reason": "NotStarted"}]}
    c.on_rule(rule({"driver": DRIVER, "device": "gpu-1"}, rv="3", status=status), deleted=False)
    assert c.queued == []  # our own status write comes back: nothing to do


def test_pod_updates_matter_only_for_node_or_claims():
    c = controller()
    p = copy.deepcopy(c.pods.get("ns/p-a"))
    p["metadata"]["resourceVersion"] = "2"
    p["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True"}]
    c.on_pod(p, deleted=False)
    assert c.queued == []
    moved = copy.deepcopy(p)
    moved["metadata"]["resourceVersion"] = "3"
    moved["spec"]["nodeName"] = "n1"
    c.on_pod(moved, deleted=False)
    assert c.queued == [POD_PREFIX + "ns/p-a"]


def test_claim_release_looks_at_its_pods():
    c = controller()
    released = copy.deepcopy(c.claims.get("ns/a"))
    released["metadata"]["resourceVersion"] = "2"
    released["status"].pop("reservedFor")
    c.on_claim(released, deleted=False)
    assert set(c.queued) == {POD_PREFIX + "ns/p-a"}  # the queue deduplicates


def budget(allowed, rv="1"):
    return {
        "metadata": {"name": "b", "namespace": "ns", "generation": 1, "resourceVersion": rv},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"observedGeneration": 1, "disruptionsAllowed": allowed},
    }


def test_parked_pods_are_woken_as_many_as_the_budget_allows():
    c = controller()
    from operators.core.dra.metatime import utcnow
    from operators.taints import decisions as d
    from operators.taints.controller import Pending

    for key in ("ns/p-a", "ns/p-b"):
        c.pending[key] = Pending("u", d.Eviction(utcnow(), ()))
        c._park(key, "ns/b", 60)
    c.queued.clear()
    c.on_budget(budget(0), deleted=False)
    assert c.queued == []
    c.on_budget(budget(1, rv="2"), deleted=False)
    assert c.queued == [POD_PREFIX + "ns/p-a"]  # first parked, first to try
    c.on_budget(budget(1, rv="3"), deleted=False)
    assert c.queued == [POD_PREFIX + "ns/p-a", POD_PREFIX + "ns/p-b"]
    assert c.parked == {}


def test_claim_evictions_are_computed_once_until_something_they_depend_on_changes(monkeypatch):
    from operators.taints import controller as module

    calls = []
    real = module.d.claim_eviction
    monkeypatch.setattr(
        module.d,
        "claim_eviction",
        lambda claim, *a, **k: calls.append(claim["metadata"]["name"]) or real(claim, *a, **k),
    )
    c = controller()
    r = rule({"driver": DRIVER, "device": "gpu-0"})
    c.on_rule(r, deleted=False)

    def counts():
        calls.clear()
        pending = c.rule_counts(c.rules.get("r")).pending_pods
        return pending, sorted(calls)

    assert counts() == (1, ["a", "b"])
    assert counts() == (1, [])  # the next status pass: every answer from the cache
    # The rule's own status write (no spec change) keeps the cache.
    c.on_rule(rule({"driver": DRIVER, "device": "gpu-0"}, rv="2", status={"conditions": []}), deleted=False)
    assert counts() == (1, [])
    # A new rule spec is a new answer (here the generation is deliberately not bumped).
    c.on_rule(rule({"driver": DRIVER, "device": "gpu-1"}, rv="3"), deleted=False)
    assert counts() == (1, ["a", "b"])
    assert c.pods_evicted_by(c.rules.get("r"), c.evicting_rules())[0][0][0]["metadata"]["name"] == "p-b"
    # A slice change: everything is asked again (a device's taints may have moved).
    changed = slice_(taints_on=["gpu-0"])
    changed["metadata"]["resourceVersion"] = "2"
    c.on_slice(changed, deleted=False)
    assert counts() == (1, ["a", "b"])
    assert c.pod_eviction(c.pods.get("ns/p-a")) is not None  # gpu-0's own NoExecute taint now
    # A claim's new resourceVersion: only that claim.
    updated = copy.deepcopy(c.claims.get("ns/b"))
    updated["metadata"]["resourceVersion"] = "2"
    c.on_claim(updated, deleted=False)
    assert counts() == (1, ["b"])
    c.on_claim(updated, deleted=True)
    assert "c-b" not in c._claim_evictions


def test_a_device_class_change_asks_again_for_rules_that_name_it():
    c = controller()
    cls = {
        "metadata": {"name": "cls", "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": 'device.driver == "other"'}}]},
    }
    c.on_class(cls, deleted=False)
    c.on_rule(rule({"deviceClassName": "cls"}), deleted=False)
    assert c.pod_eviction(c.pods.get("ns/p-a")) is None
    cls = copy.deepcopy(cls)
    cls["metadata"]["resourceVersion"] = "2"
    cls["spec"]["selectors"][0]["cel"]["expression"] = f'device.driver == "{DRIVER}"'
    c.on_class(cls, deleted=False)
    assert c.pod_eviction(c.pods.get("ns/p-a")) is not None
