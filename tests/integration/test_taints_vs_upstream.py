"""The taints operator side by side with upstream's device-taint-eviction-controller.

Every scenario runs twice on the same lab: once with upstream's controllers inside
kube-controller-manager, once with our claims and taints operators instead. To keep this quick
the scenarios of one run go concurrently, each in its own namespace with its own driver and
rules (a module-scoped fixture runs them all per mode once); a scenario that selects every device
of the cluster runs alone after them. Each scenario is then a test of its own: both runs must
leave the same Pods evicted (with the same DisruptionTarget condition), the same Events and the
same DeviceTaintRule conditions; each scenario also checks what it is about, on both runs.

Upstream's own scenarios these follow: test/e2e/dra/dra.go ("DeviceTaintRule evicts pod",
"NoExecute can be tolerated", "NoSchedule keeps pod pending") and
test/integration/dra/device_taints.go (testEvictCluster by slice taint and by rule,
testNoScheduleRule), k8s.io/kubernetes v1.37.1.

The first four scenarios are dra-example-driver's demo/examples/device-taints-tolerations. On
Kubernetes 1.37 the scheduler honours DeviceTaintRules, so the demos' Pods created after a
NoExecute taint stay Pending instead of being scheduled and then evicted (the demos were written
for 1.35/1.36, whose scheduler ignored rules).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import pytest

from operators.core.api.resources import POD_GROUPS, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from operators.taints import decisions as d

from .compare import differences
from .taints_env import NODES, TaintsEnv

MARK = ["Normal", d.EVENT_REASON, d.MARKING]
CANCEL = ["Normal", d.EVENT_REASON, d.CANCELLING]
CONDITION = [{k: d.POD_CONDITION[k] for k in ("type", "status", "reason", "message")}]


def tmpl(name: str) -> dict[str, str]:
    return {"resourceClaimTemplateName": name}


def plain(name: str) -> dict[str, str]:
    return {"resourceClaimName": name}


def evicted(snap: dict) -> set[str]:
    return {name for name, pod in snap["pods"].items() if pod["evicted"]}


# Two defects of Kubernetes 1.34's controller that ours does not copy (both gone in 1.35), each
# checked on the upstream run and then mended by ``fixed_upstream`` before the comparison:
def upstream_marks_once(env: TaintsEnv) -> bool:
    """1.34 emits "Marking for deletion" for the first Pod it evicts after it starts, never
    again: ``deletePodHandler`` (v1.34.12 pkg/controller/devicetainteviction/
    device_taint_eviction.go) clears the event function that every Pod's work shares."""
    return env.mode == "upstream" and env.minor < 35


def upstream_ignores_tolerations(env: TaintsEnv) -> bool:
    """1.34 reads tolerations only from the allocation result, and 1.34's scheduler copies none
    there (v0.34.12 structured allocators), so it evicts a tolerating Pod at once; ours falls
    back to the claim's request (``core.dra.tolerations.result_tolerations``)."""
    return env.mode == "upstream" and env.minor < 35


async def wait_marked(env: TaintsEnv, pod: str) -> None:
    if not upstream_marks_once(env):
        await env.wait_event(pod, d.MARKING)


async def noexecute(env: TaintsEnv) -> dict:
    """device-taint-pod-noexecute: a NoExecute rule evicts the running Pod at once."""
    await env.template("single-gpu")
    await env.pod("pod-to-be-evicted", {"gpu": tmpl("single-gpu")})
    await env.wait_running("pod-to-be-evicted")
    await env.rule("example", {"driver": env.driver})
    await env.wait_evicted("pod-to-be-evicted")
    await env.pod("pod-no-execute", {"gpu": tmpl("single-gpu")})
    await env.wait_rule("example", "Completed", "1 pod evicted since starting the controller.")
    snap = await env.snapshot()
    assert evicted(snap) == {"pod-to-be-evicted"}
    assert snap["pods"]["pod-to-be-evicted"]["disruption"] == CONDITION
    assert snap["pods"]["pod-no-execute"]["phase"] == "Pending"  # 1.37's scheduler avoids the taint
    assert [*MARK, "pod-to-be-evicted"] in snap["events"]
    return snap


