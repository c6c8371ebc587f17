"""Pods as the API server returns them, for the unit tests of claim decisions."""


def pod(name="p", uid="u1", claims=(), statuses=None, node="", phase="Running", deleting=False, ns="ns", extended=None):
    meta = {"name": name, "namespace": ns, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase}
    if statuses is not None:
        status["resourceClaimStatuses"] = statuses
    if extended:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended, "requestMappings": []}
    return {"metadata": meta, "spec": {"resourceClaims": list(claims), "nodeName": node}, "status": status}
