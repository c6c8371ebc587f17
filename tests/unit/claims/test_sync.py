"""The claims controller's sync, table-driven as upstream's ``TestSyncHandler``
(k8s.io/kubernetes v1.37.1 pkg/controller/resourceclaim/controller_test.go): each case names the
upstream case it ports, the objects the API server and the caches start with, the key synced,
and the claims, Pod and PodGroup statuses, error and create metrics expected after it.

How a case runs, as upstream's: the API server (tests/fakeapi) holds ``pods``, ``pod_groups``,
``claims`` and ``templates``; the controller's caches get them through its watch handlers;
``claims_in_cache`` are only in the cache (upstream's mutation cache), ``claims_later`` and
``pods_later`` only in the API server (created after the informers stopped). Claim creates go
through upstream's ``createResourceClaimReactor`` (generateName + "-" + a counter from 1), and a
case expecting a failed create gets upstream's conflict reactor. Every case runs for each
feature combination it lists (all of them by default).

Where this controller answers differently, the case says so: errors that upstream returns but
that are not worth a retry are logged here and reported as the Pod's Warning Event
(``expected_event``); a claim whose last finalizer is removed while it is being deleted is
gone, as on a real API server (client-go's tracker keeps it).

Not ported: the extended-resource cases (none in TestSyncHandler), TestClaimExists,
TestEventHandlers and TestWorkqueue (informer and queue wiring, covered by the handler tests).
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field

import pytest

from operators.claims.controller import ClaimsController, Features
from operators.core.api.resources import EVENTS, POD_GROUPS, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from operators.core.machinery.workqueue import RetryableError
from tests.fakeapi import Action, FakeApi, conflict

# -- upstream's fixtures ------------------------------------------------------------------------

NS, OTHER_NS = "my-namespace", "not-my-namespace"
POD_NAME, POD_UID = "test-pod", "uidpod1"
GROUP_NAME, GROUP_UID = "test-podgroup", "uidpodgroup1"
CLAIM_NAME, TEMPLATE_NAME, NODE = "acme-resource", "my-template", "worker"
ANNOTATION = "resource.kubernetes.io/pod-claim-name"
FINALIZER = "resource.kubernetes.io/delete-protection"
ADMIN_OFF = "admin access is requested, but the feature is disabled"


def make_pod(name, ns, uid, *claims):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"resourceClaims": [copy.deepcopy(c) for c in claims]},
        "status": {},
    }


def pod_claim(name, template):
    return {"name": name, "resourceClaimTemplateName": template}


def in_group(pod, group=GROUP_NAME):
    pod = copy.deepcopy(pod)
    pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


def make_group(name, ns, uid, *claims):
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"resourceClaims": [copy.deepcopy(c) for c in claims]},
        "status": {},
    }


def owner(obj, controller=True):
    pod = obj["kind"] == "Pod"
    return {
        "apiVersion": "v1" if pod else "scheduling.k8s.io/v1beta1",
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": controller,
    }


def make_claim(name, ns, owner_ref=None):
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {}},
    }
    if owner_ref:
        claim["metadata"]["ownerReferences"] = [owner_ref]
    return claim


def admin_request(admin):
    return {"devices": {"requests": [{"name": "req-0", "exactly": {"deviceClassName": "class", "adminAccess": admin}}]}}


def make_templated_claim(claim_name, generate_name, ns, counter, owner_ref, admin=None):
    claim = make_claim(f"{generate_name}-{counter}", ns, owner_ref)
    claim["metadata"]["generateName"] = generate_name
    claim["metadata"]["annotations"] = {ANNOTATION: claim_name}
    if admin is not None:
        claim["spec"] = admin_request(admin)
    return claim


def make_template(name, ns, admin=None):
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"spec": {"devices": {}}},
    }
    if admin is not None:
        template["spec"]["spec"] = admin_request(admin)
    return template


def allocate(claim):
    """``allocateClaim``: upstream's empty AllocationResult; here one that is not empty, as an
    empty dict reads as no allocation."""
    claim = copy.deepcopy(claim)
    claim.setdefault("status", {})["allocation"] = {"devices": {"results": []}}
    return claim


def structured(claim):
    claim = copy.deepcopy(claim)
    claim["metadata"].setdefault("finalizers", []).append(FINALIZER)
    return claim


def reserve(claim, obj):
    claim = copy.deepcopy(claim)
    pod = obj["kind"] == "Pod"
    entry = {"resource": "pods" if pod else "podgroups", "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
    if not pod:
        entry["apiGroup"] = "scheduling.k8s.io"
    claim.setdefault("status", {}).setdefault("reservedFor", []).append(entry)
    return claim


def with_statuses(obj, **names):
    obj = copy.deepcopy(obj)
    obj["status"]["resourceClaimStatuses"] = [{"name": k, "resourceClaimName": v} for k, v in names.items()]
    return obj


def changed(obj, fn):
    obj = copy.deepcopy(obj)
    fn(obj)
    return obj


test_pod = make_pod(POD_NAME, NS, POD_UID)
pod_with_resource = make_pod(POD_NAME, NS, POD_UID, pod_claim(CLAIM_NAME, TEMPLATE_NAME))
pod_with_group_resource = in_group(pod_with_resource)
other_test_pod = make_pod(POD_NAME + "-II", NS, POD_UID + "-II")
test_group = make_group(GROUP_NAME, NS, GROUP_UID)
group_with_resource = make_group(GROUP_NAME, NS, GROUP_UID, pod_claim(CLAIM_NAME, TEMPLATE_NAME))

test_claim = make_claim(f"{POD_NAME}-{CLAIM_NAME}", NS, owner(pod_with_resource))
test_claim_allocated = allocate(test_claim)
test_claim_reserved = reserve(test_claim_allocated, pod_with_resource)
test_claim_reserved_twice = reserve(test_claim_reserved, other_test_pod)
test_claim_reserved_for_group = reserve(test_claim_allocated, group_with_resource)

templated = make_templated_claim(CLAIM_NAME, f"{POD_NAME}-{CLAIM_NAME}-", NS, 1, owner(pod_with_resource))
templated_allocated = allocate(templated)
templated_reserved = reserve(templated_allocated, pod_with_resource)
templated_reserved_for_group = reserve(templated_allocated, group_with_resource)
templated_group = make_templated_claim(CLAIM_NAME, f"{GROUP_NAME}-{CLAIM_NAME}-", NS, 1, owner(group_with_resource))
templated_with_admin = make_templated_claim(
    CLAIM_NAME, f"{POD_NAME}-{CLAIM_NAME}-", NS, 1, owner(pod_with_resource), admin=True
)

conflicting_claim = make_claim(f"{POD_NAME}-{CLAIM_NAME}", NS)
conflicting_group_claim = make_claim(f"{GROUP_NAME}-{CLAIM_NAME}", NS)
other_namespace_claim = make_claim(f"{POD_NAME}-{CLAIM_NAME}", OTHER_NS)
template = make_template(TEMPLATE_NAME, NS)
template_with_admin = make_template(TEMPLATE_NAME, NS, admin=True)

pod_with_node_name = changed(
    with_statuses(pod_with_resource, **{CLAIM_NAME: templated["metadata"]["name"]}),
    lambda p: p["spec"].update(nodeName=NODE),
)
pod_with_group_and_node_name = in_group(pod_with_node_name)
group_with_resource_in_status = with_statuses(group_with_resource, **{CLAIM_NAME: templated_group["metadata"]["name"]})

POD_KEY, GROUP_KEY = f"pod:{NS}/{POD_NAME}", f"podgroup:{NS}/{GROUP_NAME}"


def claim_key(claim):
    return f"claim:{claim['metadata']['namespace']}/{claim['metadata']['name']}"


# Upstream's feature combinations (WorkloadResourceClaims needs GenericWorkload).
ALL = [
    Features(admin_access=a, prioritized_list=p, generic_workload=g, workload_claims=w)
    for a, g, p, w in itertools.product((False, True), repeat=4)
    if g or not w
]
ADMIN_OFF_FEATURES = [f for f in ALL if not f.admin_access]
ADMIN_ON_FEATURES = [f for f in ALL if f.admin_access]
GENERIC_OFF = [f for f in ALL if not f.generic_workload]
GENERIC_ON = [f for f in ALL if f.generic_workload]
WORKLOAD_OFF = [f for f in ALL if not f.workload_claims]
WORKLOAD_ON = [f for f in ALL if f.workload_claims]
WORKLOAD_OFF_GENERIC_ON = [f for f in ALL if f.generic_workload and not f.workload_claims]

SUCCESS_POD = {("success", "false", "", "Pod"): 1}
SUCCESS_GROUP = {("success", "false", "scheduling.k8s.io", "PodGroup"): 1}


@dataclass
class Case:
    name: str
    key: str
    features: list[Features] = field(default_factory=lambda: ALL)
    pods: list = field(default_factory=list)
    pod_groups: list = field(default_factory=list)
    claims: list = field(default_factory=list)
    claims_in_cache: list = field(default_factory=list)
    claims_later: list = field(default_factory=list)
    pods_later: list = field(default_factory=list)
    templates: list = field(default_factory=list)
    expected_claims: list = field(default_factory=list)
    expected_statuses: dict = field(default_factory=dict)
    expected_group_statuses: dict = field(default_factory=dict)
    expected_error: str = ""
    expected_event: str = ""  # the Warning Event a not-retried failure leaves instead
    expected_metrics: dict = field(default_factory=dict)
    expected_patches: int | None = None  # Pod status applies, where upstream counts them


def statuses(**names):
    return {POD_NAME: [{"name": k, "resourceClaimName": v} for k, v in names.items()]}


def group_statuses(**names):
    return {GROUP_NAME: [{"name": k, "resourceClaimName": v} for k, v in names.items()]}


T = templated["metadata"]["name"]  # test-pod-acme-resource--1
TG = templated_group["metadata"]["name"]  # test-podgroup-acme-resource--1
MISSING_TEMPLATE = (
    'resource claim template "my-template": resourceclaimtemplates.resource.k8s.io "my-template" not found'
)
CONFLICT = (
    'create ResourceClaim : Operation cannot be fulfilled on resourceclaims.resource.k8s.io "fake name": fake conflict'
)

CASES = [
    Case(
        "create",
        POD_KEY,
        pods=[pod_with_resource],
        templates=[template],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics=SUCCESS_POD,
    ),
    Case(
        "create-adminaccess-feature-disabled",
        POD_KEY,
        ADMIN_OFF_FEATURES,
        pods=[pod_with_resource],
        templates=[template_with_admin],
        expected_error=ADMIN_OFF,
    ),
    Case(
        "create-adminaccess-feature-enabled",
        POD_KEY,
        ADMIN_ON_FEATURES,
        pods=[pod_with_resource],
        templates=[template_with_admin],
        expected_claims=[templated_with_admin],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics={("success", "true", "", "Pod"): 1},
    ),
    Case(
        "create-for-grouped-pod",
        POD_KEY,
        WORKLOAD_ON,
        pods=[in_group(pod_with_resource)],
        pod_groups=[test_group],
        templates=[template],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics=SUCCESS_POD,
    ),
    Case(
        "skip-create-for-pod-podgroup-does-not-exist",
        POD_KEY,
        GENERIC_ON,
        pods=[in_group(pod_with_resource)],
        templates=[template],
        expected_error='podgroup.scheduling.k8s.io "test-podgroup" not found',
    ),
    Case(
        "create-for-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        templates=[template],
        expected_claims=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
        expected_metrics=SUCCESS_GROUP,
    ),
    Case(
        "skip-create-podgroup-claim-for-pod",
        POD_KEY,
        WORKLOAD_ON,
        pods=[pod_with_group_resource],
        pod_groups=[group_with_resource],
        templates=[template],
    ),
    Case(
        "update-pod-status-with-podgroup-claim",
        POD_KEY,
        WORKLOAD_ON,
        pods=[pod_with_group_resource],
        pod_groups=[group_with_resource],
        claims=[templated_group],
        templates=[template],
        expected_claims=[templated_group],
        expected_statuses=statuses(**{CLAIM_NAME: TG}),
    ),
    # Upstream returns the error; here it is not retried: logged, no Event (the PodGroup lookup
    # comes before any claim).
    Case(
        "skip-create-for-pod-with-podgroup-claim-genericworkload-disabled",
        POD_KEY,
        GENERIC_OFF,
        pods=[pod_with_group_resource],
        pod_groups=[group_with_resource],
        templates=[template],
    ),
    Case(
        "skip-create-for-pod-with-podgroup-claim-workloadresourceclaims-disabled",
        POD_KEY,
        WORKLOAD_OFF_GENERIC_ON,
        pods=[pod_with_group_resource],
        pod_groups=[group_with_resource],
        templates=[template],
        expected_event="DRAWorkloadResourceClaims feature is disabled",
    ),
    Case(
        "create-for-grouped-pod-with-claim-workloadresourceclaims-disabled",
        POD_KEY,
        WORKLOAD_OFF_GENERIC_ON,
        pods=[in_group(pod_with_resource)],
        pod_groups=[test_group],
        templates=[template],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics=SUCCESS_POD,
    ),
    Case(
        "nop",
        POD_KEY,
        pods=[with_statuses(pod_with_resource, **{CLAIM_NAME: T})],
        templates=[template],
        claims=[templated],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "nop-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource_in_status],
        templates=[template],
        claims=[templated_group],
        expected_claims=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
    ),
    Case(
        "nop-claim-in-mutation-cache-only",
        POD_KEY,
        pods=[with_statuses(pod_with_resource, **{CLAIM_NAME: T})],
        templates=[template],
        claims_in_cache=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "nop-claim-in-mutation-cache-only-for-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource_in_status],
        templates=[template],
        claims_in_cache=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
    ),
    Case(
        "nop-claim-in-apiserver-only",
        POD_KEY,
        pods=[with_statuses(pod_with_resource, **{CLAIM_NAME: T})],
        templates=[template],
        claims_later=[templated],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "nop-claim-in-apiserver-only-for-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource_in_status],
        templates=[template],
        claims_later=[templated_group],
        expected_claims=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
    ),
    Case(
        "recreate",
        POD_KEY,
        pods=[with_statuses(pod_with_resource, **{CLAIM_NAME: T})],
        templates=[template],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics=SUCCESS_POD,
    ),
    Case(
        "recreate-for-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource_in_status],
        templates=[template],
        expected_claims=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
        expected_metrics=SUCCESS_GROUP,
    ),
    Case("missing-template", POD_KEY, pods=[pod_with_resource], expected_error=MISSING_TEMPLATE),
    Case(
        "missing-template-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        expected_error=MISSING_TEMPLATE,
    ),
    Case(
        "find-existing-claim-by-label",
        POD_KEY,
        pods=[pod_with_resource],
        claims=[templated],
        expected_claims=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "find-existing-claim-by-label-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        claims=[templated_group],
        expected_claims=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
    ),
    Case(
        "find-created-claim-in-cache",
        POD_KEY,
        pods=[pod_with_resource],
        claims_in_cache=[templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "find-created-claim-in-cache-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        claims_in_cache=[templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
    ),
    Case(
        "recreate-wrong-owner",
        POD_KEY,
        pods=[with_statuses(pod_with_resource, **{CLAIM_NAME: conflicting_claim["metadata"]["name"]})],
        templates=[template],
        claims=[conflicting_claim],
        expected_claims=[conflicting_claim, templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics=SUCCESS_POD,
    ),
    Case(
        "recreate-wrong-owner-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[with_statuses(group_with_resource, **{CLAIM_NAME: conflicting_group_claim["metadata"]["name"]})],
        templates=[template],
        claims=[conflicting_group_claim],
        expected_claims=[conflicting_group_claim, templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
        expected_metrics=SUCCESS_GROUP,
    ),
    Case("no-such-pod", POD_KEY),
    Case("no-such-podgroup", GROUP_KEY, WORKLOAD_ON),
    Case(
        "pod-deleted",
        POD_KEY,
        pods=[
            changed(
                pod_with_resource,
                lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["keep"]),
            )
        ],
    ),
    Case(
        "podgroup-deleted",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[
            changed(
                group_with_resource,
                lambda g: g["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["keep"]),
            )
        ],
    ),
    Case("no-volumes", f"pod:{NS}/{POD_NAME}", pods=[test_pod]),
    Case(
        "create-with-other-claim",
        POD_KEY,
        pods=[pod_with_resource],
        templates=[template],
        claims=[other_namespace_claim],
        expected_claims=[other_namespace_claim, templated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
        expected_metrics=SUCCESS_POD,
    ),
    Case(
        "create-with-other-claim-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        templates=[template],
        claims=[other_namespace_claim],
        expected_claims=[other_namespace_claim, templated_group],
        expected_group_statuses=group_statuses(**{CLAIM_NAME: TG}),
        expected_metrics=SUCCESS_GROUP,
    ),
    Case(
        "wrong-claim-owner",
        POD_KEY,
        pods=[pod_with_resource],
        claims=[conflicting_claim],
        expected_claims=[conflicting_claim],
        expected_error=MISSING_TEMPLATE,
    ),
    Case(
        "wrong-claim-owner-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        claims=[conflicting_group_claim],
        expected_claims=[conflicting_group_claim],
        expected_error=MISSING_TEMPLATE,
    ),
    Case(
        "create-conflict",
        POD_KEY,
        pods=[pod_with_resource],
        templates=[template],
        expected_error=CONFLICT,
        expected_metrics={("failure", "false", "", "Pod"): 1},
    ),
    Case(
        "create-conflict-admin-access",
        POD_KEY,
        ADMIN_ON_FEATURES,
        pods=[pod_with_resource],
        templates=[template_with_admin],
        expected_error=CONFLICT,
        expected_metrics={("failure", "true", "", "Pod"): 1},
    ),
    Case(
        "create-conflict-podgroup",
        GROUP_KEY,
        WORKLOAD_ON,
        pod_groups=[group_with_resource],
        templates=[template],
        expected_error=CONFLICT,
        expected_metrics={("failure", "false", "scheduling.k8s.io", "PodGroup"): 1},
    ),
    Case(
        "stay-reserved-seen",
        claim_key(test_claim_reserved),
        pods=[pod_with_resource],
        claims=[test_claim_reserved],
        expected_claims=[test_claim_reserved],
    ),
    Case(
        "stay-reserved-not-seen",
        claim_key(test_claim_reserved),
        pods_later=[pod_with_resource],
        claims=[test_claim_reserved],
        expected_claims=[test_claim_reserved],
    ),
    Case(
        "clear-reserved-structured",
        claim_key(test_claim_reserved),
        claims=[structured(test_claim_reserved)],
        expected_claims=[changed(test_claim_allocated, lambda c: c.pop("status"))],
    ),
    Case(
        "clear-reserved-podgroup",
        claim_key(test_claim_reserved_for_group),
        WORKLOAD_ON,
        claims=[structured(test_claim_reserved_for_group)],
        expected_claims=[changed(test_claim_allocated, lambda c: c.pop("status"))],
    ),
    Case(
        "dont-clear-reserved-podgroup-feature-disabled",
        claim_key(test_claim_reserved_for_group),
        WORKLOAD_OFF,
        claims=[structured(test_claim_reserved_for_group)],
        expected_claims=[structured(test_claim_reserved_for_group)],
    ),
    Case(
        "dont-clear-reserved-structured",
        claim_key(test_claim_reserved),
        pods=[pod_with_resource],
        claims=[reserve(structured(test_claim_reserved), other_test_pod)],
        expected_claims=[structured(test_claim_reserved)],
    ),
    # Upstream's tracker keeps the claim, finalizer removed; an API server deletes it.
    Case(
        "clear-reserved-structured-deleted",
        claim_key(test_claim_reserved),
        claims=[
            changed(
                structured(test_claim_reserved),
                lambda c: c["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
            )
        ],
    ),
    Case(
        "structured-deleted",
        claim_key(test_claim_reserved),
        claims=[
            changed(
                structured(test_claim_allocated),
                lambda c: c["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"),
            )
        ],
    ),
    Case(
        "clear-reserved-when-done",
        claim_key(test_claim_reserved),
        pods=[changed(pod_with_resource, lambda p: p["status"].update(phase="Succeeded"))],
        claims=[changed(test_claim_reserved, lambda c: c["metadata"].pop("ownerReferences"))],
        expected_claims=[changed(test_claim_allocated, lambda c: c["metadata"].pop("ownerReferences"))],
    ),
    Case(
        "remove-reserved",
        claim_key(test_claim_reserved_twice),
        pods=[test_pod],
        claims=[test_claim_reserved_twice],
        expected_claims=[test_claim_reserved],
    ),
    Case(
        "delete-claim-when-done",
        claim_key(test_claim_reserved),
        pods=[changed(pod_with_resource, lambda p: p["status"].update(phase="Succeeded"))],
        claims=[test_claim_reserved],
    ),
    Case(
        "add-reserved",
        f"pod:{NS}/{POD_NAME}",
        pods=[pod_with_node_name],
        templates=[template],
        claims=[templated_allocated],
        expected_claims=[templated_reserved],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "add-reserved-podgroup",
        POD_KEY,
        WORKLOAD_ON,
        pods=[pod_with_group_and_node_name],
        pod_groups=[group_with_resource],
        templates=[template],
        claims=[templated_allocated],
        expected_claims=[templated_reserved_for_group],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    # Not retried here (as above): no error, the claim stays unreserved.
    Case(
        "skip-add-reserved-podgroup-genericworkload-disabled",
        POD_KEY,
        GENERIC_OFF,
        pods=[pod_with_group_and_node_name],
        pod_groups=[group_with_resource],
        templates=[template],
        claims=[templated_allocated],
        expected_claims=[templated_allocated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "skip-add-reserved-podgroup-workloadresourceclaims-disabled",
        POD_KEY,
        WORKLOAD_OFF_GENERIC_ON,
        pods=[pod_with_group_and_node_name],
        pod_groups=[group_with_resource],
        templates=[template],
        claims=[templated_allocated],
        expected_claims=[templated_allocated],
        expected_statuses=statuses(**{CLAIM_NAME: T}),
    ),
    Case(
        "remove-pod-reservation-with-non-pod-reservation-present",
        claim_key(test_claim_reserved),
        pods=[changed(pod_with_resource, lambda p: p["status"].update(phase="Succeeded"))],
        claims=[
            changed(
                test_claim_reserved,
                lambda c: c["status"]["reservedFor"].append(
                    {"apiGroup": "foo.com", "resource": "foo", "name": "foo", "uid": "123"}
                ),
            )
        ],
        expected_claims=[
            changed(
                test_claim_reserved,
                lambda c: c["status"].update(
                    reservedFor=[{"apiGroup": "foo.com", "resource": "foo", "name": "foo", "uid": "123"}]
                ),
            )
        ],
    ),
    Case(
        "flapping-resourceclaim-statuses",
        POD_KEY,
        pods=[
            with_statuses(
                make_pod(POD_NAME, NS, POD_UID, pod_claim("claimA", TEMPLATE_NAME), pod_claim("claimB", TEMPLATE_NAME)),
                claimA="claimA-object",
            )
        ],
        templates=[template],
        claims=[make_claim("claimA-object", NS, owner(test_pod))],
        expected_statuses={
            POD_NAME: [
                {"name": "claimA", "resourceClaimName": "claimA-object"},
                {"name": "claimB", "resourceClaimName": "test-pod-claimB--1"},
            ]
        },
        expected_claims=[
            make_claim("claimA-object", NS, owner(test_pod)),
            make_templated_claim("claimB", f"{POD_NAME}-claimB-", NS, 1, owner(test_pod)),
        ],
        expected_metrics=SUCCESS_POD,
        expected_patches=1,
    ),
]


def generate_name_reactor():
    """Upstream's ``createResourceClaimReactor``: generateName + "-" + a counter from 1."""
    counter = itertools.count(1)

    def reactor(action: Action):
        n = next(counter)
        meta = action.obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}-{n}"

    return reactor


