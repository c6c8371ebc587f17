"""What a DeviceTaintRule would evict, and when, computed from the cluster's current state
without changing anything (the guard rail for kubernetes#141422: an empty selector evicts
every Pod with a device).

The computation is the operator's own (``TaintsController`` caches and ``decisions``), with
the rule treated as NoExecute, as upstream simulates the ``None`` effect: what the preview lists
is what eviction then does, as long as nothing else changes.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Any

from ..core.api.featuregates import detect_workload
from ..core.api.kube import Kube
from ..core.api.resources import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from ..core.dra import resourceclaim as rc
from ..core.dra.metatime import format_time, parse_time
from . import decisions as d
from .controller import TaintsController
from .discovery import discover_rules

PREVIEW_UID = "preview"  # a rule read from a file has no UID yet


@dataclass
class PodRow:
    namespace: str
    name: str
    uid: str
    node: str
    due: datetime.datetime
    estimated: datetime.datetime  # with the rule's rate limit
    claims: list[str]
    other_reasons: list[str]  # taints that evict the Pod anyway (maybe earlier)


@dataclass
class Preview:
    rule: str
    effect: str
    time_added: datetime.datetime
    published_devices: int
    allocated_devices: int
    rate: float | None
    eviction_api: bool
    pods: list[PodRow] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # what the operator would report on the rule

    @property
    def namespaces(self) -> int:
        return len({p.namespace for p in self.pods})

    def to_json(self, now: datetime.datetime) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "effect": self.effect,
            "simulatedEffect": d.NO_EXECUTE,
            "timeAdded": format_time(self.time_added),
            "publishedDevices": self.published_devices,
            "allocatedDevices": self.allocated_devices,
            "evictionsPerSecond": self.rate,
            "evictionAPI": self.eviction_api,
            "namespaces": self.namespaces,
            "pods": [
                {
                    "namespace": p.namespace,
                    "name": p.name,
                    "uid": p.uid,
                    "node": p.node,
                    "evictAt": format_time(p.due),
                    "inSeconds": max(0, math.ceil((p.due - now).total_seconds())),
                    "estimatedAt": format_time(p.estimated),
                    "claims": p.claims,
                    "otherReasons": p.other_reasons,
                }
                for p in self.pods
            ],
            "problems": self.problems,
        }


def prepare_rule(rule: d.Obj, now: datetime.datetime) -> d.Obj:
    """A rule from a file as the API server would store it: a name, a UID for matching
    reasons, ``timeAdded`` now when unset."""
    rule = dict(rule)
    meta = dict(rule.get("metadata") or {})
    meta.setdefault("name", "preview")
    meta.setdefault("uid", PREVIEW_UID)
    meta.setdefault("generation", 1)
    rule["metadata"] = meta
    spec = dict(rule.get("spec") or {})
    taint = dict(spec.get("taint") or {})
    taint.setdefault("timeAdded", format_time(now))
    spec["taint"] = taint
    rule["spec"] = spec
    return rule


def estimate(dues: list[datetime.datetime], rate: float | None) -> list[datetime.datetime]:
    """Eviction times after a rate limit of one token per 1/rate seconds (burst one)."""
    if not rate:
        return list(dues)
    out: list[datetime.datetime] = []
    for due in dues:
        when = due if not out else max(due, out[-1] + datetime.timedelta(seconds=1 / rate))
        out.append(when)
    return out


def compute(controller: TaintsController, rule: d.Obj, now: datetime.datetime) -> Preview:
    """The Pods the rule would evict, with every other NoExecute rule and slice taint in force."""
    effect = d.rule_effect(rule)
    simulated = d.as_no_execute(rule)
    others = [r for r in controller.evicting_rules() if r["metadata"]["name"] != rule["metadata"]["name"]]
    found, _ = controller.pods_evicted_by(simulated, [*others, simulated])
    found.sort(key=lambda pe: (pe[1].when, rc.pod_key(pe[0])))
    try:
        rate = d.rule_rate(rule)
    except d.BadAnnotation:
        rate = None
    try:
        eviction_api = d.uses_eviction_api(rule)
    except d.BadAnnotation:
        eviction_api = False
    estimated = estimate([e.when for _, e in found], rate)
    published, allocated = controller.selected_devices(simulated)
    preview = Preview(
        rule=rule["metadata"]["name"],
        effect=effect,
        time_added=parse_time(d.rule_taint(rule).get("timeAdded")) or now,
        published_devices=published,
        allocated_devices=allocated,
        rate=rate,
        eviction_api=eviction_api,
    )
    # CEL selectors that fail, a missing DeviceClass, unreadable guard-rail annotations: the
    # Events the operator would post on the rule.
    controller._check_annotations(rule)
    preview.problems = [
        f"{reason}: {message}" for reason, message in sorted(controller.rule_problems.get(rule["metadata"]["name"], ()))
    ]
    for (pod, eviction), when in zip(found, estimated, strict=True):
        preview.pods.append(
            PodRow(
                namespace=pod["metadata"]["namespace"],
                name=pod["metadata"]["name"],
                uid=pod["metadata"]["uid"],
                node=pod["spec"].get("nodeName", ""),
                due=eviction.when,
                estimated=when,
                claims=[k for k in rc.pod_claim_keys(pod) if controller.claims.get(k) is not None],
                other_reasons=[str(r) for r in eviction.reasons if r.rule != rule["metadata"]["name"]],
            )
        )
    return preview


async def load(kube: Kube, rule: d.Obj | None, name: str | None) -> tuple[TaintsController, d.Obj]:
    """The cluster's state in a controller's caches (nothing is started), and the rule."""
    rules_resource, _ = await discover_rules(kube)
    workload = await detect_workload(kube)
    controller = TaintsController(
        kube, rules=rules_resource, rule_status=False, workload_claims=workload.workload_claims
    )
    existing = await kube.list(rules_resource) if rules_resource else []
    controller.prime(
        rules=existing,
        classes=await kube.list(DEVICE_CLASSES),
        slices=await kube.list(RESOURCE_SLICES),
        claims=await kube.list(RESOURCE_CLAIMS),
        pods=await kube.list(PODS),
    )
    if rule is None:
        if rules_resource is None:
            raise LookupError("the cluster serves no DeviceTaintRules")
        rule = controller.rules.get(name or "")
        if rule is None:
            raise LookupError(f"DeviceTaintRule {name!r} not found (give a file to preview a new rule)")
    return controller, rule


def render(preview: Preview, now: datetime.datetime) -> str:
    lines = [
        f"DeviceTaintRule {preview.rule}: effect {preview.effect or '(none)'}"
        + ("" if preview.effect == d.NO_EXECUTE else ", previewed as if it were NoExecute")
        + f", taint added {format_time(preview.time_added)}"
    ]
    pods, namespaces = len(preview.pods), preview.namespaces
    lines.append(
        f"selects {preview.published_devices} published and {preview.allocated_devices} allocated devices; "
        f"{pods} pod{'' if pods == 1 else 's'} would be evicted in "
        f"{namespaces} namespace{'' if namespaces == 1 else 's'}"
    )
    if preview.rate:
        lines.append(f"rate limit {preview.rate:g} evictions per second")
    if preview.eviction_api:
        lines.append("evicts through the Eviction API (PodDisruptionBudgets are respected)")
    for problem in preview.problems:
        lines.append(f"problem: {problem}")
    if preview.pods:
        header = ("NAMESPACE", "POD", "NODE", "EVICT AT", "IN", "CLAIMS")
        rows = [
            (
                p.namespace,
                p.name,
                p.node,
                format_time(p.estimated),
                f"{max(0, math.ceil((p.estimated - now).total_seconds()))}s",
                ",".join(k.split("/", 1)[1] for k in p.claims),
            )
            for p in preview.pods
        ]
        widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
        for row in (header, *rows):
            lines.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)