async def noschedule(env: TaintsEnv) -> dict:
    """device-taint-pod-noschedule: NoSchedule keeps the running Pod, blocks new ones."""
    await env.template("single-gpu")
    await env.pod("pod-keeps-running", {"gpu": tmpl("single-gpu")})
    await env.wait_running("pod-keeps-running")
    await env.rule("example", {"driver": env.driver}, effect="NoSchedule")
    await env.wait_rule("example", "OtherEffect", "Eviction only happens for the NoExecute effect.")
    await env.pod("pod-not-scheduled", {"gpu": tmpl("single-gpu")})
    await asyncio.sleep(4)
    snap = await env.snapshot()
    assert not evicted(snap) and not snap["events"]
    assert snap["pods"]["pod-keeps-running"]["phase"] == "Running"
    assert snap["pods"]["pod-not-scheduled"]["phase"] == "Pending"
    return snap


async def toleration(env: TaintsEnv) -> dict:
    """device-taint-pod-toleration: the rule comes first; the tolerating Pod runs."""
    await env.rule("example", {"driver": env.driver})
    await env.wait_rule("example", "NotStarted")
    await env.template("with-toleration", [env.toleration()])
    await env.template("without-toleration")
    await env.pod("pod-with-toleration", {"gpu": tmpl("with-toleration")})
    await env.pod("pod-without-toleration", {"gpu": tmpl("without-toleration")})
    await env.wait_running("pod-with-toleration")
    await asyncio.sleep(12)  # past a status period: tolerated for good, nothing pending
    snap = await env.snapshot()
    assert not evicted(snap)
    assert snap["pods"]["pod-without-toleration"]["phase"] == "Pending"
    assert snap["rules"]["<run>-example"]["reason"] == "NotStarted"
    return snap


async def eviction_time(env: TaintsEnv) -> dict:
    """device-taint-configurable-pod-eviction-time, with 6 s instead of 300 s."""
    await env.template("single-gpu-without-toleration")
    await env.template("single-gpu-with-toleration", [env.toleration()])
    await env.template("single-gpu-with-6s-toleration", [env.toleration(6)])
    for pod, template in (
        ("pod-no-toleration", "single-gpu-without-toleration"),
        ("pod-with-toleration", "single-gpu-with-toleration"),
        ("pod-with-6s-toleration", "single-gpu-with-6s-toleration"),
    ):
        await env.pod(pod, {"gpu": tmpl(template)})
    await env.wait_running("pod-no-toleration", "pod-with-toleration", "pod-with-6s-toleration")
    rule = await env.rule("example", {"driver": env.driver})
    added = d.parse_time(rule["spec"]["taint"]["timeAdded"]).timestamp()
    await env.wait_evicted("pod-no-toleration")
    await env.wait_evicted("pod-with-6s-toleration", timeout=30)
    delay = env.watch.deleting_at["pod-with-6s-toleration"] - added
    assert 6 <= delay < 9, f"evicted {delay:.1f}s after the taint was added, expected 6s"
    await env.wait_rule("example", "Completed", "2 pods evicted since starting the controller.")
    snap = await env.snapshot()
    assert evicted(snap) == {"pod-no-toleration", "pod-with-6s-toleration"}
    assert snap["pods"]["pod-with-toleration"]["phase"] == "Running"
    return snap


async def selectors(env: TaintsEnv) -> dict:
    """Rules by pool and by device (by driver: the demos); a rule of another driver."""
    for i in range(3):
        await env.claim(f"gpu-{i}", index=i)
    await env.claim("node1", index=0)
    await env.pod("on-gpu-0", {"gpu": plain("gpu-0")}, node=NODES[0])
    await env.pod("on-gpu-1", {"gpu": plain("gpu-1")}, node=NODES[0])
    await env.pod("on-gpu-2", {"gpu": plain("gpu-2")}, node=NODES[0])
    await env.pod("on-node-1", {"gpu": plain("node1")}, node=NODES[1])
    await env.wait_running("on-gpu-0", "on-gpu-1", "on-gpu-2", "on-node-1")
    await env.rule("by-pool", {"driver": env.driver, "pool": NODES[1]})
    await env.rule("by-device", {"driver": env.driver, "pool": NODES[0], "device": "gpu-1"})
    await env.rule("other-driver", {"driver": "other." + env.driver, "device": "gpu-2"})
    await env.wait_evicted("on-node-1", "on-gpu-1")
    await env.wait_rule("by-pool", "Completed", "1 pod evicted since starting the controller.")
    await env.wait_rule("by-device", "Completed", "1 pod evicted since starting the controller.")
    snap = await env.snapshot()
    assert evicted(snap) == {"on-node-1", "on-gpu-1"}
    if env.rules_have_status:
        assert snap["rules"]["<run>-other-driver"]["reason"] == "NotStarted"
    return snap


