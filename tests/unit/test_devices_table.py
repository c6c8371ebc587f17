from operators.devices import build_rows, claim_state, free_devices, render


def claim(name, results=(), reserved=(), ns="ns"):
    status = {}
    if results:
        status["allocation"] = {"devices": {"results": list(results)}}
    if reserved:
        status["reservedFor"] = list(reserved)
    return {"metadata": {"name": name, "namespace": ns}, "status": status}


def pod(name, claims, statuses=(), node="n1", phase="Running", ns="ns", extended=None):
    status = {"phase": phase, "resourceClaimStatuses": list(statuses)}
    if extended:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended}
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"resourceClaims": claims, "nodeName": node},
            "status": status}


RESULT = {"driver": "d", "pool": "n1", "device": "gpu-0", "request": "gpu"}


def test_rows_name_pod_claim_state_devices_and_node():
    pods = [pod("a", [{"name": "gpu", "resourceClaimTemplateName": "t"}], [{"name": "gpu", "resourceClaimName": "a-gpu-x"}]),
            pod("b", [{"name": "gpu", "resourceClaimTemplateName": "t"}], node="", phase="Pending"),
            pod("c", [], extended="c-extended-resources-y"),
            pod("plain", [])]
    claims = [claim("a-gpu-x", [RESULT], [{"name": "a"}]), claim("c-extended-resources-y", [dict(RESULT, device="gpu-1", shareID="abcdef0123", adminAccess=True)])]
    rows = build_rows(pods, claims)
    assert [(r.pod, r.claim, r.state, r.devices, r.node) for r in rows] == [
        ("a", "a-gpu-x", "reserved", "d/n1/gpu-0", "n1"),
        ("b", "(gpu: not created yet)", "waiting", "-", "-"),
        ("c", "c-extended-resources-y", "allocated", "d/n1/gpu-1 (share abcdef01) [admin]", "n1")]
    text = render(rows, {"n1": 3})
    assert text.splitlines()[0].split() == ["NAMESPACE", "POD", "PHASE", "CLAIM", "STATE", "DEVICES", "NODE"]
    assert text.endswith("free devices: n1 3")


def test_states_and_free_devices():
    assert claim_state(None) == "missing" and claim_state(claim("x")) == "pending"
    slices = [{"spec": {"driver": "d", "nodeName": "n1", "pool": {"name": "n1", "generation": 2},
                        "devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}},
              {"spec": {"driver": "d", "nodeName": "n1", "pool": {"name": "n1", "generation": 1},
                        "devices": [{"name": "old"}]}}]
    assert free_devices(slices, [claim("a", [RESULT])]) == {"n1": 1}
