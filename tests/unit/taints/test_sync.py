"""The taints controller, table-driven as upstream's ``TestController`` (k8s.io/kubernetes
v1.37.1 pkg/controller/devicetainteviction/device_taint_eviction_test.go): each case names the
upstream case it ports, the objects the API server and the caches start with (and the Pods
whose eviction was already pending), the watch events, how far time moves, and what is expected
at the end: the Pods left in the API server, the evictions still pending (seconds after the
taint time), the Pods' DeviceTaintManagerEviction Events, and the rules' EvictionInProgress
condition.

The controller is driven through its handlers and ``sync`` with the shared fake API and a fake
clock that starts at upstream's taint time: work-queue keys are taken as they are added and
synced until none is ready (upstream's ``worker``); ``advance`` moves the clock and makes the
delayed keys that are due ready (upstream's ``step.advance``). Upstream decides evictions in
its handlers and this controller in ``sync``, so the comparison is of what the API server ends
with, not of internal maps.

Not ported: populate-pools and update-pools (the pool cache only), the two
multiple-claims-different-rules orders and evict-pod-many-taints (they pin the order of
upstream's queue and reason lists), TestEviction/TestCancelEviction/TestParallelPodDeletion/
TestRetry (client and timing behaviour, covered by the taints lab tests).
"""

from __future__ import annotations

import copy
import datetime
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from operators.core.api.resources import DEVICE_TAINT_RULES, EVENTS, PODS
from operators.taints import controller as module
from operators.taints import decisions as d
from operators.taints.controller import POD_PREFIX, Pending, TaintsController
from tests.fakeapi import FakeApi

TAINT_TIME = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)
T0 = "2000-01-01T00:00:00Z"
NODE, NODE2, DRIVER = "worker", "worker-2", "some-driver"
POD, POD_UID, NS = "my-pod", "1234", "default"
GROUP, GROUP_UID = "my-podgroup", "5678"
RESOURCE = "my-resource"
CLAIM = f"{POD}-{RESOURCE}"
KEY, VALUE = "example.com/taint", "something"
MARKING, CANCELLING = d.MARKING, d.CANCELLING
HOUR = 3600


def taint(effect="NoExecute", key=KEY, value=None, added=T0):
    t = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    if added:
        t["timeAdded"] = added
    return t


def device(name, *taints):
    dev = {"name": name}
    if taints:
        dev["taints"] = list(taints)
    return dev


def make_slice(node, *devices, name=None, generation=1):
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": list(devices),
        },
    }


def edit(obj, fn):
    obj = copy.deepcopy(obj)
    fn(obj)
    return obj


simple_slice = make_slice(NODE, device("instance"))
slice_ = make_slice(
    NODE,
    device("instance"),
    device("instance-no-schedule", taint("NoSchedule", added=None)),
    device("instance-no-execute", taint("None"), taint("NoExecute")),
)
slice_replaced = edit(
    slice_,
    lambda s: (s["metadata"].update(name=s["metadata"]["name"] + "-updated"), s["spec"]["pool"].update(generation=2)),
)
slice_other_devices = edit(slice_, lambda s: [dev.update(name=dev["name"] + "-other") for dev in s["spec"]["devices"]])
THE_TAINT = taint(value=VALUE)
slice_tainted = edit(slice_, lambda s: s["spec"]["devices"][0].update(taints=[THE_TAINT]))
slice_tainted_extended = edit(
    slice_tainted,
    lambda s: s["spec"]["devices"].append(dict(copy.deepcopy(s["spec"]["devices"][0]), name="instance-other")),
)


def with_effect(effect):
    def fn(s):
        for dev in s["spec"]["devices"]:
            for t in dev.get("taints") or []:
                t["effect"] = effect

    return fn


