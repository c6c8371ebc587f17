"""PodGroup claims (KEP-5729, DRAWorkloadResourceClaims) side by side with upstream's
resourceclaim-controller, with the gate on and with it off.

Gate on: the session's lab (every DRA gate on). Gate off: a lab of this module's own whose
kube-apiserver, kube-controller-manager and kube-scheduler run without DRAWorkloadResourceClaims
(GenericWorkload stays on, so PodGroups are served). Our operator finds out which from the API
server (``operators.core.api.featuregates``). Each scenario runs once with upstream's controller and
once with ours; PodGroup statuses, claims (owner, reservations, allocation), Pod statuses and
Events must be the same after normalising generated names and UIDs. A PodGroup's UID in a
claim's owner or ``reservedFor`` is compared as "that PodGroup's" or "another UID".
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from operators.core.api.resources import POD_GROUPS, PODS, RESOURCE_CLAIMS
from operators.lab import Lab, LabOptions

from . import objects
from .claims_env import NODE, ClaimsEnv
from .compare import Normaliser, differences, snapshot
from .conftest import Controllers
from .labs import client_of, short_run_dir
from .operator_process import OperatorProcess
from .waiting import wait_for

GATE = "DRAWorkloadResourceClaims"


def tmpl(name: str) -> dict[str, str]:
    return {"resourceClaimTemplateName": name}


def plain(name: str) -> dict[str, str]:
    return {"resourceClaimName": name}


class PodGroupEnv(ClaimsEnv):
    """ClaimsEnv with PodGroups: ``pod_group``, ``member`` (a Pod of a PodGroup) and a snapshot
    that includes the PodGroups.

    ``start``, when set, starts the controller under test at the first object that is not a
    template: the templates a scenario makes first are then in the controller's start-up LIST.
    Made a moment before the PodGroup, a template could still be missing from upstream's template
    informer when its PodGroup came (two watches, no order between them): upstream then posted a
    FailedResourceClaimCreation it retried away, and ours, which reads a template it has not
    cached from the API server, did not (CI5, group_template_claim_shared)."""

    start: Callable[[], Awaitable[None]] | None = None

    async def started(self) -> None:
        if self.start is not None:
            start, self.start = self.start, None
            await start()

    async def claim(self, name: str) -> None:
        await self.started()
        await super().claim(name)

    async def pod(self, name: str, claims: dict[str, dict[str, str]], *args: Any, **kwargs: Any) -> None:
        await self.started()
        await super().pod(name, claims, *args, **kwargs)

    async def pod_group(self, name: str, claims: dict[str, dict[str, str]]) -> None:
        await self.started()
        await self.kube.create(POD_GROUPS, objects.pod_group(name, claims), self.namespace)

    async def member(self, name: str, group: str, claims: dict[str, dict[str, str]], node: str | None = None) -> None:
        await self.started()
        body = objects.member(name, group, claims)
        if node:
            body["spec"]["nodeName"] = node
        await self.kube.create(PODS, body, self.namespace)

    async def group_claim(self, group: str, group_claim: str) -> str:
        async def named() -> str | None:
            found = await self.kube.get_or_none(POD_GROUPS, group, self.namespace)
            for status in ((found or {}).get("status") or {}).get("resourceClaimStatuses") or []:
                if status["name"] == group_claim and status.get("resourceClaimName"):
                    return status["resourceClaimName"]
            return None

        return await wait_for(named, timeout=60, what=f"PodGroup {group} claim {group_claim}", describe=self.describe)

    async def delete_pod_group(self, name: str) -> None:
        await self.kube.delete(POD_GROUPS, name, self.namespace)
        await wait_for(lambda: self._gone(POD_GROUPS, name), what=f"PodGroup {name} gone", describe=self.describe)

    async def add_reservation(self, claim: str, entry: dict) -> None:
        """Another writer's reservedFor entry (the status subresource, as the scheduler writes it)."""
        current = await self.kube.get(RESOURCE_CLAIMS, claim, self.namespace)
        current["status"]["reservedFor"] = [*(current["status"].get("reservedFor") or []), entry]
        await self.kube.replace(RESOURCE_CLAIMS, current, subresource="status")

    async def snapshot(self) -> dict[str, Any]:
        """Settled (unchanged for 1.5 s) snapshot with PodGroups, this run's token replaced."""
        previous = await self._snapshot()
        for _ in range(20):
            await asyncio.sleep(1.5)
            current = await self._snapshot()
            if current == previous:
                break
            previous = current
        return json.loads(json.dumps(previous).replace(self.token, "<run>"))

    async def _snapshot(self) -> dict[str, Any]:
        snap = await snapshot(self.kube, self.namespace)
        for claim in snap["claims"]:
            claim["reservedFor"].sort(key=lambda r: r["name"])
        groups = await self.kube.list(POD_GROUPS, self.namespace)
        claims = await self.kube.list(RESOURCE_CLAIMS, self.namespace)
        n = Normaliser(await self.kube.list(PODS, self.namespace), claims)
        uids = {g["metadata"]["name"]: g["metadata"]["uid"] for g in groups}

        def group_ref(ref: dict) -> str:
            return "that PodGroup's" if uids.get(ref.get("name")) == ref.get("uid") else "another UID"

        snap["podGroups"] = [
            {
                "name": g["metadata"]["name"],
                "resourceClaims": g["spec"].get("resourceClaims"),
                "resourceClaimStatuses": sorted(
                    (
                        dict(s, resourceClaimName=Normaliser.generated(s["resourceClaimName"]))
                        if s.get("resourceClaimName")
                        else s
                        for s in (g.get("status") or {}).get("resourceClaimStatuses") or []
                    ),
                    key=lambda s: s["name"],
                ),
                "managers": sorted(
                    {
                        (m.get("manager"), m.get("operation"), m.get("subresource", ""))
                        for m in g["metadata"].get("managedFields") or []
                        if m.get("manager") == "ResourceClaimController"
                    }
                ),
            }
            for g in sorted(groups, key=lambda g: g["metadata"]["name"])
        ]
        snap["podGroupRefs"] = sorted(
            [n.name(c["metadata"]["name"]), where, r.get("name"), group_ref(r)]
            for c in claims
            for where, refs in (
                ("owner", [o for o in c["metadata"].get("ownerReferences") or [] if o.get("kind") == "PodGroup"]),
                (
                    "reservedFor",
                    [r for r in (c.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "podgroups"],
                ),
            )
            for r in refs
        )
        return snap


# -- scenarios with the gate on (the session's lab) -------------------------------------------


async def group_template_claim_shared(env: PodGroupEnv) -> list:
    """One claim from the PodGroup's template, owned by the PodGroup, named <podgroup>-<claim>-,
    recorded in the PodGroup's and both Pods' statuses, reserved for the PodGroup."""
    await env.template("t", labels={"team": "a"}, annotations={"note": "x"})
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.member("p1", "pg", {"gpu": tmpl("t")})
    await env.member("p2", "pg", {"gpu": tmpl("t")})
    await env.wait_running("p1")
    await env.wait_running("p2")
    return [await env.snapshot()]


async def group_claim_before_members(env: PodGroupEnv) -> list:
    await env.template("t")
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.group_claim("pg", "gpu")
    alone = await env.snapshot()
    await env.member("p1", "pg", {"gpu": tmpl("t")})
    await env.wait_running("p1")
    return [alone, await env.snapshot()]


async def member_claims_not_in_group(env: PodGroupEnv) -> list:
    """A claim of another name, and one of the same name from another template, are the Pod's own.
    p2 comes once p1 runs: created right after its template t2, it met a controller whose
    template informer had not delivered t2 yet, upstream's once in CI16, and a transient
    FailedResourceClaimCreation Event that only one side posted."""
    await env.template("t")
    await env.template("t2")
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.member("p1", "pg", {"gpu": tmpl("t"), "own": tmpl("t")})
    await env.wait_running("p1")
    await env.member("p2", "pg", {"gpu": tmpl("t2")})
    await env.wait_running("p2")
    return [await env.snapshot()]


async def group_template_after_group(env: PodGroupEnv) -> list:
    """No template yet: a FailedResourceClaimCreation Event on the PodGroup; the claim follows the template."""
    await env.pod_group("pg", {"gpu": tmpl("late")})
    await env.wait_event("FailedResourceClaimCreation")
    before = await env.snapshot()
    await env.template("late")
    await env.group_claim("pg", "gpu")
    return [before, await env.snapshot()]


async def group_deleted(env: PodGroupEnv) -> list:
    """The Pods are gone but the claim stays reserved for the PodGroup; when the PodGroup goes,
    the reservation is removed, the claim deallocated and garbage-collected."""
    await env.template("t")
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.member("p1", "pg", {"gpu": tmpl("t")})
    await env.wait_running("p1")
    await env.delete_pod("p1")
    no_pods = await env.snapshot()
    await env.delete_pod_group("pg")
    await env.wait_no_claims()
    return [no_pods, await env.snapshot()]


async def group_user_claim(env: PodGroupEnv) -> list:
    """A claim the user made, named by the PodGroup and its Pods: reserved for the PodGroup, and
    a Pod scheduled by hand (nodeName) counts as reserved through its PodGroup."""
    await env.claim("shared")
    await env.pod_group("pg", {"gpu": plain("shared")})
    await env.member("p1", "pg", {"gpu": plain("shared")})
    await env.wait_running("p1")
    await env.member("p2", "pg", {"gpu": plain("shared")}, node=NODE)
    await env.wait_running("p2")
    return [await env.snapshot()]


async def member_before_group(env: PodGroupEnv) -> list:
    """A Pod whose PodGroup does not exist yet gets no claim at all (upstream's getPodGroup fails
    and is retried); once the PodGroup is there, its members are looked at again."""
    await env.template("t")
    await env.member("p1", "pg", {"gpu": tmpl("t"), "own": tmpl("t")})
    before = await env.snapshot()
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.wait_running("p1")
    return [before, await env.snapshot()]


async def foreign_group_reservation(env: PodGroupEnv) -> list:
    """A reservedFor entry for a PodGroup that does not exist: removed with the gate on (the
    claim is deallocated once its last Pod finished); kept with the gate off, where upstream
    does not check PodGroup entries (the claim stays allocated)."""
    await env.claim("shared")
    await env.pod("a", {"gpu": plain("shared")})
    await env.wait_running("a")
    await env.add_reservation(
        "shared", {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "ghost", "uid": str(uuid.uuid4())}
    )
    reserved = await env.snapshot()
    await env.finish("a")
    return [reserved, await env.snapshot()]


async def member_reserved_through_group(env: PodGroupEnv) -> list:
    """A Pod scheduled by hand whose claim is reserved for its PodGroup (by another writer):
    reserved already with the gate on; with the gate off the Pod gets its own entry."""
    await env.claim("shared")
    await env.pod_group("pg", {"gpu": plain("shared")})
    await env.pod("a", {"gpu": plain("shared")})
    await env.wait_running("a")
    group = await env.kube.get(POD_GROUPS, "pg", env.namespace)
    await env.add_reservation(
        "shared",
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "pg", "uid": group["metadata"]["uid"]},
    )
    await env.member("p2", "pg", {"gpu": plain("shared")}, node=NODE)
    await env.wait_running("p2")
    return [await env.snapshot()]


