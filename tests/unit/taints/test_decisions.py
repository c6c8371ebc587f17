import datetime

import pytest

from operators.taints import decisions as d

T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)
T0S = "2026-01-01T12:00:00Z"


def taint(key="k", value="v", effect="NoExecute", added=T0S):
    return {"key": key, "value": value, "effect": effect, "timeAdded": added}


def toleration(key="k", value="v", effect="NoExecute", seconds=None, operator="Equal"):
    t = {"key": key, "operator": operator, "value": value, "effect": effect}
    if seconds is not None:
        t["tolerationSeconds"] = seconds
    return t


def result(device="gpu-0", driver="drv", pool="pool", tolerations=()):
    return {"request": "r", "driver": driver, "pool": pool, "device": device, "tolerations": list(tolerations)}


def claim(name="c", results=(), reserved=("u1",), owner=None, ns="ns"):
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}]
    status = {"reservedFor": [{"resource": "pods", "name": "p", "uid": u} for u in reserved]}
    if results is not None:
        status["allocation"] = {"devices": {"results": list(results)}}
    return {"metadata": meta, "status": status}


def rule(name="r", selector=None, effect="NoExecute", uid=None, added=T0S, generation=1, annotations=None):
    spec = {"taint": {"key": "k", "value": "v", "effect": effect, "timeAdded": added}}
    if selector is not None:
        spec["deviceSelector"] = selector
    meta = {"name": name, "uid": uid or f"uid-{name}", "generation": generation}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def slice_(name="s", devices=(), generation=1, driver="drv", pool="pool"):
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def lookup_from(*slices):
    views: dict[str, d.PoolView] = {}
    for key in {d.slice_pool_key(s) for s in slices}:
        views[key] = d.pool_view([s for s in slices if d.slice_pool_key(s) == key])
    return lambda driver, pool, device: views.get(d.pool_key(driver, pool), d.PoolView()).device(device)


NO_SLICES = lookup_from()


@pytest.mark.parametrize(
    "tol,expected",
    [
        (toleration(), True),
        (toleration(value="other"), False),
        (toleration(operator="Exists", value=""), True),
        (toleration(key="", operator="Exists", value=""), True),
        (toleration(key="other"), False),
        (toleration(effect=""), True),  # empty effect matches every effect
        (toleration(effect="NoSchedule"), False),
        (toleration(operator="Bogus"), False),
        ({"key": "k", "value": "v"}, True),  # no operator means Equal
    ],
)
def test_tolerates_as_upstream(tol, expected):
    assert d.tolerates(tol, taint()) is expected


def test_untolerated_slice_taint_evicts_at_time_added():
    s = slice_(devices=[{"name": "gpu-0", "taints": [taint(effect="NoSchedule"), taint()]}])
    ev = d.claim_eviction(claim(results=[result()]), lookup_from(s), [])
    assert ev.when == T0
    assert [str(r) for r in ev.reasons] == ["ResourceSlice s drv/pool/gpu-0 taint #1"]


@pytest.mark.parametrize(
    "tolerations,expected",
    [
        ([toleration(seconds=30)], T0 + datetime.timedelta(seconds=30)),
        (
            [toleration(seconds=30), toleration(operator="Exists", value="", seconds=10)],
            T0 + datetime.timedelta(seconds=10),
        ),
        ([toleration(seconds=-5)], T0),  # negative counts as 0
        ([toleration()], None),  # no seconds: tolerated for good
        ([toleration(seconds=30), toleration()], None),  # one forever toleration is enough
        ([toleration(effect="", seconds=30)], T0),  # only explicit NoExecute tolerations count here
        ([toleration(value="x", seconds=30)], T0),  # not matching
    ],
)
def test_tolerations_from_the_allocation_result(tolerations, expected):
    r = rule(selector={"driver": "drv"})
    ev = d.claim_eviction(claim(results=[result(tolerations=tolerations)]), NO_SLICES, [r])
    assert (ev.when if ev else None) == expected