slice_tainted_none = edit(slice_tainted, with_effect("None"))
slice_tainted_unknown = edit(slice_tainted, with_effect("unknown-effect"))
slice_tainted_no_schedule = edit(slice_tainted, with_effect("NoSchedule"))
slice_tainted_value_other = edit(
    slice_tainted, lambda s: s["spec"]["devices"][0].update(taints=[taint(value=VALUE + "-other")])
)
slice_tainted_twice = edit(
    slice_, lambda s: s["spec"]["devices"][0].update(taints=[taint(), taint(key=KEY + "-other")])
)
slice_untainted = edit(slice_, lambda s: [s["spec"]["devices"][i].pop("taints") for i in (1, 2)])
slice2 = edit(
    slice_,
    lambda s: (
        s["metadata"].update(name=s["metadata"]["name"] + "-2"),
        s["spec"].update(nodeName=NODE2),
        s["spec"]["pool"].update(name=NODE2, generation=2),
    ),
)


def rule(name, uid, effect="NoExecute", device_name=None, driver=DRIVER, added=T0):
    selector = {}
    if driver:
        selector["driver"] = driver
    if device_name:
        selector["device"] = device_name
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "uid": uid},
        "spec": {"deviceSelector": selector, "taint": dict(taint(effect, value=VALUE), timeAdded=added)},
    }


rule_evict = rule("evict", "1234")
rule_none = rule("evict", "1234", effect="None")


def result(device_name, tolerations=()):
    r = {"request": "req-1", "driver": DRIVER, "pool": NODE, "device": device_name}
    if tolerations:
        r["tolerations"] = list(tolerations)
    return r


RESULTS = (result("instance"),)


def make_claim(
    name=CLAIM,
    ns=NS,
    owner=("Pod", POD, POD_UID),
    results=RESULTS,
    reserved=(("pods", POD, POD_UID),),
    uid=None,
):
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": uid or f"claim-{ns}-{name}"},
        "spec": {"devices": {"requests": [{"name": "req-1", "exactly": {"deviceClassName": "my-resource-class"}}]}},
        "status": {},
    }
    if owner:
        kind, owner_name, owner_uid = owner
        claim["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "v1" if kind == "Pod" else "scheduling.k8s.io/v1beta1",
                "kind": kind,
                "name": owner_name,
                "uid": owner_uid,
                "controller": True,
            }
        ]
    if results is not None:
        claim["status"]["allocation"] = {"devices": {"results": [copy.deepcopy(r) for r in results]}}
        claim["status"]["reservedFor"] = [
            {"resource": res, "name": n, "uid": u, **({"apiGroup": "scheduling.k8s.io"} if res == "podgroups" else {})}
            for res, n, u in reserved
        ]
    return claim


OTHER_DEVICES = (result("instance-no-schedule"), result("instance-no-execute"))
in_use = make_claim()
in_use_by_group = make_claim(owner=("PodGroup", GROUP, GROUP_UID), reserved=(("podgroups", GROUP, GROUP_UID),))
in_use_other_ns = make_claim(
    ns=NS + "-other",
    owner=("Pod", POD, POD_UID + "-2"),
    results=OTHER_DEVICES,
    reserved=(("pods", POD, POD_UID + "-2"),),
)
in_use_other_name = make_claim(
    name=CLAIM + "-other",
    owner=("Pod", POD + "-other", POD_UID + "-3"),
    results=OTHER_DEVICES,
    reserved=(("pods", POD + "-other", POD_UID + "-3"),),
)
in_use_other_name_shared = make_claim(
    name=CLAIM + "-other",
    owner=("Pod", POD + "-other", POD_UID + "-3"),
    results=OTHER_DEVICES,
    reserved=(("pods", POD, POD_UID), ("pods", POD + "-other", POD_UID + "-3")),
)
in_use_old = make_claim(owner=("Pod", POD, POD_UID + "-other"), uid="other")
unallocated = make_claim(results=None)


def tolerating(*tolerations):
    return make_claim(results=(result("instance", tolerations),))


in_use_with_toleration = tolerating(
    {"key": KEY, "operator": "Equal", "value": VALUE, "effect": "NoExecute", "tolerationSeconds": HOUR}
)