async def nil_selector(env: TaintsEnv) -> dict:
    """A rule without a selector matches nothing (kubernetes#141422 is about the empty one)."""
    await env.template("t")
    await env.pod("survivor", {"gpu": tmpl("t")})
    await env.wait_running("survivor")
    await env.rule("no-selector", None)
    await env.wait_rule("no-selector", "NotStarted")
    await asyncio.sleep(4)
    snap = await env.snapshot()
    assert not evicted(snap) and snap["pods"]["survivor"]["phase"] == "Running"
    return snap


async def old_generation(env: TaintsEnv) -> dict:
    """A taint only in a slice of an older pool generation does not count; once the newest
    generation has it, it evicts."""
    await env.claim("c", index=0)
    await env.pod("user", {"gpu": plain("c")}, node=NODES[0])
    await env.wait_running("user")
    newer = f"gen2-{env.token}"
    await env.add_slice(
        newer, NODES[0], [{"name": f"gpu-{i}"} for i in range(env.devices)], pool=NODES[0], generation=2
    )
    await env.set_device_taint(f"{NODES[0]}-{env.token}", "gpu-0", "NoExecute")  # generation 1
    await asyncio.sleep(4)
    assert "user" not in env.watch.deleting_at, "a taint of an old pool generation evicted"
    await env.set_device_taint(newer, "gpu-0", "NoExecute")
    await env.wait_evicted("user")
    await wait_marked(env, "user")
    snap = await env.snapshot()
    assert evicted(snap) == {"user"} and snap["pods"]["user"]["disruption"] == CONDITION
    return snap


async def taint_removed(env: TaintsEnv) -> dict:
    """A driver's NoExecute taint removed before the tolerated 8 s are over: no eviction."""
    await env.claim("c", tolerations=[env.toleration(8)], index=0)
    await env.pod("tolerating", {"gpu": plain("c")}, node=NODES[0])
    await env.wait_running("tolerating")
    started = time.time()
    await env.set_device_taint(f"{NODES[0]}-{env.token}", "gpu-0", "NoExecute")
    if upstream_ignores_tolerations(env):
        await env.wait_evicted("tolerating")
        return await env.snapshot()
    await asyncio.sleep(2)
    await env.set_device_taint(f"{NODES[0]}-{env.token}", "gpu-0", None)
    await env.wait_event("tolerating", d.CANCELLING)
    await asyncio.sleep(max(0.0, started + 11 - time.time()))
    snap = await env.snapshot()
    assert not evicted(snap) and snap["pods"]["tolerating"]["phase"] == "Running"
    assert snap["events"] == [[*CANCEL, "tolerating"]]
    return snap


async def pod_deleted_while_pending(env: TaintsEnv) -> dict:
    """A Pod deleted while its eviction waits: nothing to evict, no Event."""
    await env.claim("c", tolerations=[env.toleration(30)], index=0)
    await env.pod("leaving", {"gpu": plain("c")}, node=NODES[0])
    await env.wait_running("leaving")
    await env.rule("example", {"driver": env.driver})
    await env.wait_rule("example", "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")
    await env.delete_pod("leaving")
    await env.wait_rule("example", "NotStarted")
    snap = await env.snapshot()
    assert not snap["events"] and snap["pods"]["leaving"]["disruption"] == []
    return snap


