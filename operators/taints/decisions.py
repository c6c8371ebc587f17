"""What the taints operator decides, as pure functions over plain dicts.

Mirrors kube-controller-manager's device-taint-eviction-controller at v1.37.1
(pkg/controller/devicetainteviction/device_taint_eviction.go: ``claimEvictionTime``,
``allEvictingDeviceTaints``, ``ruleMatchesDevice``, ``podEvictionTime``, ``maybeUpdateRuleStatus``)
and ``ToleratesTaint`` from k8s.io/dynamic-resource-allocation/resourceclaim/devicetoleration.go.
Where ours deliberately differs, the function says so.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.dra.metatime import format_time, parse_time, utcnow
from ..core.dra.podgroup import is_for_pod_or_group, is_reserved_for_pod_or_group
from ..core.dra.resourceclaim import Obj, allocation_results, is_allocated, pod_claim_names
from ..core.dra.tolerations import (
    device_selector_matches,
    result_tolerations,
    tolerates,  # part of this module's vocabulary (tests, preview)
)

NO_EXECUTE, NO_SCHEDULE, NONE_EFFECT = "NoExecute", "NoSchedule", "None"

CONTROLLER_NAME = "device-taint-eviction-controller"  # Event source, SSA field manager
CONDITION_TYPE = "EvictionInProgress"
RULE_STATUS_PERIOD = 10.0  # ruleStatusPeriod: shortest time between two rule status writes

EVENT_REASON = "DeviceTaintManagerEviction"
MARKING = "Marking for deletion"
CANCELLING = "Cancelling deletion"
POD_CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByDeviceTaintManager",
    "message": "Device Taint manager: deleting due to NoExecute taint",
}

# Our guard rails, per DeviceTaintRule (annotations, so that rules stay plain upstream objects).
ANNOTATION_PREFIX = "taints.dra-operators.dev/"
RATE_ANNOTATION = ANNOTATION_PREFIX + "evictions-per-second"
EVICTION_API_ANNOTATION = ANNOTATION_PREFIX + "eviction-api"
MAX_WAIT_ANNOTATION = ANNOTATION_PREFIX + "eviction-api-max-wait"


# -- where a taint comes from ----------------------------------------------------------------


@dataclass(frozen=True)
class TaintSource:
    """``trackedTaint``: a NoExecute taint from a DeviceTaintRule or from one device of a
    ResourceSlice (exactly one of the two)."""

    rule: str = ""  # DeviceTaintRule name
    rule_uid: str = ""
    slice: str = ""  # ResourceSlice name
    driver: str = ""
    pool: str = ""
    device: str = ""
    index: int = 0  # position in the device's taints

    @property
    def is_rule(self) -> bool:
        return bool(self.rule)

    def sort_key(self) -> tuple:
        # Rules first, by name; then slice taints by driver, pool, device, index (trackedTaint.Compare).
        if self.is_rule:
            return (0, self.rule, "", "", "", 0)
        return (1, "", self.driver, self.pool, self.device, self.index)

    def __str__(self) -> str:
        if self.is_rule:
            return f"DeviceTaintRule {self.rule}"
        return f"ResourceSlice {self.slice} {self.driver}/{self.pool}/{self.device} taint #{self.index}"


@dataclass(frozen=True)
class Eviction:
    """``evictionAndReason``: when Pods using a claim must go, and every taint that says so."""

    when: datetime.datetime
    reasons: tuple[TaintSource, ...]

    def rule_uids(self) -> set[str]:
        return {r.rule_uid for r in self.reasons if r.is_rule}

    def rule_names(self) -> list[str]:
        return [r.rule for r in self.reasons if r.is_rule]


def merge(a: Eviction | None, b: Eviction | None) -> Eviction | None:
    """The earlier time of two evictions and the union of their reasons, sorted."""
    if a is None or b is None:
        return a or b
    reasons = tuple(sorted(set(a.reasons) | set(b.reasons), key=TaintSource.sort_key))
    return Eviction(min(a.when, b.when), reasons)


# -- pools: only the newest generation counts --------------------------------------------------


@dataclass
class PoolView:
    """The devices of one (driver, pool) in slices of the pool's highest generation."""

    generation: int | None = None
    devices: dict[str, tuple[str, Obj]] = field(default_factory=dict)  # device name -> (slice, device)

    def device(self, name: str) -> tuple[str, Obj] | None:
        return self.devices.get(name)


def pool_key(driver: str, pool: str) -> str:
    return f"{driver}/{pool}"


