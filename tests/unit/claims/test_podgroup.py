"""The pure PodGroup decisions (KEP-5729) of the claims operator and core.podgroup, case by case
as upstream's resourceclaim package and controller decide them at v1.37.1."""

import pytest

from operators.claims import decisions as d
from operators.claims.metrics import Metrics
from operators.core.api.featuregates import parse_feature_gates
from operators.core.dra import podgroup as pg
from operators.core.dra.resourceclaim import ClaimNotCreatedYet, UnsupportedPodClaim
from tests.unit.objects import pod

GPU = {"name": "gpu", "resourceClaimTemplateName": "t"}


def member(group="pg", **kw):
    p = pod(**kw)
    p["spec"]["schedulingGroup"] = {"podGroupName": group}
    return p


def group(name="pg", uid="gu", claims=(GPU,), statuses=None, ns="ns", deleting=False):
    meta = {"name": name, "namespace": ns, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"resourceClaimStatuses": statuses} if statuses is not None else {}
    return {
        "metadata": meta,
        "spec": {"schedulingPolicy": {"basic": {}}, "resourceClaims": list(claims)},
        "status": status,
    }


def claim(name="c", owner=None, reserved=(), allocated=False, ns="ns", annotation=None):
    meta = {"name": name, "namespace": ns, "uid": "cu"}
    if owner:
        meta["ownerReferences"] = [dict(owner, controller=True)]
    if annotation:
        meta["annotations"] = {d.POD_CLAIM_ANNOTATION: annotation}
    status = {"reservedFor": list(reserved)} if reserved else {}
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    return {"metadata": meta, "spec": {}, "status": status}


GROUP_OWNER = {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "pg", "uid": "gu"}
GROUP_ENTRY = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "pg", "uid": "gu"}


# -- BindTo ---------------------------------------------------------------------------------------


def test_bind_to_the_group_when_name_and_source_match():
    assert pg.bind_to(member(claims=[GPU]), group(), GPU) == GROUP_ENTRY


@pytest.mark.parametrize(
    "pod_claim",
    [
        {"name": "gpu", "resourceClaimTemplateName": "other"},  # same name, other template
        {"name": "gpu", "resourceClaimName": "t"},  # same name, a claim instead of a template
        {"name": "own", "resourceClaimTemplateName": "t"},  # other name
    ],
)
def test_bind_to_the_pod_when_the_group_has_no_such_claim(pod_claim):
    assert pg.bind_to(member(), group(), pod_claim) == {"resource": "pods", "name": "p", "uid": "u1"}


def test_bind_to_the_pod_without_a_group():
    assert pg.bind_to(pod(), None, GPU)["resource"] == "pods"


@pytest.mark.parametrize(
    "the_pod,the_group,pod_claim,message",
    [
        (member(), group(), {"name": "gpu"}, "none of the supported fields are set"),
        (pod(), group(), GPU, "does not belong to a PodGroup"),
        (member(group="other"), group(), GPU, "belongs to PodGroup ns/other, not PodGroup ns/pg"),
        (member(), group(claims=[{"name": "bad"}]), GPU, "PodGroup ns/pg claim bad"),
    ],
)
def test_bind_to_errors(the_pod, the_group, pod_claim, message):
    with pytest.raises(pg.BindError, match=message):
        pg.bind_to(the_pod, the_group, pod_claim)


# -- names, owners, reservations ------------------------------------------------------------------


def test_claim_name_from_group():
    assert pg.claim_name_from_group(group(), {"name": "x", "resourceClaimName": "mine"}) == ("mine", False)
    assert pg.claim_name_from_group(group(statuses=[{"name": "gpu", "resourceClaimName": "pg-gpu-abcde"}]), GPU) == (
        "pg-gpu-abcde",
        True,
    )
    assert pg.claim_name_from_group(group(statuses=[{"name": "gpu"}]), GPU) == (None, True)
    with pytest.raises(ClaimNotCreatedYet):
        pg.claim_name_from_group(group(), GPU)
    with pytest.raises(UnsupportedPodClaim):
        pg.claim_name_from_group(group(), {"name": "x"})