async def tolerated_after_rule_change(env: TaintsEnv) -> dict:
    """The rule's taint changes to one the claim tolerates for good: the pending eviction is
    cancelled."""
    await env.claim("c", tolerations=[env.toleration(20, operator="Exists"), env.toleration()], index=0)
    await env.pod("tolerating", {"gpu": plain("c")}, node=NODES[0])
    await env.wait_running("tolerating")
    body = env.rule_body("example", {"driver": env.driver})
    body["spec"]["taint"]["value"] = "bad"  # only the 20 s toleration matches
    env.rules.append(body["metadata"]["name"])
    await env.kube.create(env.rules_res, body)
    await env.wait_rule("example", "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")
    # Now the toleration without tolerationSeconds matches.
    await env.kube.patch(env.rules_res, body["metadata"]["name"], {"spec": {"taint": {"value": "true"}}})
    await env.wait_event("tolerating", d.CANCELLING)
    await env.wait_rule("example", "NotStarted", timeout=30)
    snap = await env.snapshot()
    assert not evicted(snap) and snap["events"] == [[*CANCEL, "tolerating"]]
    return snap


async def finished_before_due(env: TaintsEnv) -> dict:
    """The Pod finishes while its eviction waits: the claim is released and deallocated, and
    the eviction cancelled."""
    await env.claim("c", tolerations=[env.toleration(30)], index=0)
    await env.pod("job", {"gpu": plain("c")}, node=NODES[0])
    await env.wait_running("job")
    await env.rule("example", {"driver": env.driver})
    await env.wait_rule("example", "PodsPendingEviction", "1 pod needs to be evicted in 1 namespace.")
    await env.finish("job")
    await env.wait_event("job", d.CANCELLING)
    await env.wait_rule("example", "NotStarted", timeout=30)
    snap = await env.snapshot()
    assert snap["pods"]["job"]["phase"] == "Succeeded" and snap["events"] == [[*CANCEL, "job"]]
    return snap


async def shared_claim(env: TaintsEnv) -> dict:
    """One claim used by three Pods: all three go."""
    await env.claim("shared")
    for pod in ("a", "b", "c"):
        await env.pod(pod, {"gpu": plain("shared")})
    await env.wait_running("a", "b", "c")
    claim = await env.kube.get(RESOURCE_CLAIMS, "shared", env.namespace)
    device = claim["status"]["allocation"]["devices"]["results"][0]["device"]
    assert len(claim["status"]["reservedFor"]) == 3
    await env.rule("device", {"driver": env.driver, "device": device})
    await env.wait_evicted("a", "b", "c")
    await env.wait_rule("device", "Completed", "3 pods evicted since starting the controller.")
    snap = await env.snapshot()
    assert evicted(snap) == {"a", "b", "c"}
    return snap


async def pod_group_claim(env: TaintsEnv) -> dict:
    """A PodGroup's claim (DRAWorkloadResourceClaims, on in the lab) is reserved for the PodGroup,
    not for its Pods: a NoExecute rule evicts every member that uses it (upstream: ``handlePods``,
    case podgroups, and ``podEvictionTime`` with IsForPod/IsReservedForPod accepting the PodGroup)."""
    await env.template("t")
    await env.pod_group("pg", {"gpu": tmpl("t")})
    await env.member("m1", "pg", {"gpu": tmpl("t")})
    await env.member("m2", "pg", {"gpu": tmpl("t")})
    await env.wait_running("m1", "m2")
    claims = await env.kube.list(RESOURCE_CLAIMS, env.namespace)
    assert [[r["resource"] for r in c["status"].get("reservedFor") or []] for c in claims] == [["podgroups"]], claims
    await env.rule("group", {"driver": env.driver})
    await env.wait_evicted("m1", "m2")
    await env.wait_rule("group", "Completed", "2 pods evicted since starting the controller.")
    snap = await env.snapshot()
    assert evicted(snap) == {"m1", "m2"}
    return snap


async def none_effect(env: TaintsEnv) -> dict:
    """Effect None: a one-time report of what NoExecute would do."""
    await env.template("t")
    await env.pod("one", {"gpu": tmpl("t")})
    await env.pod("two", {"gpu": tmpl("t")})
    await env.wait_running("one", "two")
    await env.rule("dry-run", {"driver": env.driver}, effect="None")
    rule = await env.wait_rule("dry-run", "NoEffect")
    message = d.existing_condition(rule)["message"]
    assert message.startswith(
        f"{env.devices} published devices selected. 2 allocated devices selected. "
        "2 pods would be evicted in 1 namespace if the effect was NoExecute."
    ), message
    await asyncio.sleep(3)
    snap = await env.snapshot()
    assert not evicted(snap)
    return snap