def make_pod(
    name=POD,
    ns=NS,
    uid=POD_UID,
    node=NODE,
    claim_name=CLAIM,
    template=False,
    status_claim=False,
    group=None,
    claims=None,
):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {
            "resourceClaims": claims
            if claims is not None
            else [{"name": RESOURCE, ("resourceClaimTemplateName" if template else "resourceClaimName"): claim_name}]
        },
        "status": {"phase": "Running"},
    }
    if node:
        pod["spec"]["nodeName"] = node
    if status_claim is not False:
        pod["status"]["resourceClaimStatuses"] = [
            {"name": RESOURCE, **({"resourceClaimName": status_claim} if status_claim else {})}
        ]
    if group:
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
    return pod


pod_with_claim = make_pod()
unscheduled_pod = make_pod(node=None)
pod_with_group = make_pod(group=GROUP, claims=[])
pod_with_group_claim = make_pod(group=GROUP)
pod_with_two_claims = make_pod(
    claims=[
        {"name": RESOURCE, "resourceClaimName": CLAIM},
        {"name": RESOURCE + "-other", "resourceClaimName": CLAIM + "-other"},
    ]
)
pod_other_uid = make_pod(uid=POD_UID + "-other")
pod_other_ns = make_pod(ns=NS + "-other", uid=POD_UID + "-2")
pod_other_name = make_pod(name=POD + "-other", uid=POD_UID + "-3", claim_name=CLAIM + "-other")
pod_template = make_pod(template=True)
pod_template_in_status = make_pod(template=True, status_claim=CLAIM)
pod_template_no_claim = make_pod(template=True, status_claim=None)


def add(obj):
    return ("add", obj)


def remove(obj):
    return ("remove", obj)


def update(old, new):
    return ("update", new)


@dataclass
class Case:
    name: str
    initial: list = field(default_factory=list)  # in the API server and the caches
    pending: list = field(default_factory=list)  # Pods (ns/name) whose eviction was pending already
    events: list = field(default_factory=list)
    advance: list = field(default_factory=list)  # seconds, one step each, after the first processing
    workload_claims: bool = False
    pods: list | None = None  # ns/name left in the API server; None: all initial ones
    still_pending: dict = field(default_factory=dict)  # ns/name -> seconds after the taint time
    want_events: list = field(default_factory=list)  # (ns/name, message)
    rules: dict = field(default_factory=dict)  # rule -> (reason, message) of its condition


GONE: list = []  # no Pod left
P, P_OTHER_NS, P_OTHER_NAME = f"{NS}/{POD}", f"{NS}-other/{POD}", f"{NS}/{POD}-other"
NONE_MSG = (
    "{} published device{} selected. {} allocated device{} selected. {} would be evicted in {} if the effect "
    "was NoExecute. This information will not be updated again. Recreate the DeviceTaintRule to trigger an update."
)