def slice_pool_key(slice_: Obj) -> str:
    spec = slice_.get("spec") or {}
    return pool_key(spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""))


def pool_view(slices: Iterable[Obj]) -> PoolView:
    """``pool.getDevice``: slices of an older generation are ignored (their taints too). Among
    several slices of the newest generation the first device with a name wins, sorted by slice
    name (upstream iterates a map; a valid pool never has a name twice)."""
    slices = list(slices)
    view = PoolView()
    if not slices:
        return view
    view.generation = max(int((s["spec"].get("pool") or {}).get("generation") or 0) for s in slices)
    for s in sorted(slices, key=lambda s: s["metadata"]["name"]):
        if int((s["spec"].get("pool") or {}).get("generation") or 0) != view.generation:
            continue
        for device in s["spec"].get("devices") or []:
            view.devices.setdefault(device.get("name", ""), (s["metadata"]["name"], device))
    return view


def no_execute_taints(view: PoolView) -> dict[str, list[tuple]]:
    """``getTaintedDevices``: per device name, its NoExecute taints as comparable tuples."""
    tainted: dict[str, list[tuple]] = {}
    for name, (_, device) in view.devices.items():
        taints = [
            (t.get("key"), t.get("value"), t.get("effect"), t.get("timeAdded"))
            for t in device.get("taints") or []
            if t.get("effect") == NO_EXECUTE
        ]
        if taints:
            tainted[name] = taints
    return tainted


def modified_devices(before: dict[str, list[tuple]], after: dict[str, list[tuple]]) -> set[str]:
    """Devices whose NoExecute taints changed: only their claims need another look."""
    return {name for name in set(before) | set(after) if before.get(name) != after.get(name)}


# -- tolerations and rules ---------------------------------------------------------------------


def rule_taint(rule: Obj) -> Obj:
    return (rule.get("spec") or {}).get("taint") or {}


def rule_effect(rule: Obj) -> str:
    return rule_taint(rule).get("effect", "")


def is_evicting(rule: Obj) -> bool:
    return rule_effect(rule) == NO_EXECUTE


def uses_cel(rule: Obj) -> bool:
    """A v1alpha3 rule (Kubernetes <= 1.34) that selects through a DeviceClass or CEL selectors.
    Those fields are gone from every version served since 1.35."""
    selector = (rule.get("spec") or {}).get("deviceSelector")
    return bool(selector and (selector.get("deviceClassName") or selector.get("selectors")))


# (rule, driver, device from its slice) -> whether the rule's DeviceClass and CEL selectors select it
CelMatcher = Callable[[Obj, str, Obj], bool]


def rule_matches_device(
    rule: Obj, driver: str, pool: str, device_name: str, device: Obj | None = None, cel: CelMatcher | None = None
) -> bool:
    """``ruleMatchesDevice``: no selector matches nothing (unlike the empty selector, which
    matches everything); each of driver, pool and device that is set must be equal. A v1alpha3
    class/CEL selector needs the published device: without its slice it matches nothing."""
    if not device_selector_matches((rule.get("spec") or {}).get("deviceSelector"), driver, pool, device_name):
        return False
    if uses_cel(rule):
        return device is not None and cel is not None and cel(rule, driver, device)
    return True


def as_no_execute(rule: Obj) -> Obj:
    """The rule as if its effect were NoExecute (the ``None`` effect's simulation, previews)."""
    spec = dict(rule.get("spec") or {})
    spec["taint"] = dict(spec.get("taint") or {}, effect=NO_EXECUTE)
    return {**rule, "spec": spec}


# -- claims ------------------------------------------------------------------------------------


DeviceLookup = Callable[[str, str, str], "tuple[str, Obj] | None"]  # driver, pool, device -> (slice, device)


def device_key(driver: str, pool: str, device: str) -> str:
    return f"{driver}/{pool}/{device}"


def claim_device_keys(claim: Obj) -> list[str]:
    return [device_key(r.get("driver", ""), r.get("pool", ""), r.get("device", "")) for r in allocation_results(claim)]