def upstream_misses_extended_resources(env: TaintsEnv) -> bool:
    """kubernetes#141290: upstream's controller before v1.37.2 never evicts a Pod whose DRA claim
    the scheduler made for an extended resource; v1.37.2's ``podEvictionTime`` reads the Pod's
    claims with ``resourceclaim.PodClaims``, which includes that claim."""
    return env.mode == "upstream" and env.minor < 37


async def extended_resource(env: TaintsEnv) -> dict:
    """A Pod with DRA behind an extended resource: evicted (upstream: from v1.37.2 on)."""
    await env.pod("ext", extended=1)
    await env.wait_running("ext")
    await env.rule("example", {"driver": env.driver})
    if upstream_misses_extended_resources(env):
        await env.wait_rule("example", "NotStarted")
        await asyncio.sleep(4)
    else:
        await env.wait_evicted("ext")
        await env.wait_rule("example", "Completed", "1 pod evicted since starting the controller.")
    return await env.snapshot()


async def empty_selector(env: TaintsEnv) -> dict:
    """``deviceSelector: {}`` selects every device of the cluster and evicts every Pod using one
    (kubernetes#141422; both controllers do it: the guard rail is ``taints preview``). Runs alone,
    after the concurrent scenarios, since it would evict theirs too."""
    await env.template("t")
    await env.pod("everyone", {"gpu": tmpl("t")})
    await env.wait_running("everyone")
    await env.rule("everything", {})
    await env.wait_evicted("everyone")
    await wait_marked(env, "everyone")
    snap = await env.snapshot()
    assert evicted(snap) == {"everyone"} and snap["pods"]["everyone"]["disruption"] == CONDITION
    # The rule's condition counts every Pod of the shared lab it evicts, other tests' leftovers
    # in terminating namespaces too: only this namespace is compared.
    snap["rules"] = {}
    return snap


async def slice_taint(env: TaintsEnv) -> dict:
    """A driver's own NoExecute taint on the allocated device in the newest slice evicts at once
    (test/integration/dra/device_taints.go testEvictCluster, taint in the ResourceSlice)."""
    await env.claim("c", index=1)
    await env.pod("victim", {"gpu": plain("c")}, node=NODES[0])
    await env.wait_running("victim")
    await env.set_device_taint(f"{NODES[0]}-{env.token}", "gpu-1", "NoExecute")
    await env.wait_evicted("victim")
    await wait_marked(env, "victim")
    snap = await env.snapshot()
    assert evicted(snap) == {"victim"} and snap["pods"]["victim"]["disruption"] == CONDITION
    return snap


SCENARIOS = [
    noexecute,
    noschedule,
    toleration,
    eviction_time,
    selectors,
    nil_selector,
    old_generation,
    taint_removed,
    tolerated_after_rule_change,
    finished_before_due,
    pod_deleted_while_pending,
    shared_claim,
    pod_group_claim,
    none_effect,
    extended_resource,
    slice_taint,
]
SOLO = [empty_selector]  # after the others, one at a time
ALL = SCENARIOS + SOLO
# The scenarios that never need a DeviceTaintRule's status condition to know the controller is
# done (they wait on evictions): the only ones 1.34 can run, whose v1alpha3 rules have no status
# (it came with 1.35).
WITHOUT_RULE_STATUS = [selectors, old_generation, taint_removed, shared_claim, slice_taint, empty_selector]


def fixed_upstream(name: str, snap: dict, minor: int) -> dict:
    """Upstream's result as it would be without the bugs of its release we deliberately do not
    copy: ``upstream_misses_extended_resources`` before 1.37 and, on 1.34,
    ``upstream_marks_once`` and ``upstream_ignores_tolerations``."""
    fixed = json.loads(json.dumps(snap))
    if name == "extended_resource" and minor < 37:
        assert not snap["pods"]["ext"]["evicted"], "upstream evicted an extended-resource Pod: #141290 is fixed"
        fixed["pods"]["ext"] = {"evicted": True, "phase": None, "disruption": CONDITION}
        fixed["events"] = [[*MARK, "ext"]]
        fixed["rules"]["<run>-example"].update(
            reason="Completed", message="1 pod evicted since starting the controller."
        )
    if minor >= 35:
        return fixed
    if name == "taint_removed":
        assert evicted(snap) == {"tolerating"}, "1.34 honoured the toleration: it copies tolerations now"
        fixed["pods"]["tolerating"] = {"evicted": False, "phase": "Running", "disruption": []}
        fixed["events"] = [[*CANCEL, "tolerating"]]
    for pod in sorted(evicted(fixed)):
        if [*MARK, pod] not in fixed["events"]:
            fixed["events"] = sorted([*fixed["events"], [*MARK, pod]])
    return fixed