def test_group_indexes():
    g = group(
        claims=[GPU, {"name": "s", "resourceClaimName": "shared"}],
        statuses=[{"name": "gpu", "resourceClaimName": "pg-gpu-abcde"}],
    )
    assert pg.group_claim_keys(g) == ["ns/pg-gpu-abcde", "ns/shared"]
    assert pg.group_template_keys(g) == ["ns/t"]
    assert pg.member_keys(member()) == ["ns/pg"] and pg.member_keys(pod()) == []


def test_owning_group_uid_ignores_the_version_but_not_the_group():
    assert pg.owning_group_uid(claim(owner=GROUP_OWNER)) == "gu"
    assert pg.owning_group_uid(claim(owner=dict(GROUP_OWNER, apiVersion="scheduling.k8s.io/v1"))) == "gu"
    assert pg.owning_group_uid(claim(owner=dict(GROUP_OWNER, apiVersion="example.com/v1"))) is None
    assert pg.owning_group_uid(claim(owner={"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"})) is None


def test_is_for_pod_group_by_uid():
    assert pg.is_for_pod_group(group(), claim(owner=GROUP_OWNER)) is None
    assert "PodGroup is not owner" in pg.is_for_pod_group(group(uid="new"), claim(owner=GROUP_OWNER))
    assert "not in the same namespace" in pg.is_for_pod_group(group(ns="other"), claim(owner=GROUP_OWNER))


def test_is_for_pod_accepts_the_group_owner_by_name_only_with_the_gate():
    c = claim(owner=GROUP_OWNER)
    assert pg.is_for_pod_or_group(member(), c, True) is None
    assert "Pod is not owner" in pg.is_for_pod_or_group(member(), c, False)
    assert "neither Pod nor PodGroup other" in pg.is_for_pod_or_group(member(group="other"), c, True)
    assert "Pod is not owner" in pg.is_for_pod_or_group(pod(), c, True)
    own = claim(owner={"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"})
    assert pg.is_for_pod_or_group(member(), own, False) is None


def test_is_reserved_through_the_group_by_name_only_with_the_gate():
    c = claim(reserved=[dict(GROUP_ENTRY, uid="whatever")])
    assert pg.is_reserved_for_pod_or_group(member(), c, True)
    assert not pg.is_reserved_for_pod_or_group(member(), c, False)
    assert not pg.is_reserved_for_pod_or_group(member(group="other"), c, True)
    assert pg.is_reserved_for_pod_or_group(
        pod(), claim(reserved=[{"resource": "pods", "name": "p", "uid": "u1"}]), False
    )


# -- what needs work ------------------------------------------------------------------------------


def needs_work(p, claims=(), groups=(), generic=True, gate=True):
    by_key = {f"ns/{c['metadata']['name']}": c for c in claims}
    groups_by_key = {f"ns/{g['metadata']['name']}": g for g in groups}
    return d.pod_needs_work(p, by_key.get, groups_by_key.get, generic_workload=generic, workload_claims=gate)


def test_a_member_does_not_create_the_group_claim():
    created = member(claims=[GPU], statuses=[{"name": "gpu", "resourceClaimName": "gone"}])
    assert not needs_work(created, groups=[group()])  # the PodGroup's to (re)create
    assert needs_work(created, groups=[group(claims=[])])  # the Pod's own (e.g. gate off)
    assert needs_work(created, groups=[])  # PodGroup unknown: look again
    assert needs_work(created, generic=False)  # fails for good in sync_pod


def test_a_scheduled_member_reserved_through_its_group_needs_no_work_with_the_gate_only():
    shared = {"name": "gpu", "resourceClaimName": "shared"}
    reserved = claim("shared", reserved=[GROUP_ENTRY], allocated=True)
    p = member(claims=[shared], node="n")
    assert not needs_work(p, claims=[reserved], groups=[group(claims=[shared])], gate=True)
    assert needs_work(p, claims=[reserved], groups=[group(claims=[shared])], gate=False)


