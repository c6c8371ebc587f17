"""A claim's state and the one binding-readiness rule (isClaimReadyForBinding) shared by the
binding operator and explain."""

import pytest

from operators.core.dra.claimstate import (
    FAILED,
    PENDING,
    READY,
    binding_state,
    claim_state,
    device_binding_verdict,
)


def cond(kind, status="True"):
    return {"type": kind, "status": status}


@pytest.mark.parametrize(
    ("conditions", "verdict"),
    [
        ([], PENDING),
        ([cond("x")], PENDING),  # every binding condition must be True
        ([cond("x"), cond("y", "False")], PENDING),
        ([cond("x"), cond("y")], READY),
        ([cond("x"), cond("y"), cond("f")], FAILED),  # failure wins
        ([cond("f", "False"), cond("x"), cond("y")], READY),
        ([cond("x"), cond("x", "False"), cond("y")], READY),  # the first condition of a type counts
    ],
)
def test_device_binding_verdict(conditions, verdict):
    assert device_binding_verdict(conditions, ["x", "y"], ["f"]) == verdict


def claim(*device_conditions, reserved=False):
    results = [
        {
            "request": "r",
            "driver": "d",
            "pool": "p",
            "device": f"g{i}",
            "bindingConditions": ["x"],
            "bindingFailureConditions": ["f"],
        }
        for i in range(len(device_conditions))
    ]
    status = {
        "allocation": {"devices": {"results": results}},
        "devices": [
            {"driver": "d", "pool": "p", "device": f"g{i}", "conditions": c} for i, c in enumerate(device_conditions)
        ],
    }
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "a", "uid": "1"}]
    return {"metadata": {"name": "c", "namespace": "n"}, "status": status}


def test_claim_state_follows_the_device_verdicts():
    assert claim_state(None) == "missing"
    assert claim_state(claim([cond("x")], [])) == "binding"
    assert claim_state(claim([cond("x")], [cond("f")])) == "binding-failed"
    assert claim_state(claim([cond("x")], [cond("x")], reserved=True)) == "reserved"
    state = binding_state(claim([cond("x")], [cond("x", "False")]))
    assert state["verdict"] == PENDING and [p["device"] for p in state["pending"]] == ["d/p/g1"]
