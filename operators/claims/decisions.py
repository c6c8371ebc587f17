"""What the claims operator decides, as pure functions over plain dicts.

Each function mirrors a piece of upstream's resourceclaim-controller
(pkg/controller/resourceclaim/controller.go at v1.37.1); the upstream name is given where it
differs. How a Pod names its claims and whose a claim is: ``core.resourceclaim``.
"""

from __future__ import annotations

import copy
import datetime
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..core.dra import podgroup as pg
from ..core.dra.metatime import parse_time
from ..core.dra.resourceclaim import (
    POD_CLAIM_ANNOTATION,
    ClaimNotCreatedYet,
    Obj,
    UnsupportedPodClaim,
    allocation_results,
    claim_name,
    controller_ref,
    is_allocated,
    is_pod_done,
    is_terminal,
    pod_claims,
)

EXTENDED_RESOURCE_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
FINALIZER = "resource.kubernetes.io/delete-protection"
FIELD_MANAGER = "ResourceClaimController"
MAX_GENERATE_NAME_BASE = 57  # 63 minus a hyphen and the API server's 5 random characters


def pod_needs_claims(pod: Obj, deleted: bool) -> bool:
    """``podNeedsClaims``: False when the Pod will never run (again)."""
    return not deleted and not is_pod_done(pod)


def pod_needs_work(
    pod: Obj,
    get_claim: Callable[[str], Obj | None],
    get_group: Callable[[str], Obj | None] = lambda key: None,
    *,
    generic_workload: bool = False,
    workload_claims: bool = False,
) -> bool:
    """``podNeedsWork``: a claim must be created, or an allocated claim reserved for a
    scheduled Pod. Terminal Pods need no work (unlike upstream, kubernetes#141274: upstream
    re-reserves a claim for a finished but scheduled Pod, and cleanup then fights it).

    A missing claim that the Pod shares with its PodGroup is the PodGroup's to create, so it is
    no work for the Pod (gate on or off: with the gate off it is never created, KEP-5729)."""
    if pod["metadata"].get("deletionTimestamp") or is_terminal(pod):
        return False
    namespace = pod["metadata"]["namespace"]
    for pod_claim in pod_claims(pod):
        try:
            name, check_owner = claim_name(pod, pod_claim)
        except (ClaimNotCreatedYet, UnsupportedPodClaim):
            return True
        if name is None:
            continue
        claim = get_claim(f"{namespace}/{name}")
        if claim is None:
            if pod_claim.get("resourceClaimTemplateName"):
                try:
                    group = pod_group_of(pod, get_group, generic_workload)
                except GroupLookupError:
                    return True  # the claim might have to be created from the template
                try:
                    bind = pg.bind_to(pod, group, pod_claim)
                except pg.BindError:
                    continue
                if pg.is_group_entry(bind):
                    continue
                return True  # must create (or re-create) it from the template
            continue  # the user must create it
        if check_owner and pg.is_for_pod_or_group(pod, claim, workload_claims):
            continue
        if not pod["spec"].get("nodeName"):
            continue
        if is_allocated(claim) and not pg.is_reserved_for_pod_or_group(pod, claim, workload_claims):
            return True
    return False


class GroupLookupError(Exception):
    """``getPodGroup`` failed: retried, unless ``retry`` is False (the PodGroup API is off)."""

    def __init__(self, message: str, retry: bool = True):
        super().__init__(message)
        self.retry = retry


def pod_group_of(pod: Obj, get_group: Callable[[str], Obj | None], generic_workload: bool) -> Obj | None:
    """``getPodGroup``: the PodGroup the Pod is a member of, from the cache; None for a Pod in no
    group. Upstream looks it up whether or not DRAWorkloadResourceClaims is on."""
    name = pg.pod_group_name(pod)
    if not name:
        return None
    if not generic_workload:
        raise GroupLookupError(
            f"Pod is a member of PodGroup {name} but GenericWorkload feature is disabled", retry=False
        )
    group = get_group(f"{pod['metadata']['namespace']}/{name}")
    if group is None:
        raise GroupLookupError(f'podgroup.scheduling.k8s.io "{name}" not found')
    return group