def evicting_taints(
    result: Obj, lookup: DeviceLookup, rules: Sequence[Obj], cel: CelMatcher | None = None
) -> Iterator[tuple[TaintSource, Obj]]:
    """``allEvictingDeviceTaints``: NoExecute taints of the allocated device in its slice (newest
    generation) and NoExecute rules matching the allocation result, as (source, taint)."""
    driver, pool, name = result.get("driver", ""), result.get("pool", ""), result.get("device", "")
    found = lookup(driver, pool, name)
    slice_name, device = found if found else ("", None)
    if device is not None:
        for index, taint in enumerate(device.get("taints") or []):
            if taint.get("effect") == NO_EXECUTE:
                yield TaintSource(slice=slice_name, driver=driver, pool=pool, device=name, index=index), taint
    for rule in rules:
        if is_evicting(rule) and rule_matches_device(rule, driver, pool, name, device, cel):
            yield (
                TaintSource(rule=rule["metadata"]["name"], rule_uid=rule["metadata"].get("uid", "")),
                rule_taint(rule),
            )


def claim_eviction(
    claim: Obj,
    lookup: DeviceLookup,
    rules: Sequence[Obj],
    cel: CelMatcher | None = None,
    now: datetime.datetime | None = None,
) -> Eviction | None:
    """``claimEvictionTime``: for every NoExecute taint on an allocated device, its ``timeAdded``
    plus the smallest ``tolerationSeconds`` (negative = 0) of the matching NoExecute tolerations
    the scheduler copied into the allocation result (its request's, where a 1.34 scheduler made
    no copy: ``result_tolerations``); a matching toleration without seconds ignores the taint.
    The earliest time wins; every taint not tolerated for good is a reason. Only tolerations
    whose effect is exactly NoExecute count, as upstream."""
    when: datetime.datetime | None = None
    reasons: set[TaintSource] = set()
    if not is_allocated(claim):
        return None
    for result in allocation_results(claim):
        tolerations = [t for t in result_tolerations(claim, result) if t.get("effect") == NO_EXECUTE]
        for source, taint in evicting_taints(result, lookup, rules, cel):
            seconds: int | None = None
            forever = False
            for toleration in tolerations:
                if not tolerates(toleration, taint):
                    continue
                if toleration.get("tolerationSeconds") is None:
                    forever = True
                    break
                value = max(int(toleration["tolerationSeconds"]), 0)
                seconds = value if seconds is None else min(seconds, value)
            if forever:
                continue
            added = parse_time(taint.get("timeAdded")) or now or utcnow()
            candidate = added + datetime.timedelta(seconds=seconds or 0)
            reasons.add(source)
            when = candidate if when is None or candidate < when else when
    if when is None:
        return None
    return Eviction(when, tuple(sorted(reasons, key=TaintSource.sort_key)))


# -- pods --------------------------------------------------------------------------------------


def pod_eviction(
    pod: Obj,
    get_claim: Callable[[str], Obj | None],
    eviction_of: Callable[[Obj], Eviction | None],
    workload_claims: bool = False,
) -> Eviction | None:
    """``podEvictionTime``: a scheduled Pod is evicted at the earliest eviction time of the
    allocated claims reserved for it (UID in ``reservedFor``, or with ``workload_claims``
    (DRAWorkloadResourceClaims) its PodGroup by name, the claim then owned by the Pod or the
    PodGroup), including the claim the scheduler made for extended resources (as upstream from
    v1.37.2 on, ``resourceclaim.PodClaims``; before, kubernetes#141290)."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return None
    eviction: Eviction | None = None
    namespace = pod["metadata"]["namespace"]
    for name, check_owner in pod_claim_names(pod):
        claim = get_claim(f"{namespace}/{name}")
        if claim is None or not is_allocated(claim):
            continue
        if check_owner and is_for_pod_or_group(pod, claim, workload_claims) is not None:
            continue
        if not is_reserved_for_pod_or_group(pod, claim, workload_claims):
            continue
        eviction = merge(eviction, eviction_of(claim))
    return eviction


def is_deleting(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def pod_needs_look(old: Obj | None, new: Obj) -> bool:
    """``handlePodChange``: only a new Pod, or one whose node or claims changed, needs another
    look (a Pod changes often; our own condition write must not bring it back)."""
    if old is None:
        return True
    old_status, new_status = old.get("status") or {}, new.get("status") or {}
    return (
        (old.get("spec") or {}).get("nodeName") != (new.get("spec") or {}).get("nodeName")
        or old_status.get("resourceClaimStatuses") != new_status.get("resourceClaimStatuses")
        or old_status.get("extendedResourceClaimStatus") != new_status.get("extendedResourceClaimStatus")
    )


def claim_needs_look(old: Obj | None, new: Obj | None) -> bool:
    """Claims matter for eviction through their allocation and ``reservedFor`` only."""
    if old is None or new is None:
        return True
    if old["metadata"].get("uid") != new["metadata"].get("uid"):
        return True
    o, n = old.get("status") or {}, new.get("status") or {}
    return o.get("allocation") != n.get("allocation") or o.get("reservedFor") != n.get("reservedFor")


def rule_spec_changed(old: Obj | None, new: Obj | None) -> bool:
    if old is None or new is None:
        return True
    return old["metadata"].get("uid") != new["metadata"].get("uid") or old.get("spec") != new.get("spec")


# -- the Pod condition -------------------------------------------------------------------------


def has_pod_condition(pod: Obj) -> bool:
    """Whether ``UpdatePodCondition`` would change nothing."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == POD_CONDITION["type"]:
            return all(condition.get(k) == v for k, v in POD_CONDITION.items())
    return False