@pytest.mark.parametrize(
    ("request_name", "expected"),
    [
        ("r", None),  # the request's toleration, forever
        ("alt/second", T0 + datetime.timedelta(seconds=30)),  # a firstAvailable subrequest's
        ("alt/first", T0),  # that subrequest tolerates nothing
        ("gone", T0),
    ],
)
def test_a_result_without_tolerations_takes_its_requests_as_on_134(request_name, expected):
    """Kubernetes 1.34's scheduler copies no tolerations into the result; the claim's spec,
    which cannot change, still has them."""
    c = claim(results=[{**result(), "request": request_name}])
    c["spec"] = {
        "devices": {
            "requests": [
                {"name": "r", "exactly": {"deviceClassName": "x", "tolerations": [toleration()]}},
                {
                    "name": "alt",
                    "firstAvailable": [
                        {"name": "first", "deviceClassName": "x"},
                        {"name": "second", "deviceClassName": "x", "tolerations": [toleration(seconds=30)]},
                    ],
                },
            ]
        }
    }
    del c["status"]["allocation"]["devices"]["results"][0]["tolerations"]
    ev = d.claim_eviction(c, NO_SLICES, [rule(selector={"driver": "drv"})])
    assert (ev.when if ev else None) == expected


def test_earliest_taint_wins_and_reasons_are_sorted_rules_first():
    later = "2026-01-01T12:05:00Z"
    s = slice_(devices=[{"name": "gpu-1", "taints": [taint(added=later)]}])
    rules = [rule("zeta", {"device": "gpu-0"}), rule("alpha", {"driver": "drv"}, added=later)]
    c = claim(results=[result("gpu-0"), result("gpu-1")])
    ev = d.claim_eviction(c, lookup_from(s), rules)
    assert ev.when == T0
    assert [str(r) for r in ev.reasons] == [
        "DeviceTaintRule alpha",
        "DeviceTaintRule zeta",
        "ResourceSlice s drv/pool/gpu-1 taint #0",
    ]


@pytest.mark.parametrize(
    "selector,matches",
    [
        (None, False),  # no selector: nothing (kubernetes#141422)
        ({}, True),  # empty selector: everything
        ({"driver": "drv"}, True),
        ({"driver": "x"}, False),
        ({"pool": "pool"}, True),
        ({"pool": "x"}, False),
        ({"device": "gpu-0"}, True),
        ({"device": "gpu-1"}, False),
        ({"driver": "drv", "pool": "pool", "device": "gpu-0"}, True),
        ({"driver": "drv", "pool": "x", "device": "gpu-0"}, False),
    ],
)
def test_rule_selectors(selector, matches):
    ev = d.claim_eviction(claim(results=[result()]), NO_SLICES, [rule(selector=selector)])
    assert (ev is not None) is matches


def test_rule_matches_allocation_even_without_slice_but_only_no_execute_rules_evict():
    c = claim(results=[result()])
    assert d.claim_eviction(c, NO_SLICES, [rule(selector={}, effect="NoSchedule")]) is None
    assert d.claim_eviction(c, NO_SLICES, [rule(selector={}, effect="None")]) is None
    assert d.claim_eviction(c, NO_SLICES, [rule(selector={})]) is not None


def test_only_the_newest_pool_generation_counts():
    old = slice_("old", [{"name": "gpu-0", "taints": [taint()]}], generation=1)
    new = slice_("new", [{"name": "gpu-0"}], generation=2)
    assert d.claim_eviction(claim(results=[result()]), lookup_from(old, new), []) is None
    assert d.claim_eviction(claim(results=[result()]), lookup_from(old), []) is not None
    view = d.pool_view([old, new])
    assert view.generation == 2 and d.no_execute_taints(view) == {}
    assert d.modified_devices(d.no_execute_taints(d.pool_view([old])), d.no_execute_taints(view)) == {"gpu-0"}


def test_unallocated_claim_has_no_eviction():
    assert d.claim_eviction(claim(results=None), NO_SLICES, [rule(selector={})]) is None