def pod_group_needs_work(pod_group: Obj, get_claim: Callable[[str], Obj | None]) -> bool:
    """``podGroupNeedsWork``: a claim of the PodGroup must be created from its template."""
    if pod_group["metadata"].get("deletionTimestamp"):
        return False
    namespace = pod_group["metadata"]["namespace"]
    for group_claim in pg.group_claims(pod_group):
        try:
            name, _ = pg.claim_name_from_group(pod_group, group_claim)
        except (ClaimNotCreatedYet, UnsupportedPodClaim):
            return True
        if name is None:
            continue
        if get_claim(f"{namespace}/{name}") is None and group_claim.get("resourceClaimTemplateName"):
            return True
    return False


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """``<pod>-<claim>-``, or both names cut in proportion (integer maths on the uncut length,
    no trailing hyphen) when that is longer than 57 characters."""
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) <= MAX_GENERATE_NAME_BASE:
        return base
    full = len(base)
    return (
        pod_name[: len(pod_name) * MAX_GENERATE_NAME_BASE // full]
        + "-"
        + pod_claim_name[: len(pod_claim_name) * MAX_GENERATE_NAME_BASE // full]
    )


def needs_admin_access(claim_spec: Obj) -> bool:
    return any(
        (r.get("exactly") or {}).get("adminAccess") for r in (claim_spec.get("devices") or {}).get("requests") or []
    )


def has_prioritized_list(claim_spec: Obj) -> bool:
    return any(r.get("firstAvailable") for r in (claim_spec.get("devices") or {}).get("requests") or [])


def template_problem(template: Obj, admin_access: bool, prioritized_list: bool) -> str | None:
    """Why a claim cannot be made from ``template`` on this cluster (upstream's messages)."""
    spec = (template.get("spec") or {}).get("spec") or {}
    if not admin_access and needs_admin_access(spec):
        return "admin access is requested, but the feature is disabled"
    if not prioritized_list and has_prioritized_list(spec):
        return "template includes a prioritized list of subrequests, but the feature is disabled"
    return None


def build_claim(pod: Obj, pod_claim: Obj, template: Obj) -> Obj:
    """The ResourceClaim upstream creates for ``pod_claim`` of ``pod`` from ``template``."""
    # 1.35+: controller only (1.34 also set blockOwnerDeletion).
    owner = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod["metadata"]["name"],
        "uid": pod["metadata"]["uid"],
        "controller": True,
    }
    return _claim_from_template(pod["metadata"], pod_claim["name"], owner, template)


def build_group_claim(pod_group: Obj, group_claim: Obj, template: Obj) -> Obj:
    """``handlePodGroupClaim``: the claim for ``group_claim`` of ``pod_group``, controlled by the
    PodGroup and named ``<podgroup>-<claim>-``, with the same pod-claim annotation."""
    owner = {
        "apiVersion": pg.API_VERSION,
        "kind": pg.KIND,
        "name": pod_group["metadata"]["name"],
        "uid": pod_group["metadata"]["uid"],
        "controller": True,
    }
    return _claim_from_template(pod_group["metadata"], group_claim["name"], owner, template)


def _claim_from_template(owner_meta: Obj, claim_key: str, owner: Obj, template: Obj) -> Obj:
    template_meta = (template.get("spec") or {}).get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_ANNOTATION] = claim_key
    metadata: Obj = {
        "generateName": generate_name(owner_meta["name"], claim_key),
        "namespace": owner_meta["namespace"],
        "ownerReferences": [owner],
        "annotations": annotations,
    }
    if template_meta.get("labels"):
        metadata["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": copy.deepcopy((template.get("spec") or {}).get("spec") or {}),
    }


def find_generated_claim(owned_claims: list[Obj], pod_claim_name: str) -> Obj | None:
    """``findPodResourceClaim``: the first claim the Pod controls that carries the pod-claim
    annotation for ``pod_claim_name``; claims without the annotation are never adopted."""
    for claim in owned_claims:
        if (claim["metadata"].get("annotations") or {}).get(POD_CLAIM_ANNOTATION) == pod_claim_name:
            return claim
    return None


def merge_claim_statuses(pod: Obj, new: dict[str, str]) -> list[Obj]:
    """Existing entries that name a claim, overridden by ``new``, sorted by pod claim name."""
    merged = {
        s["name"]: s["resourceClaimName"]
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if s.get("resourceClaimName")
    }
    merged.update(new)
    return [{"name": name, "resourceClaimName": merged[name]} for name in sorted(merged)]


def build_pod_status_apply(pod: Obj, statuses: list[Obj]) -> Obj:
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {"resourceClaimStatuses": statuses},
    }


def pod_reference(pod: Obj) -> Obj:
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


def build_group_status_apply(pod_group: Obj, new: dict[str, str]) -> Obj:
    """``syncPodGroup``'s apply: only the claims created or found in this sync (as upstream; the
    apply is forced and owned by the same field manager)."""
    meta = pod_group["metadata"]
    return {
        "apiVersion": pg.API_VERSION,
        "kind": pg.KIND,
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": {"resourceClaimStatuses": [{"name": n, "resourceClaimName": new[n]} for n in sorted(new)]},
    }


@dataclass(frozen=True)
class ReservationCheck:
    """How ``syncClaim`` judges one ``reservedFor`` Pod entry."""

    keep: bool
    needs_api_check: bool = False  # the cache does not know the Pod: ask the API server


