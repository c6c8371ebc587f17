import pytest

from operators.claims import decisions as d
from tests.unit.objects import pod


def claim(name="c", owner_uid=None, annotation=None, reserved=(), allocated=False, finalizer=False, ns="ns"):
    meta = {"name": name, "namespace": ns, "uid": "cu"}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner_uid, "controller": True}
        ]
    if annotation:
        meta["annotations"] = {d.POD_CLAIM_ANNOTATION: annotation}
    if finalizer:
        meta["finalizers"] = ["other", d.FINALIZER]
    status = {}
    if reserved:
        status["reservedFor"] = list(reserved)
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    return {"metadata": meta, "spec": {}, "status": status}


TEMPLATE_CLAIM = {"name": "gpu", "resourceClaimTemplateName": "t"}
PLAIN_CLAIM = {"name": "shared", "resourceClaimName": "plain"}


@pytest.mark.parametrize(
    "pod_name,claim_name,expected",
    [
        ("p", "gpu", "p-gpu-"),
        ("a" * 52, "gpu", "a" * 52 + "-gpu-"),  # exactly 57
        ("a" * 53, "gpu", "a" * 52 + "-gp"),  # 58: 53*57//58 = 52 and 3*57//58 = 2
        ("a" * 60, "gpu", "a" * 52 + "-gp"),
        ("a" * 63, "b" * 63, "a" * 28 + "-" + "b" * 28),
    ],
)
def test_generate_name_matches_upstream_truncation(pod_name, claim_name, expected):
    assert d.generate_name(pod_name, claim_name) == expected
    assert len(d.generate_name(pod_name, claim_name)) <= 57


def test_build_claim_copies_template_and_owns_by_pod():
    template = {
        "spec": {
            "metadata": {"labels": {"l": "1"}, "annotations": {"a": "2"}},
            "spec": {"devices": {"requests": [{"name": "r"}]}},
        }
    }
    p = pod(name="worker", uid="uid-1")
    built = d.build_claim(p, TEMPLATE_CLAIM, template)
    assert built["metadata"] == {
        "generateName": "worker-gpu-",
        "namespace": "ns",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "worker", "uid": "uid-1", "controller": True}],
        "annotations": {"a": "2", d.POD_CLAIM_ANNOTATION: "gpu"},
        "labels": {"l": "1"},
    }
    assert built["spec"] == template["spec"]["spec"] and built["spec"] is not template["spec"]["spec"]
    assert "labels" not in d.build_claim(p, TEMPLATE_CLAIM, {"spec": {"spec": {}}})["metadata"]


def test_find_generated_claim_needs_annotation():
    owned = [
        claim("no-annotation", owner_uid="u1"),
        claim("other", owner_uid="u1", annotation="other"),
        claim("mine", owner_uid="u1", annotation="gpu"),
    ]
    assert d.find_generated_claim(owned, "gpu")["metadata"]["name"] == "mine"
    assert d.find_generated_claim(owned[:2], "gpu") is None


def test_merge_claim_statuses_drops_nil_names_and_sorts():
    p = pod(
        statuses=[
            {"name": "z", "resourceClaimName": "old-z"},
            {"name": "nil"},
            {"name": "a", "resourceClaimName": "old-a"},
        ]
    )
    assert d.merge_claim_statuses(p, {"a": "new-a", "m": "new-m"}) == [
        {"name": "a", "resourceClaimName": "new-a"},
        {"name": "m", "resourceClaimName": "new-m"},
        {"name": "z", "resourceClaimName": "old-z"},
    ]