def conflict_reactor(action: Action):
    raise conflict(RESOURCE_CLAIMS, "fake name", "fake conflict")


def normalized(claims):
    """What upstream's comparison sees of a claim (``normalizeClaims``: sorted, an empty
    reservedFor as none); what only an API server adds (uid, resourceVersion, ...) is left out."""
    out = []
    for c in sorted(claims, key=lambda c: (c["metadata"]["namespace"], c["metadata"]["name"])):
        meta = c["metadata"]
        status = c.get("status") or {}
        out.append(
            {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "annotations": meta.get("annotations") or {},
                "owners": [
                    (o["kind"], o["name"], o["uid"], o.get("controller")) for o in meta.get("ownerReferences") or []
                ],
                "finalizers": meta.get("finalizers") or [],
                "deleting": bool(meta.get("deletionTimestamp")),
                "requests": ((c.get("spec") or {}).get("devices") or {}).get("requests") or [],
                "allocated": bool(status.get("allocation")),
                "reservedFor": [
                    (e.get("resource"), e.get("name"), e.get("uid")) for e in status.get("reservedFor") or []
                ],
            }
        )
    return out


def resource_claim_statuses(objects):
    return {
        o["metadata"]["name"]: o["status"]["resourceClaimStatuses"]
        for o in objects
        if (o.get("status") or {}).get("resourceClaimStatuses")
    }


