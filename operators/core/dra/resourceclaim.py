"""How Pods and ResourceClaims refer to each other, as pure functions over plain dicts.

Mirrors k8s.io/dynamic-resource-allocation/resourceclaim at v1.37.1 (``Name``, ``IsForPod``,
``IsReservedForPod``) and the Pod checks upstream's controllers share (``isPodDone``). Every
operator and ``dra-operators devices`` find a Pod's claims through these, so they agree on which
claim a Pod uses, whom a claim belongs to and whom it is reserved for.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

# resourceapi.PodResourceClaimAnnotation: on a generated claim, the Pod's name for it.
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"


class ClaimNotCreatedYet(Exception):
    """``resourceclaim.ErrClaimNotFound``: the template's claim has no status entry yet."""


class UnsupportedPodClaim(Exception):
    """``resourceclaim.ErrAPIUnsupported``: neither a claim nor a template is named."""


# -- a Pod's claims ------------------------------------------------------------------------------


def pod_key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def pod_claims(pod: Obj) -> list[Obj]:
    """``spec.resourceClaims``."""
    return (pod.get("spec") or {}).get("resourceClaims") or []


def claim_name(pod: Obj, pod_claim: Obj) -> tuple[str | None, bool]:
    """``resourceclaim.Name``: (claim name or None for "no claim needed", must check owner)."""
    if pod_claim.get("resourceClaimName"):
        return pod_claim["resourceClaimName"], False
    if pod_claim.get("resourceClaimTemplateName"):
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("name") == pod_claim["name"]:
                return status.get("resourceClaimName"), True
        raise ClaimNotCreatedYet(f'pod "{pod_key(pod)}": ResourceClaim not created yet')
    raise UnsupportedPodClaim(
        f'pod "{pod_key(pod)}", spec.resourceClaim "{pod_claim.get("name")}": none of the supported fields are set'
    )


def known_claim_name(pod: Obj, pod_claim: Obj) -> str | None:
    """The claim's name once it is known: None while a template's claim is not created yet,
    when no claim is needed, or when the pod claim names none."""
    try:
        name, _ = claim_name(pod, pod_claim)
    except (ClaimNotCreatedYet, UnsupportedPodClaim):
        return None
    return name or None


def extended_claim_name(pod: Obj) -> str | None:
    """The claim the scheduler made for the Pod's extended resources (``status.extendedResourceClaimStatus``)."""
    return ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")


def uses_claims(pod: Obj) -> bool:
    """Whether the Pod has anything to do with DRA: claims in its spec, or the scheduler's
    extended-resource claim. Upstream's claim controller ignores the other Pods' events
    (``enqueuePod``); our caches do not even keep them (see ``Informer``'s ``keep``)."""
    return bool(pod_claims(pod) or extended_claim_name(pod))


def may_use_claims(line: bytes) -> bool:
    """``uses_claims`` on a raw watch line of a Pod, before it is parsed: False only when the line
    names neither ``resourceClaims`` nor ``extendedResourceClaimStatus`` (then the Pod uses no
    claim); True may still be a Pod without one."""
    return b'"resourceClaims"' in line or b'"extendedResourceClaimStatus"' in line


def pod_claim_names(pod: Obj, *, extended: bool = True) -> list[tuple[str, bool]]:
    """(claim name, must check owner) for every claim of ``spec.resourceClaims`` whose name is
    known (``claim_name``), then, with ``extended``, the scheduler's extended-resource claim
    (made for the Pod: its owner is checked)."""
    names = []
    for pod_claim in pod_claims(pod):
        try:
            name, check_owner = claim_name(pod, pod_claim)
        except (ClaimNotCreatedYet, UnsupportedPodClaim):
            continue
        if name:
            names.append((name, check_owner))
    if extended and (name := extended_claim_name(pod)):
        names.append((name, True))
    return names


def pod_claim_keys(pod: Obj, *, extended: bool = True) -> list[str]:
    """``namespace/name`` of ``pod_claim_names``."""
    namespace = pod["metadata"]["namespace"]
    return [f"{namespace}/{name}" for name, _ in pod_claim_names(pod, extended=extended)]


# -- whether a Pod still runs ----------------------------------------------------------------


def is_terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def is_pod_done(pod: Obj) -> bool:
    """``isPodDone``: terminal, or deleted before it was scheduled (it will never run)."""
    return is_terminal(pod) or bool(pod["metadata"].get("deletionTimestamp") and not pod["spec"].get("nodeName"))


# -- a claim's owner, allocation and consumers ---------------------------------------------------


def controller_ref(obj: Obj) -> Obj | None:
    """The ownerReference with ``controller: true`` (the API server allows one at most)."""
    owners: list[Obj] = obj["metadata"].get("ownerReferences") or []
    for owner in owners:
        if owner.get("controller"):
            return owner
    return None


def owning_pod(claim: Obj) -> tuple[str, str]:
    """(name, uid) of the controlling Pod, or ("", "")."""
    for owner in claim["metadata"].get("ownerReferences") or []:
        if owner.get("controller") and owner.get("apiVersion") == "v1" and owner.get("kind") == "Pod":
            return owner["name"], owner["uid"]
    return "", ""


def is_for_pod(pod: Obj, claim: Obj) -> str | None:
    """``resourceclaim.IsForPod``: None when the Pod controls the claim, else why not."""
    p, c = pod["metadata"], claim["metadata"]
    if c.get("namespace") != p.get("namespace"):
        return (
            f"ResourceClaim {c.get('namespace')}/{c['name']} is not in the same namespace as "
            f"Pod {p.get('namespace')}/{p['name']}"
        )
    ref = controller_ref(claim)
    if ref is None or ref.get("uid") != p.get("uid"):
        return (
            f"ResourceClaim {c['namespace']}/{c['name']} was not created for "
            f"Pod {p['namespace']}/{p['name']} (Pod is not owner)"
        )
    return None


def is_allocated(claim: Obj) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


def allocation_results(claim: Obj) -> list[Obj]:
    """``status.allocation.devices.results``: one entry per allocated device."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return (allocation.get("devices") or {}).get("results") or []


def is_pod_entry(entry: Obj) -> bool:
    """A ``reservedFor`` entry for a Pod (1.36+ allows other consumers)."""
    return not entry.get("apiGroup") and entry.get("resource") == "pods"


def reserved_pod_names(claim: Obj) -> list[str]:
    """Names of the Pods in ``reservedFor``, in its order."""
    return [
        r["name"] for r in (claim.get("status") or {}).get("reservedFor") or [] if is_pod_entry(r) and r.get("name")
    ]


def is_reserved_for_pod(pod: Obj, claim: Obj) -> bool:
    """``resourceclaim.IsReservedForPod``: by UID, so a new Pod of the same name is not."""
    uid = pod["metadata"].get("uid")
    return any(r.get("uid") == uid for r in (claim.get("status") or {}).get("reservedFor") or [])