def test_pod_needs_work():
    claims = {"ns/plain": claim("plain", allocated=True)}
    get = claims.get
    assert d.pod_needs_work(pod(claims=[TEMPLATE_CLAIM]), get)  # not created yet
    assert not d.pod_needs_work(pod(claims=[PLAIN_CLAIM]), get)  # unscheduled: scheduler reserves
    assert d.pod_needs_work(pod(claims=[PLAIN_CLAIM], node="n"), get)  # pre-scheduled, allocated
    assert not d.pod_needs_work(pod(claims=[PLAIN_CLAIM], node="n", deleting=True), get)
    # kubernetes#141274 not copied: a finished Pod is never reserved again.
    assert not d.pod_needs_work(pod(claims=[PLAIN_CLAIM], node="n", phase="Succeeded"), get)
    reserved = {"ns/plain": claim("plain", allocated=True, reserved=[{"resource": "pods", "name": "p", "uid": "u1"}])}
    assert not d.pod_needs_work(pod(claims=[PLAIN_CLAIM], node="n"), reserved.get)
    assert not d.pod_needs_work(pod(claims=[{"name": "x", "resourceClaimName": "missing"}], node="n"), get)
    # a generated claim deleted by hand must be created again
    p = pod(claims=[TEMPLATE_CLAIM], statuses=[{"name": "gpu", "resourceClaimName": "gone"}], node="n")
    assert d.pod_needs_work(p, get)


def test_pod_needs_claims():
    p = pod(claims=[TEMPLATE_CLAIM, PLAIN_CLAIM], statuses=[{"name": "gpu", "resourceClaimName": "gen"}])
    assert d.pod_needs_claims(p, deleted=False)
    assert not d.pod_needs_claims(p, deleted=True)
    assert not d.pod_needs_claims(pod(phase="Failed"), deleted=False)
    assert not d.pod_needs_claims(pod(deleting=True), deleted=False)
    assert d.pod_needs_claims(pod(deleting=True, node="n"), deleted=False)


class Uids(set):
    pass


def test_reservation_checks():
    entry = {"resource": "pods", "name": "p", "uid": "u1"}
    assert not d.check_pod_reservation(entry, None, Uids({"u1"})).keep
    unknown = d.check_pod_reservation(entry, None, Uids())
    assert unknown.keep and unknown.needs_api_check
    assert not d.check_pod_reservation(entry, pod(uid="u2"), Uids()).keep
    assert not d.check_pod_reservation(entry, pod(phase="Succeeded"), Uids()).keep
    assert not d.check_pod_reservation(entry, pod(deleting=True), Uids()).keep
    assert d.check_pod_reservation(entry, pod(deleting=True, node="n"), Uids()).keep  # terminating, scheduled
    assert d.check_pod_reservation(entry, pod(), Uids()).keep


def test_release_clears_allocation_only_when_empty_and_protected():
    entry = {"resource": "pods", "name": "p", "uid": "u1"}
    protected = claim(allocated=True, finalizer=True, reserved=[entry, dict(entry, uid="u2")])
    partial = d.released_claim_status(protected, [entry])
    assert partial["status"]["reservedFor"] == [entry] and "allocation" in partial["status"]
    emptied = d.released_claim_status(protected, [])
    assert "reservedFor" not in emptied["status"] and "allocation" not in emptied["status"]
    assert "allocation" in protected["status"]  # input untouched
    unprotected = claim(allocated=True, reserved=[entry])
    assert "allocation" in d.released_claim_status(unprotected, [])["status"]
    assert d.without_finalizer(protected)["metadata"]["finalizers"] == ["other"]


def test_template_problems_use_upstream_messages():
    admin = {"spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": {"adminAccess": True}}]}}}}
    prioritized = {"spec": {"spec": {"devices": {"requests": [{"name": "r", "firstAvailable": [{"name": "a"}]}]}}}}
    assert (
        d.template_problem(admin, admin_access=False, prioritized_list=True)
        == "admin access is requested, but the feature is disabled"
    )
    assert d.template_problem(admin, admin_access=True, prioritized_list=True) is None
    assert (
        d.template_problem(prioritized, admin_access=True, prioritized_list=False)
        == "template includes a prioritized list of subrequests, but the feature is disabled"
    )


def test_metric_labels():
    c = claim(owner_uid="u", annotation="gpu")
    assert d.claim_source_label(c) == "resource_claim_template"
    c["metadata"]["annotations"][d.EXTENDED_RESOURCE_CLAIM_ANNOTATION] = "true"
    assert d.claim_source_label(c) == "extended_resource"
    assert d.claim_source_label(claim()) == ""
    assert d.owner_labels(c) == ("", "Pod")
    assert d.admin_access_label(None) == "false"