def creates(controller):
    samples = controller.metrics.registry.collect()
    found = {}
    for metric in samples:
        for s in metric.samples:
            if s.name == "dynamic_resource_allocation_resourceclaim_creates_total" and s.value:
                labels = s.labels
                found[
                    (labels["status"], labels["admin_access"], labels["owner_api_group"], labels["owner_api_kind"])
                ] = s.value
    return found


async def run(case: Case, features: Features):
    api = FakeApi()
    for obj in case.pods + case.pod_groups + case.claims + case.templates:
        api.add(obj)
    api.prepend_reactor("create", "resourceclaims", generate_name_reactor())
    if any(labels[0] == "failure" for labels in case.expected_metrics):
        api.prepend_reactor("create", "resourceclaims", conflict_reactor)
    controller = ClaimsController(api, features=features)
    # The informers' initial lists, as the API server has them.
    for t in api.objects(RESOURCE_CLAIM_TEMPLATES):
        controller.on_template(t, False)
    for g in api.objects(POD_GROUPS):
        controller.on_pod_group(g, False)
    for c in api.objects(RESOURCE_CLAIMS):
        controller.on_claim(c, False)
    for p in api.objects(PODS):
        controller.on_pod(p, False)
    for c in case.claims_in_cache:
        controller.claims.upsert(
            {**copy.deepcopy(c), "metadata": {**c["metadata"], "uid": f"uid-cache-{c['metadata']['name']}"}}
        )
    for obj in case.claims_later + case.pods_later:
        api.add(obj)
    api.clear_actions()

    error = None
    try:
        await controller.sync(case.key)
    except RetryableError as e:
        error = str(e)
    return api, controller, error


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_sync_handler(case: Case):
    for features in case.features:
        api, controller, error = await run(case, features)
        where = f"{case.name} with {features}"
        if case.expected_error:
            assert error is not None and case.expected_error in error, (where, error)
            continue  # upstream stops checking here too
        assert error is None, (where, error)
        events = [e["message"] for e in api.objects(EVENTS) if e["type"] == "Warning"]
        if case.expected_event:
            assert any(case.expected_event in m for m in events), (where, events)
        else:
            assert events == [], (where, events)
        assert normalized(api.objects(RESOURCE_CLAIMS)) == normalized(case.expected_claims), where
        assert resource_claim_statuses(api.objects(PODS)) == case.expected_statuses, where
        assert resource_claim_statuses(api.objects(POD_GROUPS)) == case.expected_group_statuses, where
        assert creates(controller) == case.expected_metrics, where
        if case.expected_patches is not None:
            patches = [a for a in api.actions_of("patch", "pods") if a.subresource == "status"]
            assert len(patches) == case.expected_patches, where
            assert {s["name"] for s in patches[0].obj["status"]["resourceClaimStatuses"]} >= {"claimA", "claimB"}