# -- scenarios with the gate off (this module's lab) ------------------------------------------


async def group_claims_dropped(env: PodGroupEnv) -> list:
    """The API server drops the PodGroup's resourceClaims: each Pod gets a claim of its own."""
    await env.template("t")
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.member("p1", "pg", {"gpu": tmpl("t")})
    await env.member("p2", "pg", {"gpu": tmpl("t")})
    await env.wait_running("p1")
    await env.wait_running("p2")
    return [await env.snapshot()]


async def member_deleted_gate_off(env: PodGroupEnv) -> list:
    await env.template("t")
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.member("p1", "pg", {"gpu": tmpl("t")})
    await env.wait_running("p1")
    await env.finish("p1")
    await env.wait_no_claims()
    return [await env.snapshot()]


GATE_ON = [
    group_template_claim_shared,
    group_claim_before_members,
    member_claims_not_in_group,
    group_template_after_group,
    group_deleted,
    group_user_claim,
    member_before_group,
    foreign_group_reservation,
    member_reserved_through_group,
]
GATE_OFF = [
    group_claims_dropped,
    member_deleted_gate_off,
    member_before_group,
    foreign_group_reservation,
    member_reserved_through_group,
]


async def _side_by_side(scenario, kube, controllers: Controllers, token: str, metrics: bool = False) -> list:
    results = {}
    for mode in ("upstream", "ours"):
        async with PodGroupEnv(kube, f"{mode[:2]}{token}") as env:
            # fresh: the create counter is compared, so it must count only this scenario.
            env.start = lambda mode=mode: asyncio.to_thread(controllers.use, mode, metrics)
            results[mode] = await scenario(env)
            await env.started()  # a scenario of templates alone
            if metrics:
                text = await asyncio.to_thread(
                    controllers.lab.controller_manager_metrics
                    if mode == "upstream"
                    else controllers.operators["claims"].metrics
                )
                results[mode].append(_pod_group_creates(text))
    upstream = [without_known_upstream_bugs(snap) for snap in results["upstream"]]
    diff = differences(upstream, results["ours"])
    assert not diff, (
        "ours differs from upstream:\n"
        + "\n".join(diff)
        + "\n\nupstream: "
        + json.dumps(results["upstream"], indent=1)[:6000]
    )
    assert any(snap["pods"] or snap["podGroups"] for snap in results["ours"]), "the scenario left nothing to compare"
    return results["ours"]


