"""Every claim's story for one Pod, or for one claim (pure: plain dicts in, a report out).

A claim is in one of these states, and the story says what it means and what to look at:

- ``template-missing``: the ResourceClaimTemplate does not exist (the claims controller's
  ``FailedResourceClaimCreation`` Event says so too);
- ``claim-missing``: the Pod names a ResourceClaim that does not exist;
- ``not-created``: the template exists but no claim was made yet: is a claims controller (ours or
  kube-controller-manager's resourceclaim-controller) running?
- ``no-claim-needed``: the controller recorded that none is needed;
- ``allocated``: which device, which request or subrequest won, when;
- ``binding``: allocated, the scheduler waits for the devices' binding conditions;
- ``binding-failed``: a binding failure condition is true (the scheduler will deallocate);
- ``pending``: not allocated: evaluated request by request as the scheduler would;
- ``deleting``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..core.dra.claimstate import allocated_at, binding_state, claim_state
from ..core.dra.resourceclaim import (
    ClaimNotCreatedYet,
    UnsupportedPodClaim,
    allocation_results,
    claim_name,
    is_allocated,
    pod_claims,
)
from . import analysis

Obj = dict[str, Any]

ADMIN_LABEL = "resource.kubernetes.io/admin-access"  # resource.DRAAdminNamespaceLabelKey


@dataclass
class World:
    """What explain reads from the cluster."""

    pods: list[Obj] = field(default_factory=list)
    claims: list[Obj] = field(default_factory=list)
    templates: list[Obj] = field(default_factory=list)
    classes: list[Obj] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    namespaces: list[Obj] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)

    def find(self, kind: str, namespace: str | None, name: str) -> Obj | None:
        items = {"claims": self.claims, "templates": self.templates, "pods": self.pods, "namespaces": self.namespaces}[
            kind
        ]
        return next(
            (
                o
                for o in items
                if o["metadata"]["name"] == name and (namespace is None or o["metadata"].get("namespace") == namespace)
            ),
            None,
        )

    @property
    def class_map(self) -> dict[str, Obj]:
        return {c["metadata"]["name"]: c for c in self.classes}

    def events_for(self, kind: str, namespace: str, name: str, limit: int = 5) -> list[Obj]:
        found = [
            e
            for e in self.events
            if (e.get("involvedObject") or {}).get("kind") == kind
            and (e.get("involvedObject") or {}).get("name") == name
            and e["metadata"].get("namespace") == namespace
        ]
        found.sort(
            key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or e["metadata"].get("creationTimestamp") or ""
        )
        return [
            {
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": e.get("message"),
                "count": e.get("count") or 1,
                "last": e.get("lastTimestamp") or e.get("eventTime"),
            }
            for e in found[-limit:]
        ]


def _devices(claim: Obj) -> list[Obj]:
    return [
        {
            "request": r["request"],
            "device": f"{r['driver']}/{r['pool']}/{r['device']}",
            "adminAccess": r.get("adminAccess") or None,
            "shareID": r.get("shareID"),
            "consumedCapacity": r.get("consumedCapacity"),
        }
        for r in allocation_results(claim)
    ]


def _template_admin_problem(template: Obj, namespace: Obj | None) -> str | None:
    requests = (((template.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
    if any((r.get("exactly") or {}).get("adminAccess") for r in requests):
        labels = (namespace or {}).get("metadata", {}).get("labels") or {}
        if labels.get(ADMIN_LABEL) != "true":
            return (
                f"the template asks for admin access, which the API server refuses unless namespace "
                f"{template['metadata'].get('namespace')} has the label {ADMIN_LABEL}=true"
            )
    return None


def pod_claim_story(world: World, pod: Obj, pod_claim: Obj) -> Obj:
    """The story of one entry of ``spec.resourceClaims`` (not the allocation analysis)."""
    namespace = pod["metadata"]["namespace"]
    story: Obj = {"podClaim": pod_claim.get("name"), "claim": None}
    try:
        name, _ = claim_name(pod, pod_claim)
    except ClaimNotCreatedYet:
        template_name = pod_claim["resourceClaimTemplateName"]
        template = world.find("templates", namespace, template_name)
        events = world.events_for("Pod", namespace, pod["metadata"]["name"])
        creation = [e for e in events if e["reason"] == "FailedResourceClaimCreation"]
        if template is None:
            return story | {
                "state": "template-missing",
                "template": template_name,
                "events": creation or events,
                "summary": f"ResourceClaimTemplate {template_name} does not exist in namespace {namespace}: "
                "create it; the claim is made as soon as it exists",
            }
        admin = _template_admin_problem(template, world.find("namespaces", None, namespace))
        summary = f"no ResourceClaim made from template {template_name} yet" + (
            f": {admin}"
            if admin
            else (
                f": {creation[-1]['message']}"
                if creation
                else ": is a claims controller running (the claims operator, or kube-controller-manager's "
                "resourceclaim-controller)?"
            )
        )
        return story | {
            "state": "not-created",
            "template": template_name,
            "events": creation or events,
            "summary": summary,
        }
    except UnsupportedPodClaim as e:
        return story | {"state": "invalid", "summary": str(e), "events": []}
    if not name:
        return story | {"state": "no-claim-needed", "summary": "the claims controller recorded that no claim is needed"}
    story["claim"] = name
    claim = world.find("claims", namespace, name)
    if claim is None:
        return story | {
            "state": "claim-missing",
            "events": world.events_for("Pod", namespace, pod["metadata"]["name"]),
            "summary": f"ResourceClaim {name} does not exist in namespace {namespace}",
        }
    return story | claim_story(world, claim)


def claim_story(world: World, claim: Obj) -> Obj:
    namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
    state = claim_state(claim)
    story: Obj = {"claim": name, "state": state, "events": world.events_for("ResourceClaim", namespace, name)}
    reserved = [r.get("name") for r in (claim.get("status") or {}).get("reservedFor") or []]
    if reserved:
        story["reservedFor"] = reserved
    if state == "deleting":
        story["summary"] = "the claim is being deleted: the scheduler does not use it"
        return story
    if state == "pending":
        story["summary"] = "not allocated"
        return story
    devices = _devices(claim)
    story["devices"] = devices
    story["allocatedAt"] = allocated_at(claim)
    won = sorted({d["request"] for d in devices})
    subrequests = [w for w in won if "/" in w]
    summary = f"allocated {', '.join(d['device'] for d in devices) or 'no device'}"
    if subrequests:
        summary += f" (subrequest {', '.join(subrequests)} won)"
    if story["allocatedAt"]:
        summary += f" at {story['allocatedAt']}"
    binding = binding_state(claim)
    if binding:
        story["binding"] = binding
        if state == "binding":
            waits = ", ".join(f"{p['condition']} on {p['device']}" for p in binding["pending"])
            summary += f"; the scheduler waits for binding conditions: {waits}" + (
                f" (since {binding['since']})" if binding["since"] else ""
            )
        elif state == "binding-failed":
            failures = ", ".join(
                f"{f['condition']} on {f['device']}" + (f": {f['message']}" if f.get("message") else "")
                for f in binding["failed"]
            )
            summary += f"; binding failed: {failures} (the scheduler deallocates and tries again)"
    story["summary"] = summary
    return story


def _scheduled(pod: Obj) -> Obj | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return {"status": c.get("status"), "reason": c.get("reason"), "message": c.get("message")}
    return None


def _request_section(reports: list[list[analysis.AlternativeReport]], notes: list[str]) -> Obj:
    out = []
    for alternatives in reports:
        entry = {
            "name": alternatives[0].request.parent or alternatives[0].request.name,
            "alternatives": [a.to_json() for a in alternatives],
        }
        entry["verdict"] = "enough devices fit" if any(a.enough for a in alternatives) else "not enough devices fit"
        out.append(entry)
    return {"requests": out, "constraints": notes}


def explain_pod(world: World, pod: Obj) -> Obj:
    """The report for one Pod (JSON-ready)."""
    namespace = pod["metadata"]["namespace"]
    usable, rejected = analysis.usable_nodes(pod, world.nodes)
    stories, existing = [], []
    for pod_claim in pod_claims(pod):
        story = pod_claim_story(world, pod, pod_claim)
        if story.get("claim") and (claim := world.find("claims", namespace, story["claim"])) is not None:
            existing.append(claim)
        stories.append(story)
    pending = [c for c in existing if not is_allocated(c)]
    state = analysis.other_claims_state(world.claims, pending)
    for story in stories:
        if story.get("state") == "pending":
            claim = world.find("claims", namespace, story["claim"])
            if claim is None:
                continue  # cannot happen: "pending" is the state of a claim found in the world
            reports, notes = analysis.analyse_claim(claim, world.class_map, world.slices, usable, state)
            story.update(_request_section(reports, notes))
            story["summary"] = "not allocated: " + "; ".join(f"{r['name']}: {r['verdict']}" for r in story["requests"])
    report: Obj = {
        "pod": {
            "namespace": namespace,
            "name": pod["metadata"]["name"],
            "phase": (pod.get("status") or {}).get("phase"),
            "node": (pod.get("spec") or {}).get("nodeName"),
            "scheduled": _scheduled(pod),
        },
        "claims": stories,
        "nodes": {"usable": [n["metadata"]["name"] for n in usable], "rejected": rejected},
    }
    blocked = [s for s in stories if s["state"] in ("template-missing", "claim-missing", "not-created", "invalid")]
    spec = pod.get("spec") or {}
    if spec.get("schedulingGates"):
        report["note"] = (
            "the Pod has scheduling gates ("
            + ", ".join(g.get("name", "") for g in spec["schedulingGates"])
            + "): the scheduler does not look at it until they are removed"
        )
    if blocked:
        report["verdict"] = {
            "allocatable": False,
            "summary": "waiting for claims: " + "; ".join(f"{s['podClaim']}: {s['state']}" for s in blocked),
        }
    elif not existing:
        report["verdict"] = {"allocatable": True, "summary": "the Pod uses no ResourceClaim"}
    elif spec.get("nodeName") and not pending:
        report["verdict"] = {"allocatable": True, "summary": f"on node {spec['nodeName']}, every claim allocated"}
    elif spec.get("nodeName") and pending:
        report["verdict"] = {
            "allocatable": False,
            "summary": (
                f"the Pod was bound to node {spec['nodeName']} without the scheduler (spec.nodeName): nobody allocates "
                "its claims; let the scheduler place it (nodeSelector or affinity instead of nodeName)"
            ),
        }
    else:
        report["verdict"] = analysis.verdict(pod, existing, world.nodes, world.slices, world.class_map, state).to_json()
    report["events"] = world.events_for("Pod", namespace, pod["metadata"]["name"])
    return report


def explain_claim(world: World, claim: Obj) -> Obj:
    """The report for one claim on its own: its story; unallocated, its requests against every
    node (no Pod restricts them)."""
    story = claim_story(world, claim)
    if story["state"] == "pending":
        state = analysis.other_claims_state(world.claims, [claim])
        reports, notes = analysis.analyse_claim(claim, world.class_map, world.slices, world.nodes, state)
        story.update(_request_section(reports, notes))
        pod = {"metadata": {"namespace": claim["metadata"]["namespace"], "name": "(any pod)"}, "spec": {}}
        result = analysis.verdict(pod, [claim], world.nodes, world.slices, world.class_map, state)
        story["verdict"] = result.to_json()
        story["summary"] = "not allocated: " + result.summary
    owners = [o.get("name") for o in claim["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"]
    return {"claim": story, "namespace": claim["metadata"]["namespace"], "ownerPods": owners}
