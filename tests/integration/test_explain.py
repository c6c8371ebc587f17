"""``explain`` against the real kube-scheduler on the lab.

- The differential test: seeded scenarios (tests/integration/explain_scenarios.py), each with a
  gated Pod; explain judges every Pod, then the gates go and kube-scheduler decides. The verdict
  (allocatable or not) must be the scheduler's in every scenario; a disagreement prints the
  scenario and explain's report.
- The binding state in the device table, and the free counts, on the lab.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

from operators.core.api.kube import JSON_PATCH, MERGE_PATCH, ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.explain import fetch, unmodelled
from operators.explain.render import render_pod
from operators.explain.story import explain_pod

from . import objects
from .explain_scenarios import ADMIN_LABEL, LABEL, Generator, Scenario
from .waiting import wait_for

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("DRA_EXPLAIN_SEED", "1"))
SCENARIOS = int(os.environ.get("DRA_EXPLAIN_SCENARIOS", "100"))
PARALLEL = 8  # API writes in flight (two shared cores)


async def _gather_limited(coros, limit: int = PARALLEL):
    semaphore = asyncio.Semaphore(limit)

    async def one(coro):
        async with semaphore:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def create_scenario(kube: Kube, s: Scenario) -> None:
    await kube.create(NAMESPACES, {"metadata": {"name": s.namespace, "labels": {ADMIN_LABEL: "true"}}})
    for node in s.nodes:
        await kube.create(NODES, node)
    for body in s.classes:
        await kube.create(DEVICE_CLASSES, body)
    for body in s.slices:
        await kube.create(RESOURCE_SLICES, body)
    for claim, results in s.held:
        created = await kube.create(RESOURCE_CLAIMS, claim, s.namespace)
        created["status"] = {"allocation": {"devices": {"results": results}}}
        await kube.replace(RESOURCE_CLAIMS, created, subresource="status")
    for claim in s.claims:
        await kube.create(RESOURCE_CLAIMS, claim, s.namespace)
    await wait_for(
        lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", s.namespace),
        timeout=60,
        what=f"ServiceAccount {s.namespace}/default",
    )
    await kube.create(PODS, s.pod, s.namespace)


async def delete_scenario(kube: Kube, s: Scenario) -> None:
    async def quietly(coro):
        try:
            await coro
        except ApiError as e:
            if not e.not_found:
                raise

    await quietly(kube.delete(PODS, "pod", s.namespace, grace_period_seconds=0))
    for claim in await kube.list(RESOURCE_CLAIMS, s.namespace):
        if claim["metadata"].get("finalizers"):
            await quietly(
                kube.patch(RESOURCE_CLAIMS, claim["metadata"]["name"], {"metadata": {"finalizers": None}}, s.namespace)
            )
    await quietly(kube.delete(NAMESPACES, s.namespace))
    for body in s.slices:
        await quietly(kube.delete(RESOURCE_SLICES, body["metadata"]["name"]))
    for body in s.classes:
        await quietly(kube.delete(DEVICE_CLASSES, body["metadata"]["name"]))
    for node in s.nodes:
        await quietly(kube.delete(NODES, node["metadata"]["name"]))


def node_ready(node: dict) -> bool:
    """kwok made it Ready and the node lifecycle controller took its not-ready taint away."""
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )
    return ready and not any(
        t.get("key", "").startswith("node.kubernetes.io/") for t in (node.get("spec") or {}).get("taints") or []
    )


def outcome(pod: dict, claims: list[dict]) -> bool | None:
    """True: kube-scheduler placed the Pod (bound, or its claims allocated and the binding under
    way); False: it tried and found the Pod unschedulable (or stopped with an error); None: not yet."""
    if (pod.get("spec") or {}).get("nodeName") or (
        claims and all((c.get("status") or {}).get("allocation") for c in claims)
    ):
        return True
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") in ("Unschedulable", "SchedulerError")
        ):
            return False
    return None


async def test_explain_verdicts_agree_with_kube_scheduler(lab, kube, controllers):
    """At least 60 generated scenarios; explain's verdict is kube-scheduler's in all of them."""
    controllers.use("none")  # no controller touches the claims: allocations stay as written
    started = time.monotonic()
    run = f"e{os.getpid() % 1000:03d}{int(time.time()) % 1000:03d}"[:7]
    generator = Generator(SEED, run)
    scenarios = [generator.scenario() for _ in range(SCENARIOS)]
    by_ns = {s.namespace: s for s in scenarios}
    try:
        await _gather_limited(create_scenario(kube, s) for s in scenarios)

        async def nodes_ready() -> bool:
            nodes = [
                n
                for n in await kube.list(NODES, label_selector=LABEL)
                if n["metadata"]["labels"][LABEL].startswith(run)
            ]
            return len(nodes) == 2 * len(scenarios) and all(node_ready(n) for n in nodes)

        await wait_for(nodes_ready, timeout=90, interval=0.5, what="the scenarios' kwok Nodes Ready and untainted")
        created = time.monotonic()

        world = await fetch.world(kube, None)
        reports = {}
        for s in scenarios:
            pod = world.find("pods", s.namespace, "pod")
            reports[s.namespace] = explain_pod(world, pod)
        explained = time.monotonic()

        await _gather_limited(
            kube.patch(
                PODS, "pod", [{"op": "remove", "path": "/spec/schedulingGates"}], s.namespace, content_type=JSON_PATCH
            )
            for s in scenarios
        )
        decided: dict[str, bool] = {}

        async def all_decided() -> bool:
            pods = await kube.list(PODS, label_selector=f"{LABEL}={run}")
            claims = await kube.list(RESOURCE_CLAIMS)
            for pod in pods:
                ns = pod["metadata"]["namespace"]
                if ns in decided or ns not in by_ns:
                    continue
                mine = [
                    c
                    for c in claims
                    if c["metadata"]["namespace"] == ns and not c["metadata"]["name"].startswith("held-")
                ]
                if (result := outcome(pod, mine)) is not None:
                    decided[ns] = result
            return len(decided) == len(scenarios)

        await wait_for(
            all_decided,
            timeout=120,
            interval=0.5,
            what=f"kube-scheduler's decision on every Pod ({len(decided)} of {len(scenarios)})",
        )
        scheduled = time.monotonic()

        disagreements = []
        for s in scenarios:
            verdict = reports[s.namespace]["verdict"]
            if verdict["allocatable"] != decided[s.namespace]:
                pod = await kube.get(PODS, "pod", s.namespace)
                disagreements.append(
                    f"{s.describe()}\nexplain: allocatable={verdict['allocatable']} ({verdict['summary']}); "
                    f"kube-scheduler: {'placed it' if decided[s.namespace] else 'did not'}; PodScheduled: "
                    f"{json.dumps([c for c in pod['status'].get('conditions') or [] if c['type'] == 'PodScheduled'])}\n"
                    + render_pod(reports[s.namespace], wide=True)
                )
        agreed = len(scenarios) - len(disagreements)
        allocatable = sum(decided.values())
        print(
            f"\nexplain vs kube-scheduler: {agreed}/{len(scenarios)} agree (seed {SEED}; {allocatable} placed, "
            f"{len(scenarios) - allocatable} not); create {created - started:.1f}s, "
            f"explain {explained - created:.1f}s, "
            f"schedule {scheduled - explained:.1f}s"
        )
        shapes = sorted({s.shape for s in scenarios})
        print("shapes:", ", ".join(shapes))
        assert not disagreements, "\n\n".join(disagreements)
        assert 0 < allocatable < len(scenarios), "the generator must give both outcomes"
    finally:
        await _gather_limited(delete_scenario(kube, s) for s in scenarios)


async def _create_admitted(kube: Kube, body: dict) -> bool:
    """Create the slice; False while admission refuses it for a Node feature just declared.
    The plugin nodedeclaredfeatures reads Nodes from kube-apiserver's informer
    (plugin/pkg/admission/nodedeclaredfeatures/admission.go, ``Validate``: ``nodeLister.Get``),
    which sees a status patch a moment after it was written: a busy server refused a slice
    created right after the patch."""
    try:
        await kube.create(RESOURCE_SLICES, body)
    except ApiError as e:
        if e.status == 403 and "does not support" in str(e):
            return False
        raise
    return True


async def test_explain_names_the_allocator_features_it_does_not_model(lab, kube, controllers):
    """Derived attributes, compatibility groups, list-type attributes, node-allocatable resources:
    the API server (every DRA gate on) keeps each field, and explain's verdict is unknown, naming
    the feature and where it is used, whatever kube-scheduler then decides."""
    controllers.use("none")
    run = f"u{os.getpid() % 1000:03d}{int(time.time()) % 1000:03d}"[:7]
    generator = Generator(SEED, run)
    scenarios = [generator.unmodelled(feature) for feature in Generator.UNMODELLED]
    try:
        for s in scenarios:
            slices, s.slices = s.slices, []
            await create_scenario(kube, s)
            s.slices = slices
            if s.shape == "node-allocatable resources":
                # The API server takes such slices only for Nodes that declare the feature
                # (admission plugin nodedeclaredfeatures); kwok's Nodes declare nothing.
                for node in s.nodes:
                    await kube.request(
                        "PATCH",
                        NODES.path(name=node["metadata"]["name"], subresource="status"),
                        content_type=MERGE_PATCH,
                        body={"status": {"declaredFeatures": ["DRANodeAllocatableResources"]}},
                    )
            for body in s.slices:
                await wait_for(
                    lambda body=body: _create_admitted(kube, body),
                    timeout=60,
                    what=f"slice {body['metadata']['name']} admitted",
                )

        async def nodes_ready() -> bool:
            nodes = [
                n
                for n in await kube.list(NODES, label_selector=LABEL)
                if n["metadata"]["labels"][LABEL].startswith(run)
            ]
            return len(nodes) == 2 * len(scenarios) and all(node_ready(n) for n in nodes)

        await wait_for(nodes_ready, timeout=90, interval=0.5, what="the scenarios' kwok Nodes Ready and untainted")
        world = await fetch.world(kube, None)
        for s in scenarios:  # the API server kept the field: its gate is on
            kept = [c for c in world.claims if c["metadata"]["namespace"] == s.namespace] + [
                b for b in world.slices if b["spec"]["driver"] == s.driver
            ]
            assert unmodelled.features(kept[:1], world.class_map, kept[1:]), s.describe()
        decided: dict[str, bool] = {}
        for s in scenarios:
            report = explain_pod(world, world.find("pods", s.namespace, "pod"))
            verdict = report["verdict"]
            assert verdict["allocatable"] is None, f"{s.shape}: {verdict['summary']}"
            assert verdict["summary"].startswith(f"not modelled: {s.shape} ("), verdict["summary"]
            assert {f["feature"] for f in verdict["notModelled"]} == {s.shape}
            assert "Verdict: UNKNOWN: not modelled: " + s.shape in render_pod(report)
        await _gather_limited(
            kube.patch(
                PODS, "pod", [{"op": "remove", "path": "/spec/schedulingGates"}], s.namespace, content_type=JSON_PATCH
            )
            for s in scenarios
        )

        async def all_decided() -> bool:
            for s in scenarios:
                if s.namespace not in decided:
                    pod = await kube.get(PODS, "pod", s.namespace)
                    claims = await kube.list(RESOURCE_CLAIMS, s.namespace)
                    if (result := outcome(pod, claims)) is not None:
                        decided[s.namespace] = result
            return len(decided) == len(scenarios)

        await wait_for(all_decided, timeout=120, interval=0.5, what="kube-scheduler's decision on every Pod")
        print(
            "\nnot modelled, kube-scheduler: "
            + ", ".join(f"{s.shape}: {'placed' if decided[s.namespace] else 'not placed'}" for s in scenarios)
        )
    finally:
        await _gather_limited(delete_scenario(kube, s) for s in scenarios)


# -- kubectl dra, through the lab's real kubectl ------------------------------------------------


def kubectl_dra(lab, *args: str) -> subprocess.CompletedProcess:
    """``kubectl dra ARGS`` with the lab's kubectl, the plugin found on PATH (the venv's bin),
    the kubeconfig given as kubectl's flag (after the plugin's name, where kubectl passes it on)."""
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [str(lab.bin_dir / "kubectl"), "dra", *args, f"--kubeconfig={lab.kubeconfig}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


async def test_kubectl_dra_explain_devices_and_preview(lab, kube, namespace, cluster_objects, unique):
    """A Pod in kube-scheduler's binding wait (a device with binding conditions, nobody to
    meet them) shows ``binding`` in ``kubectl dra devices`` and its pending condition in
    ``kubectl dra explain``; a Pod asking for more than there is gets the reasons and exit code 1;
    ``kubectl dra preview`` runs on a rule file. Free counts on a node of the test's own: a
    partition in use uses up its whole GPU's counters, a tainted device, a shared device with
    capacity left, a device only watched with admin access."""
    from operators.lab.components import build_node

    driver = f"{unique}.explain.dra-operators.dev"
    node_name = f"free-{unique}"
    await cluster_objects.create(NODES, build_node(node_name, {"dra-explain": unique}))
    await wait_for(lambda: _ready(kube, node_name), timeout=60, what=f"Node {node_name} Ready and untainted")
    await cluster_objects.create(
        DEVICE_CLASSES,
        {
            "metadata": {"name": f"gpu-{unique}"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    await kube.patch(NAMESPACES, namespace, {"metadata": {"labels": {ADMIN_LABEL: "true"}}})

    def consumes(amount):
        return [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]

    pool = {"name": node_name, "generation": 1, "resourceSliceCount": 2}
    await cluster_objects.create(
        RESOURCE_SLICES,
        {
            "metadata": {"name": f"{node_name}-counters"},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": pool,
                "sharedCounters": [{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}],
            },
        },
    )
    await cluster_objects.create(
        RESOURCE_SLICES,
        {
            "metadata": {"name": f"{node_name}-devices"},
            "spec": {
                "driver": driver,
                "nodeName": node_name,
                "pool": pool,
                "devices": [
                    {
                        "name": "gpu-0",
                        "consumesCounters": consumes("80Gi"),
                        "attributes": {"model": {"string": "LabGPU"}},
                    },
                    {"name": "gpu-0-part-0", "consumesCounters": consumes("40Gi")},
                    {"name": "gpu-0-part-1", "consumesCounters": consumes("40Gi")},
                    {"name": "gpu-1", "taints": [{"key": "xid", "value": "79", "effect": "NoSchedule"}]},
                    {"name": "gpu-2", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "48Gi"}}},
                    {
                        "name": "gpu-3",
                        "attributes": {"model": {"string": "LabGPU"}, "uuid": {"string": "GPU-3333"}},
                        "bindingConditions": ["Attached"],
                        "bindingFailureConditions": ["AttachFailed"],
                        "bindsToNode": True,
                    },
                ],
            },
        },
    )

    async def held(name, result, admin=False):
        exactly = {"deviceClassName": f"gpu-{unique}"} | ({"adminAccess": True} if admin else {})
        claim = await kube.create(
            RESOURCE_CLAIMS,
            {"metadata": {"name": name}, "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
            namespace,
        )
        claim["status"] = {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": driver, "pool": node_name, **result}]}}
        }
        await kube.replace(RESOURCE_CLAIMS, claim, subresource="status")

    await held("part", {"device": "gpu-0-part-0"})
    await held(
        "share",
        {"device": "gpu-2", "shareID": "5c0e9d1e-0000-4000-8000-000000000001", "consumedCapacity": {"memory": "40Gi"}},
    )
    await held("watch", {"device": "gpu-0-part-1", "adminAccess": True}, admin=True)

    # the Pod that waits for binding: only gpu-3 is left for a plain request that tolerates nothing
    await kube.create(
        RESOURCE_CLAIMS,
        {
            "metadata": {"name": "bound"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": f"gpu-{unique}",
                                "selectors": [
                                    {
                                        "cel": {
                                            "expression": f'"model" in device.attributes["{driver}"] && '
                                            f'device.attributes["{driver}"].model == "LabGPU"'
                                        }
                                    }
                                ],
                            },
                        }
                    ]
                }
            },
        },
        namespace,
    )
    await kube.create(
        RESOURCE_CLAIMS,
        {
            "metadata": {"name": "toomany"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": f"gpu-{unique}", "count": 9}}]}
            },
        },
        namespace,
    )
    for name, claim in (("waiting", "bound"), ("greedy", "toomany")):
        await kube.create(
            PODS,
            {
                "metadata": {"name": name},
                "spec": {
                    "nodeSelector": {"dra-explain": unique},
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                    "terminationGracePeriodSeconds": 0,
                },
            },
            namespace,
        )

    async def in_binding_wait():
        claim = await kube.get(RESOURCE_CLAIMS, "bound", namespace)
        return (claim.get("status") or {}).get("reservedFor") and claim["status"].get("allocation")

    async def why() -> str:
        return kubectl_dra(lab, "explain", "pod/waiting", "-n", namespace, "-o", "wide").stdout

    await wait_for(
        in_binding_wait, timeout=60, what="kube-scheduler reserved the claim and waits for binding", describe=why
    )
    try:
        devices = kubectl_dra(lab, "devices", "-n", namespace, "-o", "json")
        assert devices.returncode == 0, devices.stderr
        table = json.loads(devices.stdout)
        states = {(r["pod"], r["claim"]): r["state"] for r in table["claims"]}
        assert states[("waiting", "bound")] == "binding"
        assert states[("greedy", "toomany")] == "pending"
        free = table["free"][node_name]
        # gpu-0: counters used up by part-0 (in use); part-1 watched with admin access (free);
        # gpu-1 tainted; gpu-2 shared with 8Gi left, but a plain request would take all 48Gi (no
        # requestPolicy default: upstream calculateConsumedCapacity), so in use; gpu-3 in use (binding)
        assert (
            free["total"],
            free["free"],
            free["inUse"],
            free["countersUsedUp"],
            free["tainted"],
            free["adminAccess"],
        ) == (6, 1, 3, 1, 1, 1), free
        assert free["shared"] == {"gpu-2": {"memory": "8Gi"}}

        wide = kubectl_dra(lab, "devices", "-A", "-o", "wide", "--context", "lab")
        assert wide.returncode == 0, wide.stderr
        assert "ATTRIBUTES" in wide.stdout.splitlines()[0] and "uuid=GPU-3333" in wide.stdout
        assert f"{node_name}: 1 free of 6" in wide.stdout

        explained = kubectl_dra(lab, "explain", "pod/waiting", "-n", namespace, "-o", "json")
        assert explained.returncode == 0, explained.stderr
        story = json.loads(explained.stdout)["claims"][0]
        assert story["state"] == "binding"
        assert story["binding"]["pending"][0]["condition"] == "Attached"
        assert story["devices"][0]["device"] == f"{driver}/{node_name}/gpu-3"

        greedy = kubectl_dra(lab, "explain", "greedy", "-n", namespace)
        assert greedy.returncode == 1, greedy.stderr
        assert "NOT allocatable" in greedy.stdout
        assert "wants 9 devices" in greedy.stdout and "is tainted xid=79:NoSchedule" in greedy.stdout, greedy.stdout
        as_yaml = kubectl_dra(lab, "explain", "resourceclaim/toomany", "-n", namespace, "-o", "yaml")
        assert as_yaml.returncode == 1 and "state: pending" in as_yaml.stdout

        # A named Pod's Events are read for it alone (not the namespace's): kube-scheduler's are there.
        async def failed_scheduling():
            return await kube.list(
                EVENTS, namespace, field_selector="involvedObject.name=greedy,reason=FailedScheduling"
            )

        await wait_for(failed_scheduling, what="kube-scheduler's FailedScheduling Event for greedy")
        greedy_json = json.loads(kubectl_dra(lab, "explain", "greedy", "-n", namespace, "-o", "json").stdout)
        assert "FailedScheduling" in {e["reason"] for e in greedy_json["events"]}, greedy_json["events"]

        # the condition met: the Pod binds, the state becomes reserved
        claim = await kube.get(RESOURCE_CLAIMS, "bound", namespace)
        claim["status"]["devices"] = [
            {
                "driver": driver,
                "pool": node_name,
                "device": "gpu-3",
                "conditions": [
                    {
                        "type": "Attached",
                        "status": "True",
                        "reason": "Test",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }
                ],
            }
        ]
        await kube.replace(RESOURCE_CLAIMS, claim, subresource="status")
        await wait_for(lambda: _bound(kube, namespace, "waiting"), timeout=60, what="Pod waiting bound")
        devices = kubectl_dra(lab, "devices", "-n", namespace, "-o", "json")
        assert {r["pod"]: r["state"] for r in json.loads(devices.stdout)["claims"]}["waiting"] == "reserved"

        # what a NoExecute rule on the driver would evict: the bound Pod
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(
                f"apiVersion: resource.k8s.io/v1\nkind: DeviceTaintRule\nmetadata:\n  name: preview-{unique}\n"
                f"spec:\n  deviceSelector:\n    driver: {driver}\n"
                "  taint:\n    key: maintenance\n    effect: NoExecute\n"
            )
        preview = kubectl_dra(lab, "preview", f.name, "-o", "json")
        os.unlink(f.name)
        assert preview.returncode == 0, preview.stderr
        result = json.loads(preview.stdout)
        assert result["publishedDevices"] == 6 and [p["name"] for p in result["pods"]] == ["waiting"]

    finally:
        for pod in ("waiting", "greedy"):
            try:
                await kube.delete(PODS, pod, namespace, grace_period_seconds=0)
            except ApiError:
                pass
        for claim in await kube.list(RESOURCE_CLAIMS, namespace):
            if claim["metadata"].get("finalizers"):
                await kube.patch(
                    RESOURCE_CLAIMS, claim["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace
                )


async def test_kubectl_dra_devices_reads_the_namespaces_with_dra_objects(lab, kube, namespace, unique):
    """Across namespaces, devices reads the Pods of the namespaces that hold a claim or a claim
    template (issue 32: most Pods of a large cluster are elsewhere); a Pod waiting for a template
    in a namespace without any shows with ``-n`` that namespace."""
    plain = f"{namespace}-plain"
    await kube.create(NAMESPACES, {"metadata": {"name": plain}})
    try:
        await wait_for(
            lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", plain), timeout=30, what=f"ServiceAccount {plain}"
        )
        await kube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("t", f"none-{unique}"), namespace)
        for ns, pod in ((namespace, "in-dra"), (plain, "in-plain")):
            await kube.create(PODS, objects.pod(pod, {"gpu": {"resourceClaimTemplateName": "missing"}}), ns)

        def rows(*args: str) -> dict[tuple[str, str], str]:
            done = kubectl_dra(lab, "devices", *args, "-o", "json")
            assert done.returncode == 0, done.stderr
            return {(r["namespace"], r["pod"]): r["state"] for r in json.loads(done.stdout)["claims"]}

        everywhere = rows("-A")
        assert everywhere[(namespace, "in-dra")] == "waiting", everywhere
        assert not [key for key in everywhere if key[0] == plain], everywhere
        assert rows("-n", plain) == {(plain, "in-plain"): "waiting"}
    finally:
        await kube.delete(NAMESPACES, plain)


async def _bound(kube, namespace, name):
    pod = await kube.get(PODS, name, namespace)
    return (pod.get("spec") or {}).get("nodeName")


async def _ready(kube, name):
    return node_ready(await kube.get(NODES, name))