CASES = [
    Case("empty"),
    Case("untainted-claim", events=[add(slice_), add(slice2), add(in_use)]),
    Case("tainted-claim-through-resourceslice", events=[add(slice_tainted), add(slice2), add(in_use)]),
    Case("rule-status", events=[add(rule_evict)], rules={"evict": ("NotStarted", "")}),
    Case("tainted-claim-through-rule", events=[add(rule_evict), add(in_use)], rules={"evict": ("NotStarted", "")}),
    Case(
        "evict-pod-resourceclaim",
        events=[add(slice_tainted), add(slice2), add(in_use), add(pod_with_claim)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-resourceclaim-podgroup",
        workload_claims=True,
        events=[add(slice_tainted), add(slice2), add(in_use_by_group), add(pod_with_group_claim)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "no-evict-pod-in-podgroup-without-claim",
        workload_claims=True,
        events=[add(slice_tainted), add(slice2), add(in_use_by_group), add(pod_with_group)],
        pods=[P],
    ),
    Case(
        "evict-pod-rule",
        events=[add(in_use), add(pod_with_claim), add(rule_evict)],
        advance=[d.RULE_STATUS_PERIOD],
        pods=GONE,
        want_events=[(P, MARKING)],
        rules={"evict": ("Completed", "1 pod evicted since starting the controller.")},
    ),
    Case(
        "evict-pod-rule-later",
        events=[add(in_use_with_toleration), add(pod_with_claim), add(rule_evict)],
        advance=[d.RULE_STATUS_PERIOD, HOUR - d.RULE_STATUS_PERIOD, d.RULE_STATUS_PERIOD],
        pods=GONE,
        want_events=[(P, MARKING)],
        rules={"evict": ("Completed", "1 pod evicted since starting the controller.")},
    ),
    Case(
        "evict-pod-rule-later (before the toleration ends)",
        events=[add(in_use_with_toleration), add(pod_with_claim), add(rule_evict)],
        advance=[d.RULE_STATUS_PERIOD],
        pods=[P],
        still_pending={P: HOUR},
        rules={"evict": ("PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")},
    ),
    Case(
        "evict-many-pods-many-namespaces",
        events=[add(in_use), add(pod_with_claim), add(in_use_other_ns), add(pod_other_ns), add(rule_evict)],
        advance=[d.RULE_STATUS_PERIOD],
        pods=GONE,
        want_events=[(P, MARKING), (P_OTHER_NS, MARKING)],
        rules={"evict": ("Completed", "2 pods evicted since starting the controller.")},
    ),
    Case(
        "evict-many-pods-same-namespace",
        events=[add(in_use), add(pod_with_claim), add(in_use_other_name), add(pod_other_name), add(rule_evict)],
        advance=[d.RULE_STATUS_PERIOD],
        pods=GONE,
        want_events=[(P, MARKING), (P_OTHER_NAME, MARKING)],
        rules={"evict": ("Completed", "2 pods evicted since starting the controller.")},
    ),
    Case(
        "none-pod-rule",
        events=[add(slice_), add(in_use), add(pod_with_claim), add(rule_none)],
        pods=[P],
        rules={"evict": ("NoEffect", NONE_MSG.format(3, "s", 1, "", "1 pod", "1 namespace"))},
    ),
    Case(
        "none-many-pods-many-namespaces",
        events=[add(in_use), add(pod_with_claim), add(in_use_other_ns), add(pod_other_ns), add(rule_none)],
        pods=[P, P_OTHER_NS],
        rules={"evict": ("NoEffect", NONE_MSG.format(0, "s", 3, "s", "2 pods", "2 different namespaces"))},
    ),
    Case(
        "none-many-pods-same-namespace",
        events=[add(in_use), add(pod_with_claim), add(in_use_other_name), add(pod_other_name), add(rule_none)],
        pods=[P, P_OTHER_NAME],
        rules={"evict": ("NoEffect", NONE_MSG.format(0, "s", 3, "s", "2 pods", "1 namespace"))},
    ),
    Case(
        "none-podgroup-rule",
        workload_claims=True,
        events=[add(slice_), add(in_use_by_group), add(pod_with_group_claim), add(rule_none)],
        pods=[P],
        rules={"evict": ("NoEffect", NONE_MSG.format(3, "s", 1, "", "1 pod", "1 namespace"))},
    ),
    Case(
        "multiple-claims-same-rule",
        events=[add(in_use), add(in_use_other_name_shared), add(pod_with_two_claims), add(rule_evict)],
        advance=[d.RULE_STATUS_PERIOD],
        pods=GONE,
        want_events=[(P, MARKING)],
        rules={"evict": ("Completed", "1 pod evicted since starting the controller.")},
    ),
    # Upstream cancels at the slice's delete and evicts again at its add (two Events); here the
    # Pod is synced once, after both, and the taint is still there: one Event.
    Case(
        "evict-pod-resourceclaim-again",
        initial=[pod_with_claim, slice_tainted, slice2, in_use],
        pending=[P],
        events=[remove(slice_tainted), add(slice_tainted)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-after-scheduling",
        initial=[unscheduled_pod, slice_tainted, slice2, in_use],
        events=[update(unscheduled_pod, pod_with_claim)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-resourceclaim-unrelated-changes",
        initial=[pod_with_claim, slice_tainted, slice2, in_use],
        pending=[P],
        events=[
            update(slice_tainted, slice_tainted_extended),
            update(in_use, in_use),
            update(pod_with_claim, pod_with_claim),
        ],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-resourceclaimtemplate",
        events=[add(slice_tainted), add(slice2), add(in_use), add(pod_template_in_status)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-later (before)",
        events=[add(slice_tainted), add(slice2), add(in_use_with_toleration), add(pod_with_claim)],
        pods=[P],
        still_pending={P: HOUR},
    ),
    Case(
        "evict-pod-later",
        events=[add(slice_tainted), add(slice2), add(in_use_with_toleration), add(pod_with_claim)],
        advance=[HOUR],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-later-many",
        events=[
            add(slice_tainted),
            add(slice2),
            add(
                tolerating(
                    {
                        "key": KEY + "-other",
                        "operator": "Equal",
                        "value": VALUE,
                        "effect": "NoExecute",
                        "tolerationSeconds": 20,
                    },
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                )
            ),
            add(pod_with_claim),
        ],
        advance=[29],
        pods=[P],
        still_pending={P: 30},
    ),
    Case(
        "evict-pod-later-many (due)",
        events=[
            add(slice_tainted),
            add(slice2),
            add(
                tolerating(
                    {
                        "key": KEY + "-other",
                        "operator": "Equal",
                        "value": VALUE,
                        "effect": "NoExecute",
                        "tolerationSeconds": 20,
                    },
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
                )
            ),
            add(pod_with_claim),
        ],
        advance=[30],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "evict-pod-toleration-mismatch",
        events=[
            add(slice_tainted),
            add(slice2),
            add(
                tolerating(
                    {
                        "key": KEY + "-other",
                        "operator": "Equal",
                        "value": VALUE,
                        "effect": "NoExecute",
                        "tolerationSeconds": 60,
                    }
                )
            ),
            add(pod_with_claim),
        ],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "no-evict-pod-toleration-forever",
        events=[
            add(slice_tainted),
            add(slice2),
            add(tolerating({"operator": "Exists", "effect": "NoExecute"})),
            add(pod_with_claim),
        ],
        advance=[10 * HOUR],
        pods=[P],
    ),
    Case(
        "no-evict-pod-toleration-forever-many",
        events=[
            add(slice_tainted),
            add(slice2),
            add(
                tolerating(
                    {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
                    {"operator": "Exists", "effect": "NoExecute"},
                )
            ),
            add(pod_with_claim),
        ],
        advance=[10 * HOUR],
        pods=[P],
    ),
    Case(
        "evict-pod-partial-toleration",
        events=[
            add(slice_tainted_twice),
            add(slice2),
            add(tolerating({"operator": "Exists", "key": KEY, "effect": "NoExecute"})),
            add(pod_with_claim),
        ],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "no-evict-pod-not-scheduled",
        events=[add(slice_tainted), add(slice2), add(in_use), add(unscheduled_pod)],
        pods=[P],
    ),
    Case("no-evict-no-taint", events=[add(simple_slice), add(in_use), add(pod_with_claim)], pods=[P]),
    Case(
        "no-evict-no-taint-update",
        initial=[pod_with_claim, simple_slice, in_use],
        events=[update(simple_slice, simple_slice)],
        pods=[P],
    ),
    Case(
        "no-evict-pod-resourceclaimtemplate-no-status",
        events=[add(slice_tainted), add(slice2), add(in_use), add(pod_template)],
        pods=[P],
    ),
    Case(
        "no-evict-pod-resourceclaimtemplate-no-claim",
        events=[add(slice_tainted), add(slice2), add(in_use), add(pod_template_no_claim)],
        pods=[P],
    ),
    Case(
        "no-evict-other-device",
        events=[add(slice_other_devices), add(slice2), add(in_use), add(pod_template_in_status)],
        pods=[P],
    ),
    Case("no-evict-wrong-pod", events=[add(slice_tainted), add(slice2), add(in_use), add(pod_other_uid)], pods=[P]),
    Case(
        "evict-wrong-pod-replaced",
        initial=[pod_other_uid, slice_tainted, slice2, in_use],
        events=[remove(pod_other_uid), add(pod_with_claim)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "cancel-eviction-remove-taint",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use],
        pending=[P],
        events=[update(slice_tainted, slice_)],
        pods=[P],
        want_events=[(P, CANCELLING)],
    ),
    Case(
        "cancel-eviction-reduce-taint",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use],
        pending=[P],
        events=[update(slice_tainted, slice_tainted_no_schedule)],
        pods=[P],
        want_events=[(P, CANCELLING)],
    ),
    Case("ignore-none-effect", initial=[pod_template_in_status, slice_tainted_none, slice2, in_use], pods=[P]),
    Case("ignore-unknown-effect", initial=[pod_template_in_status, slice_tainted_unknown, slice2, in_use], pods=[P]),
    Case(
        "eviction-change-taint",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use_with_toleration],
        pending=[P],
        events=[update(slice_tainted, slice_tainted_value_other)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "cancel-eviction-remove-taint-in-new-slice",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use],
        pending=[P],
        events=[remove(slice_tainted), add(slice_replaced)],
        pods=[P],
        want_events=[(P, CANCELLING)],
    ),
    Case(
        "cancel-eviction-remove-slice",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use],
        pending=[P],
        events=[remove(slice_tainted)],
        pods=[P],
        want_events=[(P, CANCELLING)],
    ),
    Case(
        "cancel-eviction-pod-deletion",
        initial=[
            pod_with_claim,
            slice_tainted,
            slice2,
            tolerating({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}),
        ],
        pending=[P],
        events=[remove(pod_with_claim)],
        advance=[60],
        pods=GONE,
    ),
    Case(
        "no-evict-wrong-resourceclaim",
        events=[add(slice_tainted), add(slice2), add(in_use_old), add(pod_template_in_status)],
        pods=[P],
    ),
    Case(
        "evict-wrong-resourceclaim-replaced",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use_old],
        events=[update(in_use_old, in_use)],
        pods=GONE,
        want_events=[(P, MARKING)],
    ),
    Case(
        "no-evict-resourceclaim-deallocated",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use],
        pending=[P],
        events=[update(in_use, unallocated)],
        pods=[P],
        want_events=[(P, CANCELLING)],
    ),
    Case(
        "no-evict-resourceclaim-deleted",
        initial=[pod_template_in_status, slice_tainted, slice2, in_use],
        pending=[P],
        events=[remove(in_use)],
        pods=[P],
        want_events=[(P, CANCELLING)],
    ),
]


class Harness:
    """The controller on the fake API, a fake clock and a work queue the test turns."""

    def __init__(self, monkeypatch, workload_claims: bool):
        self.now, self.mono = TAINT_TIME, 1000.0
        monkeypatch.setattr(module, "utcnow", lambda: self.now)
        monkeypatch.setattr(d, "utcnow", lambda: self.now)
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=lambda: self.mono))
        self.api = FakeApi()
        self.controller = c = TaintsController(self.api, rules=DEVICE_TAINT_RULES, workload_claims=workload_claims)
        self.ready: list[str] = []
        self.later: list[tuple[float, str]] = []
        c.queue.add = lambda key: None if key in self.ready else self.ready.append(key)
        c.queue.add_after = lambda key, delay: (
            c.queue.add(key) if delay <= 0 else self.later.append((self.mono + delay, key))
        )

    async def process(self) -> None:
        """Sync until no key is ready (upstream's ``worker``)."""
        while self.ready:
            await self.controller.sync(self.ready.pop(0))

    async def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)
        self.mono += seconds
        due = sorted(item for item in self.later if item[0] <= self.mono + 1e-6)
        self.later = [item for item in self.later if item[0] > self.mono + 1e-6]
        for _, key in due:
            self.controller.queue.add(key)
        await self.process()

    def handle(self, op: str, obj: dict) -> None:
        """A watch event, after the API server changed (as the informers see it)."""
        kind = obj["kind"]
        if op == "remove":
            self.api.remove(
                self.api._fake_resource(obj, None), obj["metadata"]["name"], obj["metadata"].get("namespace")
            )
            stored = copy.deepcopy(obj)
        else:
            stored = self.api.add(obj)
        handler = {
            "Pod": self.controller.on_pod,
            "ResourceClaim": self.controller.on_claim,
            "ResourceSlice": self.controller.on_slice,
            "DeviceTaintRule": self.controller.on_rule,
        }[kind]
        handler(stored, op == "remove")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_controller(case: Case, monkeypatch):
    h = Harness(monkeypatch, case.workload_claims)
    stored = [h.api.add(obj) for obj in case.initial]
    by_kind = {
        k: [o for o in stored if o["kind"] == k] for k in ("DeviceTaintRule", "ResourceSlice", "ResourceClaim", "Pod")
    }
    h.controller.prime(
        rules=by_kind["DeviceTaintRule"],
        classes=[],
        slices=by_kind["ResourceSlice"],
        claims=by_kind["ResourceClaim"],
        pods=by_kind["Pod"],
    )
    h.ready.clear()  # upstream's initial state has nothing queued
    for key in case.pending:
        pod = h.controller.pods.get(key)
        eviction = h.controller.pod_eviction(pod)
        h.controller.pending[key] = Pending(pod["metadata"]["uid"], eviction)
        # As the sync that made it pending left it: a timer for when it is due.
        h.controller._after(POD_PREFIX + key, (eviction.when - h.now).total_seconds())

    for op, obj in case.events:
        h.handle(op, obj)
    await h.process()
    for seconds in case.advance:
        await h.advance(seconds)
    await h.controller.events.flush()

    initial_pods = sorted(
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in case.initial + [o for op, o in case.events if op != "remove"]
        if p["kind"] == "Pod"
    )
    expected_pods = sorted(set(initial_pods)) if case.pods is None else sorted(case.pods)
    assert sorted(f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in h.api.objects(PODS)) == expected_pods
    pending = {key: (p.eviction.when - TAINT_TIME).total_seconds() for key, p in h.controller.pending.items()}
    assert pending == case.still_pending
    events = sorted(
        (f"{e['involvedObject']['namespace']}/{e['involvedObject']['name']}", e["message"])
        for e in h.api.objects(EVENTS)
        if e["reason"] == d.EVENT_REASON
    )
    assert events == sorted(case.want_events)
    conditions = {}
    for r in h.api.objects(DEVICE_TAINT_RULES):
        condition = next(iter((r.get("status") or {}).get("conditions") or []), None)
        if condition:
            conditions[r["metadata"]["name"]] = (condition["reason"], condition["message"])
    assert conditions == case.rules