@pytest.mark.parametrize("scenario", GATE_ON, ids=[s.__name__ for s in GATE_ON])
async def test_gate_on_same_as_upstream(scenario, kube, controllers, unique, lab):
    assert GATE in lab.feature_gates
    await _side_by_side(scenario, kube, controllers, unique)


def without_known_upstream_bugs(snap: dict) -> dict:
    """Upstream's snapshot without the bug the claims operator deliberately does not copy (docs/operators/claims.md,
    where it differs from upstream): kubernetes#141274, upstream adds a finished but scheduled
    Pod back to a shared claim's reservedFor after its cleanup removed it, so the two fight and a
    snapshot may catch the entry. Ours drops it for good."""
    if not isinstance(snap, dict) or "pods" not in snap:
        return snap
    finished = {p["name"] for p in snap["pods"] if p["phase"] in ("Succeeded", "Failed")}
    fixed = json.loads(json.dumps(snap))
    for claim in fixed["claims"]:
        claim["reservedFor"] = [
            r for r in claim["reservedFor"] if r.get("resource") != "pods" or r["name"] not in finished
        ]
    return fixed


def _pod_group_creates(text: str) -> dict[str, Any]:
    """The create counter's samples for claims owned by PodGroups: label values and counts."""
    return {
        "creates": sorted(
            [sorted(sample.labels.items()), sample.value]
            for family in text_string_to_metric_families(text)
            if family.name == "dynamic_resource_allocation_resourceclaim_creates"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels.get("owner_api_kind") == "PodGroup"
        )
    }


