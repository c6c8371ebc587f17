import pytest

from operators.nodeagent.plugin.checkpoint import PreparedClaim, PreparedDevice
from operators.nodeagent.plugin.prepare import PrepareError, plan_claim

REQ = {"namespace": "ns", "name": "c", "uid": "u1"}
KW = dict(driver="d", node="n1", known_devices={"gpu-0", "gpu-1"}, prepared={})


def claim(results, node="n1", uid="u1"):
    allocation = {"devices": {"results": results}}
    if node:
        allocation["nodeSelector"] = {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        }
    return {"metadata": {"uid": uid}, "status": {"allocation": allocation}}


def result(device="gpu-0", driver="d", pool="n1", request="gpu", **extra):
    return {"driver": driver, "pool": pool, "device": device, "request": request, **extra}


def test_devices_of_this_driver_with_top_level_request_names():
    plan = plan_claim(claim([result(request="gpu/big"), result("x", driver="other"), result("gpu-1")]), REQ, **KW)
    assert [(a.device, a.request) for a in plan] == [("gpu-0", "gpu"), ("gpu-1", "gpu")]


@pytest.mark.parametrize(
    "body,message",
    [
        (None, "does not exist"),
        (claim([result()], uid="u2"), "got replaced"),
        ({"metadata": {"uid": "u1"}, "status": {}}, "is not allocated"),
        (claim([result()], node="n2"), "allocated on node n2, not on this node n1"),
        (claim([result(driver="other")]), "has no device of driver d"),
        (claim([result("gpu-9")]), "is not a device of driver d on node n1"),
    ],
)
def test_problems_are_errors_for_the_claim(body, message):
    with pytest.raises(PrepareError, match=message):
        plan_claim(body, REQ, **KW)


def test_exclusive_device_of_another_claim_is_refused_but_admin_and_shares_are_not():
    other = {
        "u0": PreparedClaim(uid="u0", namespace="ns", name="first", devices=[PreparedDevice(pool="n1", device="gpu-0")])
    }
    with pytest.raises(PrepareError, match="already prepared for ResourceClaim ns/first"):
        plan_claim(claim([result()]), REQ, **{**KW, "prepared": other})
    assert plan_claim(claim([result(adminAccess=True)]), REQ, **{**KW, "prepared": other})[0].admin_access
    shared = {"u0": PreparedClaim(uid="u0", devices=[PreparedDevice(pool="n1", device="gpu-0", shareID="s0")])}
    assert plan_claim(claim([result(shareID="s1")]), REQ, **{**KW, "prepared": shared})[0].share_id == "s1"
