"""What the caches keep of a Pod: the fields the claims and taints decisions read, nothing else.

client-go's informers can drop fields with a transform (``SetTransform``; kube-controller-manager
drops ``managedFields`` so); here a cached Pod keeps its identity and the DRA-relevant parts of
spec and status. Containers, volumes and the rest of a Pod were most of its size in memory (a Pod
of a few KB of JSON is several times that as Python dicts), and nothing of ours writes a whole
Pod back: status writes are apply or merge patches built from scratch, evictions name the Pod.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

POD_SPEC = ("nodeName", "resourceClaims", "schedulingGroup")  # schedulingGroup: PodGroup claims (KEP-5729)
# conditions: the taints operator's DisruptionTarget; phase: finished Pods release their claims.
POD_STATUS = ("phase", "resourceClaimStatuses", "extendedResourceClaimStatus", "conditions")


def pod(obj: Obj) -> Obj:
    """The cached form of ``obj`` (a new dict; ``obj`` is left as it is)."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "apiVersion": obj.get("apiVersion", "v1"),
        "kind": obj.get("kind", "Pod"),
        "metadata": meta,
        "spec": {k: spec[k] for k in POD_SPEC if k in spec},
        "status": {k: status[k] for k in POD_STATUS if k in status},
    }