def pod_condition_patch(pod: Obj, now: datetime.datetime) -> Obj:
    """A strategic merge patch of ``pods/status`` adding the DisruptionTarget condition; the
    UID makes it fail on a replaced Pod (as ``PatchPodStatus``)."""
    previous = next(
        (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == POD_CONDITION["type"]), None
    )
    changed = previous is None or previous.get("status") != POD_CONDITION["status"]
    condition = dict(
        POD_CONDITION,
        lastTransitionTime=format_time(now) if changed or previous is None else previous.get("lastTransitionTime"),
    )
    return {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"conditions": [condition]}}


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """``metav1.LabelSelector``: no selector selects nothing, the empty one everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression.get("key"), expression.get("operator"), expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def budget_selects(pdb: Obj, pod: Obj) -> bool:
    return pdb["metadata"].get("namespace") == pod["metadata"].get("namespace") and selector_matches(
        (pdb.get("spec") or {}).get("selector"), pod["metadata"].get("labels") or {}
    )


def budget_allows(pdb: Obj) -> int:
    """Disruptions a PodDisruptionBudget allows now; none while its status lags its spec (the
    Eviction API refuses then too)."""
    status = pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(pdb["metadata"].get("generation") or 0):
        return 0
    return int(status.get("disruptionsAllowed") or 0)


def eviction_body(pod: Obj) -> Obj:
    """A policy/v1 Eviction for ``pods/<name>/eviction`` that only hits this Pod instance."""
    meta = pod["metadata"]
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "deleteOptions": {"preconditions": {"uid": meta["uid"]}},
    }


# -- DeviceTaintRule status --------------------------------------------------------------------


@dataclass(frozen=True)
class RuleCounts:
    pending_pods: int = 0
    pending_namespaces: int = 0
    published_devices: int = 0  # effect None only
    allocated_devices: int = 0  # effect None only


def existing_condition(rule: Obj) -> Obj | None:
    for condition in (rule.get("status") or {}).get("conditions") or []:
        if condition.get("type") == CONDITION_TYPE:
            return condition
    return None


def status_wait(rule: Obj, now: datetime.datetime) -> float:
    """Seconds until the rule's status may be written again: 10 s after the last write while
    the condition is current for this generation (``lastTransitionTime`` changes on every write)."""
    condition = existing_condition(rule)
    if condition is None or condition.get("observedGeneration") != rule["metadata"].get("generation"):
        return 0.0
    last = parse_time(condition.get("lastTransitionTime"))
    if last is None:
        return 0.0
    since = (now - last).total_seconds()
    return RULE_STATUS_PERIOD - since if since < RULE_STATUS_PERIOD else 0.0


def _plural(n: int, one: str, many: str) -> str:
    return one if n == 1 else many.format(n=n)


def rule_condition(rule: Obj, counts: RuleCounts, evicted: int) -> Obj:
    """The ``EvictionInProgress`` condition upstream computes, without ``lastTransitionTime``."""
    effect = rule_effect(rule)
    condition: Obj = {
        "type": CONDITION_TYPE,
        "status": "False",
        "reason": "Effect" + effect,
        "message": "",
        "observedGeneration": rule["metadata"].get("generation"),
    }
    if effect == NO_EXECUTE:
        if counts.pending_pods > 0:
            condition["status"], condition["reason"] = "True", "PodsPendingEviction"
            condition["message"] = _plural(
                counts.pending_pods, "1 pod needs to be evicted in ", "{n} pods need to be evicted in "
            ) + _plural(counts.pending_namespaces, "1 namespace.", "{n} different namespaces.")
        elif evicted > 0:
            condition["reason"] = "Completed"
        else:
            condition["reason"] = "NotStarted"
    elif effect == NONE_EFFECT:
        condition["reason"] = "NoEffect"
        condition["message"] = (
            _plural(counts.published_devices, "1 published device selected. ", "{n} published devices selected. ")
            + _plural(counts.allocated_devices, "1 allocated device selected. ", "{n} allocated devices selected. ")
            + _plural(counts.pending_pods, "1 pod would be evicted in ", "{n} pods would be evicted in ")
            + _plural(counts.pending_namespaces, "1 namespace ", "{n} different namespaces ")
            + "if the effect was NoExecute. This information will not be updated again. "
            "Recreate the DeviceTaintRule to trigger an update."
        )
    else:
        condition["reason"] = "OtherEffect"
        condition["message"] = "Eviction only happens for the NoExecute effect."
    if evicted > 0:
        if condition["message"]:
            condition["message"] += " "
        condition["message"] += _plural(evicted, "1 pod ", "{n} pods ") + "evicted since starting the controller."
    return condition


def condition_changed(existing: Obj | None, new: Obj) -> bool:
    if existing is None:
        return True
    return any(existing.get(k) != new.get(k) for k in ("type", "status", "reason", "message", "observedGeneration"))


def rule_status_apply(rule: Obj, api_version: str, condition: Obj, now: datetime.datetime) -> Obj:
    """The server-side apply body of the rule's status: the UID makes it a precondition."""
    meta = rule["metadata"]
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": meta["name"], "uid": meta["uid"]},
        "status": {"conditions": [dict(condition, lastTransitionTime=format_time(now))]},
    }


