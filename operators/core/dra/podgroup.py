"""How PodGroups (scheduling.k8s.io/v1beta1, KEP-5729 DRAWorkloadResourceClaims) and their Pods
refer to ResourceClaims, as pure functions over plain dicts.

Mirrors k8s.io/dynamic-resource-allocation/resourceclaim at v1.37.1 (``NameFromPodGroup``,
``IsForPodGroup``, ``isForPodGroupByPod``, ``BindTo``, and the PodGroup halves of ``IsForPod``
and ``IsReservedForPod``). The Pod-only halves are in ``core.resourceclaim``.
"""

from __future__ import annotations

from typing import TypeGuard

from .resourceclaim import ClaimNotCreatedYet, Obj, UnsupportedPodClaim, controller_ref, is_for_pod

GROUP = "scheduling.k8s.io"
RESOURCE = "podgroups"
KIND = "PodGroup"
API_VERSION = f"{GROUP}/v1beta1"  # the version upstream's controller reads and writes in 1.37


def pod_group_name(pod: Obj) -> str | None:
    """``spec.schedulingGroup.podGroupName``: the PodGroup the Pod is a member of."""
    return ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")


def group_claims(pod_group: Obj) -> list[Obj]:
    """``spec.resourceClaims`` (dropped by the API server while the gate is off)."""
    return (pod_group.get("spec") or {}).get("resourceClaims") or []


def group_template_keys(pod_group: Obj) -> list[str]:
    """``podGroupResourceClaimTemplate`` index: ns/template of every template the PodGroup names."""
    namespace = pod_group["metadata"]["namespace"]
    return sorted(
        {
            f"{namespace}/{c['resourceClaimTemplateName']}"
            for c in group_claims(pod_group)
            if c.get("resourceClaimTemplateName")
        }
    )


def member_keys(pod: Obj) -> list[str]:
    """``podGroupMembers`` index: ns/podgroup of the Pod's PodGroup."""
    name = pod_group_name(pod)
    return [f"{pod['metadata']['namespace']}/{name}"] if name else []


def group_key(pod_group: Obj) -> str:
    return f"{pod_group['metadata']['namespace']}/{pod_group['metadata']['name']}"


def claim_name_from_group(pod_group: Obj, group_claim: Obj) -> tuple[str | None, bool]:
    """``resourceclaim.NameFromPodGroup``: (claim name or None for "no claim needed", must check owner)."""
    if group_claim.get("resourceClaimName"):
        return group_claim["resourceClaimName"], False
    if group_claim.get("resourceClaimTemplateName"):
        for status in (pod_group.get("status") or {}).get("resourceClaimStatuses") or []:
            if status.get("name") == group_claim["name"]:
                return status.get("resourceClaimName"), True
        raise ClaimNotCreatedYet(f"PodGroup {group_key(pod_group)}: ResourceClaim not created yet")
    raise UnsupportedPodClaim(
        f"PodGroup {group_key(pod_group)}, spec.resourceClaim {group_claim.get('name')}: "
        "none of the supported fields are set"
    )


def group_claim_keys(pod_group: Obj) -> list[str]:
    """``podGroupResourceClaim`` index: ns/claim for every claim name the PodGroup already knows."""
    keys = []
    for group_claim in group_claims(pod_group):
        try:
            name, _ = claim_name_from_group(pod_group, group_claim)
        except (ClaimNotCreatedYet, UnsupportedPodClaim):
            continue
        if name:
            keys.append(f"{pod_group['metadata']['namespace']}/{name}")
    return sorted(set(keys))


def is_group_controller(ref: Obj | None) -> TypeGuard[Obj]:
    """A controller reference to a PodGroup of any scheduling.k8s.io version (the version may change)."""
    return bool(ref and ref.get("kind") == KIND and str(ref.get("apiVersion", "")).startswith(GROUP + "/"))


def owning_group_uid(claim: Obj) -> str | None:
    """``claimPodGroupOwner`` index: the UID of the controlling PodGroup."""
    ref = controller_ref(claim)
    return ref.get("uid") if is_group_controller(ref) else None