def pod(uid="u1", node="n", claims=(), statuses=(), extended=None, ns="ns"):
    status = {"resourceClaimStatuses": list(statuses)}
    if extended:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended, "requestMappings": []}
    return {
        "metadata": {"name": "p", "namespace": ns, "uid": uid},
        "spec": {"nodeName": node, "resourceClaims": list(claims)},
        "status": status,
    }


def evict_all(c):
    return d.Eviction(T0, (d.TaintSource(rule="r", rule_uid="uid-r"),))


def test_pod_eviction_needs_schedule_reservation_and_owner():
    plain = claim("plain", results=[result()])
    generated = claim("gen", results=[result()], owner="u1")
    claims = {"ns/plain": plain, "ns/gen": generated}
    p = pod(claims=[{"name": "a", "resourceClaimName": "plain"}])
    assert d.pod_eviction(p, claims.get, evict_all).when == T0
    assert (
        d.pod_eviction(pod(node="", claims=[{"name": "a", "resourceClaimName": "plain"}]), claims.get, evict_all)
        is None
    )
    assert (
        d.pod_eviction(pod(uid="other", claims=[{"name": "a", "resourceClaimName": "plain"}]), claims.get, evict_all)
        is None
    )
    tmpl = [{"name": "t", "resourceClaimTemplateName": "tmpl"}]
    assert d.pod_eviction(pod(claims=tmpl), claims.get, evict_all) is None  # no status yet
    assert (
        d.pod_eviction(pod(claims=tmpl, statuses=[{"name": "t", "resourceClaimName": "gen"}]), claims.get, evict_all)
        is not None
    )
    claims["ns/gen"] = claim("gen", results=[result()], owner="someone-else")
    assert (
        d.pod_eviction(pod(claims=tmpl, statuses=[{"name": "t", "resourceClaimName": "gen"}]), claims.get, evict_all)
        is None
    )


def group_claim(owner_group="pg"):
    """A claim made from a PodGroup's template: owned by the PodGroup, reserved for it."""
    c = claim("pg-gpu-x", results=[result()], reserved=())
    c["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "name": owner_group,
            "uid": "uid-pg",
            "controller": True,
        }
    ]
    c["status"]["reservedFor"] = [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "pg", "uid": "uid-pg"}
    ]
    return c


def member(group="pg", claims=({"name": "gpu", "resourceClaimTemplateName": "t"},)):
    p = pod(claims=claims, statuses=[{"name": "gpu", "resourceClaimName": "pg-gpu-x"}])
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


def test_pod_group_reservation_counts_with_the_gate_only():
    """devicetainteviction ``podEvictionTime`` with IsForPod/IsReservedForPod accepting the PodGroup
    (k8s.io/dynamic-resource-allocation/resourceclaim, v1.37.1; upstream cases
    "evict-pod-resourceclaim-podgroup" and "no-evict-pod-in-podgroup-without-claim")."""
    claims = {"ns/pg-gpu-x": group_claim()}
    assert d.pod_eviction(member(), claims.get, evict_all, workload_claims=True).when == T0
    # Gate off: neither the PodGroup's ownership nor its reservation is the Pod's.
    assert d.pod_eviction(member(), claims.get, evict_all) is None
    # Another PodGroup's member (same claim name in its status): not reserved for it.
    assert d.pod_eviction(member(group="other"), claims.get, evict_all, workload_claims=True) is None
    # A member without the claim in its own spec is not evicted for its PodGroup's claim.
    assert d.pod_eviction(member(claims=()), claims.get, evict_all, workload_claims=True) is None
    # Reserved for the PodGroup but owned by another one: not this Pod's claim (IsForPod).
    claims["ns/pg-gpu-x"] = group_claim(owner_group="someone-else")
    assert d.pod_eviction(member(), claims.get, evict_all, workload_claims=True) is None


def test_extended_resource_claims_count_unlike_upstream():
    ext = claim("p-extended-resources-abcde", results=[result()], owner="u1")
    claims = {"ns/p-extended-resources-abcde": ext}
    assert d.pod_eviction(pod(extended="p-extended-resources-abcde"), claims.get, evict_all) is not None