# -- guard rails -------------------------------------------------------------------------------


class BadAnnotation(ValueError):
    """A guard-rail annotation on a rule that cannot be understood."""


def rule_rate(rule: Obj) -> float | None:
    """Evictions per second the rule allows (annotation), None when unlimited."""
    raw = (rule["metadata"].get("annotations") or {}).get(RATE_ANNOTATION)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadAnnotation(
            f'{RATE_ANNOTATION}="{raw}" is not a number; write evictions per second, for example "20" or "0.5"'
        ) from None
    if not value > 0:
        raise BadAnnotation(f'{RATE_ANNOTATION}="{raw}" must be greater than 0 (remove it for no limit)')
    return value


def uses_eviction_api(rule: Obj) -> bool:
    raw = (rule["metadata"].get("annotations") or {}).get(EVICTION_API_ANNOTATION)
    if raw is None:
        return False
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise BadAnnotation(f'{EVICTION_API_ANNOTATION}="{raw}" must be "true" or "false"')


def eviction_api_max_wait(rule: Obj, default: float) -> float:
    raw = (rule["metadata"].get("annotations") or {}).get(MAX_WAIT_ANNOTATION)
    if raw is None:
        return default
    try:
        value = float(raw.rstrip("s"))
    except ValueError:
        raise BadAnnotation(f'{MAX_WAIT_ANNOTATION}="{raw}" is not a number of seconds, for example "300"') from None
    if value < 0:
        raise BadAnnotation(f'{MAX_WAIT_ANNOTATION}="{raw}" must not be negative')
    return value


def eviction_api_wait(rules: Sequence[Obj], eviction: Eviction, default_max_wait: float) -> float | None:
    """Seconds past the due time the Eviction API may be retried before the Pod is deleted, or
    None when the Pod is deleted directly. Only when every reason is a rule that opted in: a
    driver's own NoExecute taint (from its ResourceSlice) keeps upstream's immediate delete.
    The longest wait of those rules applies."""
    by_uid = {r["metadata"].get("uid"): r for r in rules}
    waits = []
    for reason in eviction.reasons:
        rule = by_uid.get(reason.rule_uid) if reason.is_rule else None
        try:
            if rule is None or not uses_eviction_api(rule):
                return None
        except BadAnnotation:
            return None
        try:
            waits.append(eviction_api_max_wait(rule, default_max_wait))
        except BadAnnotation:
            waits.append(default_max_wait)
    return max(waits) if waits else None


# -- eviction metrics --------------------------------------------------------------------------

# dra_operators_taints_evictions_total{method, outcome}
EVICTION_API, DELETE = "eviction_api", "delete"
# gave_up: the Eviction API still refused after the longest wait; the Pod is deleted instead.
EVICTED, BLOCKED, FAILED, GAVE_UP = "evicted", "blocked", "failed", "gave_up"


def blocked_pods(parked: Mapping[str, Iterable[str]]) -> int:
    """Pods waiting because a PodDisruptionBudget allows no disruption now (parked under each of
    their budgets: a Pod under two budgets counts once)."""
    return len({key for keys in parked.values() for key in keys})