def check_pod_reservation(entry: Obj, cached_pod: Obj | None, deleted_uids: Any) -> ReservationCheck:
    if entry.get("uid") in deleted_uids:
        return ReservationCheck(keep=False)
    if cached_pod is None:
        return ReservationCheck(keep=True, needs_api_check=True)
    if cached_pod["metadata"].get("uid") != entry.get("uid"):
        return ReservationCheck(keep=False)
    return ReservationCheck(keep=not is_pod_done(cached_pod))


def check_group_reservation(entry: Obj, cached_group: Obj | None, deleted_uids: Any) -> ReservationCheck:
    """How ``syncClaim`` judges a PodGroup entry (gate on): kept while the PodGroup of that UID exists."""
    if entry.get("uid") in deleted_uids:
        return ReservationCheck(keep=False)
    if cached_group is None:
        return ReservationCheck(keep=True, needs_api_check=True)
    return ReservationCheck(keep=cached_group["metadata"].get("uid") == entry.get("uid"))


def released_claim_status(claim: Obj, remaining: list[Obj]) -> Obj:
    """The claim to UpdateStatus after dropping consumers: ``reservedFor = remaining``, and the
    allocation cleared in the same write when no consumer is left and the claim carries the
    delete-protection finalizer (only the transition to unreserved deallocates)."""
    updated = copy.deepcopy(claim)
    status = updated.setdefault("status", {})
    if remaining:
        status["reservedFor"] = remaining
    else:
        status.pop("reservedFor", None)
        if FINALIZER in (updated["metadata"].get("finalizers") or []):
            status.pop("allocation", None)
    return updated


def without_finalizer(claim: Obj) -> Obj:
    updated = copy.deepcopy(claim)
    updated["metadata"]["finalizers"] = [f for f in updated["metadata"].get("finalizers") or [] if f != FINALIZER]
    return updated


def has_finalizer(claim: Obj) -> bool:
    return FINALIZER in (claim["metadata"].get("finalizers") or [])


def admin_access_label(claim: Obj | None) -> str:
    return "true" if claim and needs_admin_access(claim.get("spec") or {}) else "false"


def claim_source_label(claim: Obj) -> str:
    annotations = claim["metadata"].get("annotations") or {}
    if annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION) == "true":
        return "extended_resource"
    if annotations.get(POD_CLAIM_ANNOTATION):
        return "resource_claim_template"
    return ""


def owner_labels(claim: Obj) -> tuple[str, str]:
    """(owner_api_group, owner_api_kind) of the claim's controller, as upstream's create metric."""
    ref = controller_ref(claim)
    if ref is None:
        return "", ""
    group_version = ref.get("apiVersion", "")
    return (group_version.split("/", 1)[0] if "/" in group_version else ""), ref.get("kind", "")


# -- metrics computed from the caches at scrape time -----------------------------------------


def waiting_for_claims(
    pods: Iterable[Obj], get_claim: Callable[[str], Obj | None], now: datetime.datetime
) -> tuple[int, float]:
    """(Pods waiting for a ResourceClaim from a template, seconds since the oldest of them was
    created): Pods that will still run with a template claim whose ResourceClaim is not recorded
    in their status yet, or is recorded but not (or no longer) in the cache. Such a Pod cannot
    be scheduled; a count that stays up means the operator cannot create claims (a missing
    template, RBAC, quota, an admission webhook)."""
    count, oldest = 0, 0.0
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp") or is_pod_done(pod):
            continue
        namespace = pod["metadata"]["namespace"]
        waiting = False
        for pod_claim in pod_claims(pod):
            if not pod_claim.get("resourceClaimTemplateName"):
                continue
            try:
                name, _ = claim_name(pod, pod_claim)
            except ClaimNotCreatedYet:
                waiting = True
                break
            if name and get_claim(f"{namespace}/{name}") is None:
                waiting = True
                break
        if waiting:
            count += 1
            created = parse_time(pod["metadata"].get("creationTimestamp"))
            if created is not None:
                oldest = max(oldest, (now - created).total_seconds())
    return count, oldest


def age_seconds(obj: Obj, now: datetime.datetime) -> float:
    """Seconds since ``obj`` was created (0 when it has no creationTimestamp)."""
    created = parse_time(obj["metadata"].get("creationTimestamp"))
    return max(0.0, (now - created).total_seconds()) if created is not None else 0.0


def allocated_devices(claims: Iterable[Obj]) -> dict[tuple[str, str], int]:
    """Devices allocated by the claims, by (driver, pool): what the pool's published devices less
    this is free. A device shared by several claims (admin access, consumable capacity) counts
    once per claim, as the claims see it."""
    tally: Counter[tuple[str, str]] = Counter()
    for claim in claims:
        for result in allocation_results(claim):
            tally[(result.get("driver") or "", result.get("pool") or "")] += 1
    return dict(tally)