def test_pod_eviction_is_earliest_over_its_claims_with_merged_reasons():
    a, b = claim("a", results=[result()]), claim("b", results=[result()])
    times = {"a": (T0 + datetime.timedelta(seconds=9), "ra"), "b": (T0, "rb")}

    def eviction_of(c):
        when, r = times[c["metadata"]["name"]]
        return d.Eviction(when, (d.TaintSource(rule=r, rule_uid=r),))

    p = pod(claims=[{"name": "x", "resourceClaimName": "a"}, {"name": "y", "resourceClaimName": "b"}])
    ev = d.pod_eviction(p, {"ns/a": a, "ns/b": b}.get, eviction_of)
    assert ev.when == T0 and ev.rule_names() == ["ra", "rb"]


def test_pod_needs_look_only_when_node_or_claims_change():
    p = pod(claims=[{"name": "a", "resourceClaimName": "c"}])
    assert d.pod_needs_look(None, p)
    q = {**p, "status": {**p["status"], "conditions": [{"type": "Ready"}]}}
    assert not d.pod_needs_look(p, q)
    assert d.pod_needs_look(p, pod(node="other", claims=p["spec"]["resourceClaims"]))
    assert d.pod_needs_look(p, pod(claims=p["spec"]["resourceClaims"], extended="x"))


@pytest.mark.parametrize(
    "effect,counts,evicted,reason,status,message",
    [
        (
            "NoExecute",
            d.RuleCounts(1, 1),
            0,
            "PodsPendingEviction",
            "True",
            "1 pod needs to be evicted in 1 namespace.",
        ),
        (
            "NoExecute",
            d.RuleCounts(3, 2),
            1,
            "PodsPendingEviction",
            "True",
            "3 pods need to be evicted in 2 different namespaces. 1 pod evicted since starting the controller.",
        ),
        ("NoExecute", d.RuleCounts(), 200, "Completed", "False", "200 pods evicted since starting the controller."),
        ("NoExecute", d.RuleCounts(), 0, "NotStarted", "False", ""),
        (
            "None",
            d.RuleCounts(1, 1, 1, 1),
            0,
            "NoEffect",
            "False",
            "1 published device selected. 1 allocated device selected. 1 pod would be evicted in 1 namespace "
            "if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule "
            "to trigger an update.",
        ),
        (
            "None",
            d.RuleCounts(0, 0, 2, 0),
            0,
            "NoEffect",
            "False",
            "2 published devices selected. 0 allocated devices selected. "
            "0 pods would be evicted in 0 different namespaces "
            "if the effect was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule "
            "to trigger an update.",
        ),
        (
            "NoSchedule",
            d.RuleCounts(),
            2,
            "OtherEffect",
            "False",
            "Eviction only happens for the NoExecute effect. 2 pods evicted since starting the controller.",
        ),
    ],
)
def test_rule_condition_texts(effect, counts, evicted, reason, status, message):
    condition = d.rule_condition(rule(effect=effect, generation=4), counts, evicted)
    assert condition == {
        "type": "EvictionInProgress",
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 4,
    }


def test_status_is_written_at_most_every_ten_seconds_per_generation():
    r = rule(generation=2)
    assert d.status_wait(r, T0) == 0
    r["status"] = {"conditions": [{"type": "EvictionInProgress", "observedGeneration": 2, "lastTransitionTime": T0S}]}
    assert d.status_wait(r, T0 + datetime.timedelta(seconds=4)) == pytest.approx(6)
    assert d.status_wait(r, T0 + datetime.timedelta(seconds=10)) == 0
    r["metadata"]["generation"] = 3  # a changed spec is reported at once
    assert d.status_wait(r, T0 + datetime.timedelta(seconds=4)) == 0
    body = d.rule_status_apply(r, "resource.k8s.io/v1", d.rule_condition(r, d.RuleCounts(), 0), T0)
    assert body["metadata"] == {"name": "r", "uid": "uid-r"}
    assert body["status"]["conditions"][0]["lastTransitionTime"] == T0S