async def test_gate_on_create_metric_of_podgroup_claims_as_upstream(kube, controllers, unique, lab):
    """``dynamic_resource_allocation_resourceclaim_creates_total`` counts a PodGroup's claim with
    owner_api_group scheduling.k8s.io and owner_api_kind PodGroup, once, as upstream's."""
    results = await _side_by_side(group_template_claim_shared, kube, controllers, unique, metrics=True)
    assert results[-1] == {
        "creates": [
            [
                [
                    ("admin_access", "false"),
                    ("owner_api_group", "scheduling.k8s.io"),
                    ("owner_api_kind", "PodGroup"),
                    ("status", "success"),
                ],
                1.0,
            ]
        ]
    }


@pytest.fixture(scope="module")
def gate_off_lab(tmp_path_factory: pytest.TempPathFactory):
    run_dir = short_run_dir("pg-off-")
    lab = Lab(
        LabOptions(name=f"pytest-{os.getpid()}-podgroup-off", nodes=1, run_dir=run_dir, disabled_gates=(GATE,)),
        log=lambda message: print(message, flush=True),
    )
    lab.start()
    logs = tmp_path_factory.mktemp("podgroup-off-logs")
    switch = Controllers(lab, {"claims": OperatorProcess(["claims"], lab.kubeconfig, logs)})
    try:
        yield lab, switch
    finally:
        switch.stop()
        lab.stop()