@pytest.mark.parametrize("replaced", [True, False], ids=["replaced", "gone"])
async def test_the_cached_pod_is_evicted_only_if_the_api_server_still_has_it(monkeypatch, replaced):
    """No GET before the eviction (upstream's addConditionAndDeletePod has one): the status patch
    and the DELETE name the cached Pod's UID. A Pod replaced under the same name, or gone, since
    the cache saw it is left alone, without a "Marking" Event, and its eviction is over."""
    h = Harness(monkeypatch, workload_claims=False)
    stored = [h.api.add(obj) for obj in (slice_tainted, slice2, in_use, pod_with_claim)]
    h.controller.prime(rules=[], classes=[], slices=stored[:2], claims=[stored[2]], pods=[stored[3]])
    h.api.remove(PODS, POD, NS)  # the cache does not see this (yet)
    if replaced:
        h.api.add(edit(pod_with_claim, lambda p: p["metadata"].update(uid="new-uid")))
    h.api.actions.clear()

    await h.process()
    await h.controller.events.flush()

    assert [(a.verb, a.subresource) for a in h.api.actions_of(plural="pods")] == [("patch", "status")]
    assert [p["metadata"]["uid"] for p in h.api.objects(PODS)] == (["new-uid"] if replaced else [])
    assert not h.api.objects(EVENTS)
    assert not h.controller.pending
