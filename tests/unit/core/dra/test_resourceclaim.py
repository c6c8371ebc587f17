import pytest

from operators.core.dra import resourceclaim as rc
from tests.unit.objects import pod


def claim(name="c", owner_uid=None, reserved=(), allocated=False, ns="ns", owner_kind="Pod"):
    meta = {"name": name, "namespace": ns, "uid": "cu"}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": owner_kind, "name": "p", "uid": owner_uid, "controller": True}
        ]
    status = {}
    if reserved:
        status["reservedFor"] = list(reserved)
    if allocated:
        status["allocation"] = {"devices": {"results": [{"driver": "d", "pool": "n", "device": "gpu-0"}]}}
    return {"metadata": meta, "spec": {}, "status": status}


TEMPLATE_CLAIM = {"name": "gpu", "resourceClaimTemplateName": "t"}
PLAIN_CLAIM = {"name": "shared", "resourceClaimName": "plain"}


def test_claim_name_resolution():
    assert rc.claim_name(pod(), PLAIN_CLAIM) == ("plain", False)
    with pytest.raises(rc.ClaimNotCreatedYet):
        rc.claim_name(pod(), TEMPLATE_CLAIM)
    p = pod(statuses=[{"name": "gpu", "resourceClaimName": "p-gpu-abcde"}])
    assert rc.claim_name(p, TEMPLATE_CLAIM) == ("p-gpu-abcde", True)
    assert rc.claim_name(pod(statuses=[{"name": "gpu"}]), TEMPLATE_CLAIM) == (None, True)  # no claim needed
    with pytest.raises(rc.UnsupportedPodClaim):
        rc.claim_name(pod(), {"name": "x"})


def test_known_claim_name_is_none_until_the_name_is_known():
    assert rc.known_claim_name(pod(), PLAIN_CLAIM) == "plain"
    assert rc.known_claim_name(pod(), TEMPLATE_CLAIM) is None
    assert rc.known_claim_name(pod(statuses=[{"name": "gpu"}]), TEMPLATE_CLAIM) is None
    assert rc.known_claim_name(pod(), {"name": "x"}) is None
    assert rc.known_claim_name(pod(statuses=[{"name": "gpu", "resourceClaimName": "g"}]), TEMPLATE_CLAIM) == "g"


def test_pod_claim_names_and_keys():
    p = pod(
        claims=[
            TEMPLATE_CLAIM,
            PLAIN_CLAIM,
            {"name": "none", "resourceClaimTemplateName": "t2"},
            {"name": "unset", "resourceClaimTemplateName": "t3"},
        ],
        statuses=[{"name": "gpu", "resourceClaimName": "gen"}, {"name": "none"}],
        extended="ext",
    )
    assert rc.pod_claim_names(p) == [("gen", True), ("plain", False), ("ext", True)]
    assert rc.pod_claim_keys(p) == ["ns/gen", "ns/plain", "ns/ext"]
    assert rc.pod_claim_keys(p, extended=False) == ["ns/gen", "ns/plain"]
    assert rc.pod_claim_names(pod()) == []
    assert rc.pod_key(p) == "ns/p"


def test_pod_done():
    assert not rc.is_pod_done(pod())
    assert rc.is_pod_done(pod(phase="Succeeded")) and rc.is_pod_done(pod(phase="Failed", node="n"))
    assert rc.is_pod_done(pod(deleting=True))  # deleted before it was scheduled
    assert not rc.is_pod_done(pod(deleting=True, node="n"))  # terminating on its node
    assert rc.is_terminal(pod(phase="Failed")) and not rc.is_terminal(pod(deleting=True))


def test_owner():
    p = pod(uid="u1")
    assert rc.is_for_pod(p, claim(owner_uid="u1")) is None
    assert "(Pod is not owner)" in rc.is_for_pod(p, claim(owner_uid="u2"))
    assert "(Pod is not owner)" in rc.is_for_pod(p, claim())
    assert "not in the same namespace" in rc.is_for_pod(p, claim(owner_uid="u1", ns="other"))
    assert rc.owning_pod(claim(owner_uid="u1")) == ("p", "u1")
    assert rc.owning_pod(claim(owner_uid="u1", owner_kind="Job")) == ("", "")
    assert rc.controller_ref(claim(owner_uid="u1", owner_kind="Job"))["kind"] == "Job"
    assert rc.controller_ref(claim()) is None


def test_allocation_and_reservations():
    entry = {"resource": "pods", "name": "p", "uid": "u1"}
    other = {"apiGroup": "example.com", "resource": "things", "name": "t", "uid": "t1"}
    c = claim(reserved=[other, entry], allocated=True)
    assert rc.is_allocated(c) and not rc.is_allocated(claim())
    assert [r["device"] for r in rc.allocation_results(c)] == ["gpu-0"] and rc.allocation_results(claim()) == []
    assert rc.is_reserved_for_pod(pod(uid="u1"), c)
    assert not rc.is_reserved_for_pod(pod(uid="u2"), c)  # a new Pod under the same name
    assert rc.is_pod_entry(entry) and not rc.is_pod_entry(other)
    assert rc.reserved_pod_names(c) == ["p"] and rc.reserved_pod_names(claim()) == []