@pytest.fixture(scope="module")
async def gate_off(gate_off_lab):
    lab, switch = gate_off_lab
    async with client_of(lab) as client:
        yield lab, switch, client


@pytest.mark.parametrize("scenario", GATE_OFF, ids=[s.__name__ for s in GATE_OFF])
async def test_gate_off_same_as_upstream(scenario, gate_off, unique):
    lab, switch, kube = gate_off
    assert GATE not in lab.feature_gates and "GenericWorkload" in lab.feature_gates
    await _side_by_side(scenario, kube, switch, unique)


async def test_gate_switched_off_after_podgroups_got_claims(gate_off, unique):
    """The issue's case: PodGroups that got resourceClaims while the gate was on keep them when it
    is switched off, and then 1.37 creates no claim for a Pod whose claim matches its PodGroup's
    (podNeedsWork: the PodGroup's to create; 1.36 made one per Pod). A member with another claim
    besides is synced, fails on the PodGroup claim for good (an Event, no retry) and so gets
    neither. The PodGroups are made with no claims controller running; then the lab switches
    the gate off and the controller under test starts (ours reads the gate at start-up)."""
    lab, switch, kube = gate_off
    results = {}
    for mode in ("upstream", "ours"):
        switch.use("none")
        await asyncio.to_thread(lab.restart_with_gates, ())
        try:
            async with PodGroupEnv(kube, f"{mode[:2]}{unique}") as env:
                await env.template("t")
                await env.pod_group("pg", {"gpu": tmpl("t")})
                made = await kube.get(POD_GROUPS, "pg", env.namespace)
                assert made["spec"].get("resourceClaims"), "the gate was on: the claims are kept"
                await asyncio.to_thread(lab.restart_with_gates, (GATE,))
                switch.use(mode)
                await env.member("p1", "pg", {"gpu": tmpl("t")})
                await env.member("p2", "pg", {"gpu": tmpl("t"), "own": tmpl("t")})
                await env.wait_event("FailedResourceClaimCreation")
                results[mode] = await env.snapshot()
        finally:
            await asyncio.to_thread(lab.restart_with_gates, (GATE,))
    diff = differences(results["upstream"], results["ours"])
    assert not diff, (
        "ours differs from upstream:\n"
        + "\n".join(diff)
        + "\n\nupstream: "
        + json.dumps(results["upstream"], indent=1)[:6000]
    )
    assert results["ours"]["claims"] == [] and [p["phase"] for p in results["ours"]["pods"]] == ["Pending"] * 2


async def test_gate_is_read_from_the_api_server(gate_off, kube):
    """The operator's detection: the session's lab says on, this module's lab says off."""
    from operators.claims.operator import detect_features

    _, _, off_kube = gate_off
    on, off = await detect_features(kube), await detect_features(off_kube)
    assert (on.generic_workload, on.workload_claims) == (True, True)
    assert (off.generic_workload, off.workload_claims) == (True, False)