async def _run_all(kube, mode: str, token: str, chosen: list, minor: int) -> dict[str, dict | BaseException]:
    async def one(i: int, scenario) -> dict:
        nodes = NODES if scenario in (selectors,) else NODES[:1]
        async with TaintsEnv(
            kube,
            f"{token}{i:02d}",
            mode,
            nodes=nodes,
            extended_resource=scenario is extended_resource,
            minor=minor,
        ) as env:
            try:
                snap = await scenario(env)
                if mode == "ours":
                    await _assert_quiet(env)
                return snap
            except AssertionError as e:
                raise AssertionError(f"{scenario.__name__} [{mode}]: {e}\n{await env.describe()}") from None

    together = [s for s in SCENARIOS if s in chosen]
    alone = [s for s in SOLO if s in chosen]
    results = await asyncio.gather(*(one(i, s) for i, s in enumerate(together)), return_exceptions=True)
    for i, scenario in enumerate(alone, start=len(together)):
        results += await asyncio.gather(one(i, scenario), return_exceptions=True)
    return {s.__name__: r for s, r in zip(together + alone, results, strict=True)}


async def _assert_quiet(env: TaintsEnv) -> None:
    """kopf wrote no annotation, finalizer or status key on what the operators only watch."""
    objects = (
        await env.kube.list(PODS, env.namespace)
        + await env.kube.list(RESOURCE_CLAIMS, env.namespace)
        + [await env.kube.get(env.rules_res, r) for r in env.rules]
        + [await env.kube.get(RESOURCE_SLICES, s) for s in env.slices]
    )
    for obj in objects:
        text = json.dumps({k: obj.get(k) for k in ("metadata", "status")})
        assert "kopf" not in text, f"{obj.get('kind', '')} {obj['metadata']['name']} carries a kopf key: {text[:500]}"


@pytest.fixture(scope="module")
async def runs(kube, controllers) -> dict[str, dict[str, dict | BaseException]]:
    """Every scenario once per mode: upstream's controllers, then ours."""
    left_out = {}  # scenario: what this release lacks for it
    if controllers.lab.minor < 35:
        left_out |= {
            s.__name__: "waits on the DeviceTaintRule's status, which rules have only from Kubernetes 1.35"
            for s in ALL
            if s not in WITHOUT_RULE_STATUS
        }
    if POD_GROUPS.version not in await kube.served_versions(POD_GROUPS.group, POD_GROUPS.plural):
        left_out[pod_group_claim.__name__] = f"the release serves no PodGroups at {POD_GROUPS.group_version}"
    chosen = [s for s in ALL if s.__name__ not in left_out]
    unique = uuid.uuid4().hex[:6]
    runs: dict[str, dict] = {"left out": left_out}
    for mode in ("upstream", "ours"):
        controllers.use(mode)
        runs[mode] = await _run_all(kube, mode, f"{mode[:2]}{unique}", chosen, controllers.lab.minor)
    return runs


@pytest.mark.parametrize("scenario", [s.__name__ for s in ALL])
def test_same_evictions_as_upstream(scenario, runs, controllers):
    if scenario in runs["left out"]:
        pytest.skip(runs["left out"][scenario])
    for mode in ("upstream", "ours"):
        if isinstance(runs[mode][scenario], BaseException):
            raise runs[mode][scenario]
    upstream = fixed_upstream(scenario, runs["upstream"][scenario], controllers.lab.minor)
    diff = differences(upstream, runs["ours"][scenario])
    assert not diff, "ours differs from upstream:\n  " + "\n  ".join(diff)


def test_operator_logged_no_error(runs, controllers):
    assert not controllers.operators["taints"].errors(), controllers.operators["taints"].errors()[:5]