def test_condition_change_ignores_the_transition_time():
    new = d.rule_condition(rule(), d.RuleCounts(), 0)
    assert not d.condition_changed(dict(new, lastTransitionTime=T0S), new)
    assert d.condition_changed(dict(new, message="x"), new)
    assert d.condition_changed(None, new)


def test_pod_condition_and_eviction_bodies():
    p = pod()
    assert not d.has_pod_condition(p)
    patch = d.pod_condition_patch(p, T0)
    assert patch == {
        "metadata": {"uid": "u1"},
        "status": {"conditions": [dict(d.POD_CONDITION, lastTransitionTime=T0S)]},
    }
    p["status"]["conditions"] = [dict(d.POD_CONDITION, lastTransitionTime=T0S)]
    assert d.has_pod_condition(p)
    assert d.eviction_body(p)["deleteOptions"] == {"preconditions": {"uid": "u1"}}


def test_guard_rail_annotations():
    assert d.rule_rate(rule()) is None
    assert d.rule_rate(rule(annotations={d.RATE_ANNOTATION: "20"})) == 20
    for bad in ("fast", "0", "-1"):
        with pytest.raises(d.BadAnnotation):
            d.rule_rate(rule(annotations={d.RATE_ANNOTATION: bad}))
    with pytest.raises(d.BadAnnotation):
        d.uses_eviction_api(rule(annotations={d.EVICTION_API_ANNOTATION: "yes"}))
    assert d.eviction_api_max_wait(rule(annotations={d.MAX_WAIT_ANNOTATION: "30s"}), 300) == 30


def test_eviction_api_only_when_every_reason_opted_in():
    pdb = rule("pdb", annotations={d.EVICTION_API_ANNOTATION: "true", d.MAX_WAIT_ANNOTATION: "60"})
    plain = rule("plain")

    def by_rule(*names):
        return d.Eviction(T0, tuple(d.TaintSource(rule=n, rule_uid=f"uid-{n}") for n in names))

    assert d.eviction_api_wait([pdb, plain], by_rule("pdb"), 300) == 60
    assert d.eviction_api_wait([pdb, plain], by_rule("pdb", "plain"), 300) is None
    slice_taint = d.Eviction(T0, (d.TaintSource(rule="pdb", rule_uid="uid-pdb"), d.TaintSource(slice="s", device="x")))
    assert d.eviction_api_wait([pdb], slice_taint, 300) is None
    default_wait = rule("pdb", annotations={d.EVICTION_API_ANNOTATION: "true"})
    assert d.eviction_api_wait([default_wait], by_rule("pdb"), 300) == 300
    bad_wait = rule("pdb", annotations={d.EVICTION_API_ANNOTATION: "true", d.MAX_WAIT_ANNOTATION: "soon"})
    assert d.eviction_api_wait([bad_wait], by_rule("pdb"), 300) == 300
    bad_mode = rule("pdb", annotations={d.EVICTION_API_ANNOTATION: "maybe"})
    assert d.eviction_api_wait([bad_mode], by_rule("pdb"), 300) is None


@pytest.mark.parametrize(
    "selector,expected",
    [
        (None, False),
        ({}, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "db"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}, False),
    ],
)
def test_label_selectors_of_disruption_budgets(selector, expected):
    pdb = {"metadata": {"name": "b", "namespace": "ns"}, "spec": {"selector": selector}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}}}
    assert d.budget_selects(pdb, pod) is expected
    other = {"metadata": {"name": "p", "namespace": "other", "labels": {"app": "web"}}}
    assert not d.budget_selects(pdb, other)


def test_budget_allows_nothing_while_its_status_lags():
    pdb = {"metadata": {"generation": 2}, "status": {"observedGeneration": 1, "disruptionsAllowed": 3}}
    assert d.budget_allows(pdb) == 0
    pdb["status"]["observedGeneration"] = 2
    assert d.budget_allows(pdb) == 3