def test_pod_group_of():
    assert d.pod_group_of(pod(), {}.get, True) is None
    assert d.pod_group_of(member(), {"ns/pg": group()}.get, True) == group()
    with pytest.raises(d.GroupLookupError) as missing:
        d.pod_group_of(member(), {}.get, True)
    assert missing.value.retry
    with pytest.raises(d.GroupLookupError, match="GenericWorkload feature is disabled") as off:
        d.pod_group_of(member(), {}.get, False)
    assert not off.value.retry


def test_pod_group_needs_work():
    assert d.pod_group_needs_work(group(), {}.get)  # not created yet
    made = group(statuses=[{"name": "gpu", "resourceClaimName": "pg-gpu-abcde"}])
    assert not d.pod_group_needs_work(made, {"ns/pg-gpu-abcde": claim()}.get)
    assert d.pod_group_needs_work(made, {}.get)  # deleted: re-create
    assert not d.pod_group_needs_work(group(claims=[{"name": "s", "resourceClaimName": "user"}]), {}.get)
    assert not d.pod_group_needs_work(group(deleting=True), {}.get)


# -- what is written ------------------------------------------------------------------------------


def test_group_claim_is_owned_by_the_group_and_named_after_it():
    template = {
        "spec": {"metadata": {"labels": {"a": "b"}, "annotations": {"n": "x"}}, "spec": {"devices": {"requests": []}}}
    }
    body = d.build_group_claim(group(name="g" * 70), GPU, template)
    meta = body["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "name": "g" * 70,
            "uid": "gu",
            "controller": True,
        }
    ]
    assert meta["annotations"] == {"n": "x", d.POD_CLAIM_ANNOTATION: "gpu"}
    assert meta["labels"] == {"a": "b"} and meta["namespace"] == "ns"
    assert meta["generateName"] == d.generate_name("g" * 70, "gpu")
    registry = Metrics()
    registry.claim_created(body, "success")
    assert (
        registry.registry.get_sample_value(
            "dynamic_resource_allocation_resourceclaim_creates_total",
            {
                "status": "success",
                "admin_access": "false",
                "owner_api_group": "scheduling.k8s.io",
                "owner_api_kind": "PodGroup",
            },
        )
        == 1
    )


def test_group_status_apply_names_only_this_syncs_claims():
    apply = d.build_group_status_apply(group(), {"b": "pg-b-x", "a": "pg-a-y"})
    assert apply["apiVersion"] == "scheduling.k8s.io/v1beta1" and apply["kind"] == "PodGroup"
    assert apply["status"] == {
        "resourceClaimStatuses": [
            {"name": "a", "resourceClaimName": "pg-a-y"},
            {"name": "b", "resourceClaimName": "pg-b-x"},
        ]
    }


def test_group_reservation_check():
    assert not d.check_group_reservation(GROUP_ENTRY, group(), {"gu"}).keep  # seen deleted
    assert d.check_group_reservation(GROUP_ENTRY, None, set()).needs_api_check  # not cached
    assert d.check_group_reservation(GROUP_ENTRY, group(), set()).keep
    assert not d.check_group_reservation(GROUP_ENTRY, group(uid="new"), set()).keep  # replaced


def test_feature_gates_from_the_api_servers_metrics():
    text = """# HELP kubernetes_feature_enabled [BETA] This metric records the data about the stage and enablement of a k8s feature.
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="DRAWorkloadResourceClaims",stage="BETA"} 0
kubernetes_feature_enabled{name="GenericWorkload",stage="BETA"} 1
kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1
apiserver_request_total{code="200"} 5
"""  # noqa: E501 - the API server's metrics, verbatim
    assert parse_feature_gates(text) == {
        "DRAWorkloadResourceClaims": False,
        "GenericWorkload": True,
        "DynamicResourceAllocation": True,
    }
    assert parse_feature_gates("nothing here") == {}