def is_for_pod_group(pod_group: Obj, claim: Obj) -> str | None:
    """``resourceclaim.IsForPodGroup``: None when the PodGroup controls the claim, else why not."""
    g, c = pod_group["metadata"], claim["metadata"]
    if c.get("namespace") != g.get("namespace"):
        return (
            f"ResourceClaim {c.get('namespace')}/{c['name']} is not in the same namespace as "
            f"PodGroup {g.get('namespace')}/{g['name']}"
        )
    ref = controller_ref(claim)
    if ref is None or ref.get("uid") != g.get("uid"):
        return (
            f"ResourceClaim {c['namespace']}/{c['name']} was not created for PodGroup "
            f"{g['namespace']}/{g['name']} (PodGroup is not owner)"
        )
    return None


def is_for_pod_or_group(pod: Obj, claim: Obj, accept_group_owner: bool) -> str | None:
    """``resourceclaim.IsForPod`` with ``acceptPodGroupOwner``: the Pod, or (gate on) its PodGroup
    by name, kind and API group (a Pod does not know its PodGroup's UID), controls the claim."""
    problem = is_for_pod(pod, claim)
    group = pod_group_name(pod)
    if (
        problem is None
        or not accept_group_owner
        or not group
        or claim["metadata"].get("namespace") != pod["metadata"].get("namespace")
    ):
        return problem
    ref = controller_ref(claim)
    if is_group_controller(ref) and ref.get("name") == group:
        return None
    c = claim["metadata"]
    return (
        f"ResourceClaim {c['namespace']}/{c['name']} was not created for Pod {pod_key(pod)} "
        f"(neither Pod nor PodGroup {group} is the owner)"
    )


def pod_key(pod: Obj) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def is_reserved_for_pod_or_group(pod: Obj, claim: Obj, accept_group_reservation: bool) -> bool:
    """``resourceclaim.IsReservedForPod``: the Pod by UID, or (gate on) its PodGroup by name."""
    uid, group = pod["metadata"].get("uid"), pod_group_name(pod)
    for entry in (claim.get("status") or {}).get("reservedFor") or []:
        if entry.get("uid") == uid:
            return True
        if (
            accept_group_reservation
            and group
            and entry.get("apiGroup") == GROUP
            and entry.get("resource") == RESOURCE
            and entry.get("name") == group
        ):
            return True
    return False


def is_group_entry(entry: Obj) -> bool:
    """A ``reservedFor`` entry for a PodGroup."""
    return entry.get("apiGroup") == GROUP and entry.get("resource") == RESOURCE


class BindError(Exception):
    """``BindTo`` cannot tell whom the claim is for (upstream's message)."""


def bind_to(pod: Obj, pod_group: Obj | None, pod_claim: Obj) -> Obj:
    """``resourceclaim.BindTo``: the consumer a Pod's claim is reserved for — its PodGroup when a
    PodGroup claim has the same name, claim name and template name, else the Pod.
    ``pod_group`` is None unless the gate is on and the Pod is a member of one."""
    if not pod_claim.get("resourceClaimName") and not pod_claim.get("resourceClaimTemplateName"):
        raise BindError(f"Pod {pod_key(pod)} claim {pod_claim.get('name')}: none of the supported fields are set")
    if pod_group is not None:
        group, g = pod_group_name(pod), pod_group["metadata"]
        if not group:
            raise BindError(f"Pod {pod_key(pod)} does not belong to a PodGroup")
        if pod["metadata"].get("namespace") != g.get("namespace") or group != g["name"]:
            raise BindError(
                f"Pod {pod_key(pod)} belongs to PodGroup {pod['metadata'].get('namespace')}/{group}, "
                f"not PodGroup {g.get('namespace')}/{g['name']}"
            )
        for group_claim in group_claims(pod_group):
            if not group_claim.get("resourceClaimName") and not group_claim.get("resourceClaimTemplateName"):
                raise BindError(
                    f"PodGroup {group_key(pod_group)} claim {group_claim.get('name')}: "
                    "none of the supported fields are set"
                )
            if (
                group_claim.get("name") == pod_claim.get("name")
                and group_claim.get("resourceClaimName") == pod_claim.get("resourceClaimName")
                and group_claim.get("resourceClaimTemplateName") == pod_claim.get("resourceClaimTemplateName")
            ):
                return {"apiGroup": GROUP, "resource": RESOURCE, "name": g["name"], "uid": g["uid"]}
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
