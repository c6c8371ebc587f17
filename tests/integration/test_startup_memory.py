"""Start-up memory is bounded by the DRA objects, not the cluster (issue 26): the claims and taints
operators' start-up LIST of Pods keeps only the Pods that use claims, page by page, so thousands
of plain Pods cost them about one page, not every Pod (a 150,000-Pod cluster reached the 512Mi
limit at start). Measured as the peak RSS (VmHWM) of one process running both operators, started
once beside the DRA Pods and 1,000 plain Pods, and once more after ``DRA_STARTUP_PLAIN_PODS``
(5,000; holding them all would add about 95 MiB, against the 10 allowed) plain Pods more were
added; 50,000 by hand (docs/architecture.md, *Memory*). The baseline has plain Pods too so that
both starts take the same path (a watch whose initial events are mostly skipped lines; its relist
check then asks about the DRA Pods)."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request

from operators.core.api.kube import Kube
from operators.core.api.resources import NAMESPACES, PODS, RESOURCE_CLAIMS, SERVICE_ACCOUNTS

from . import objects
from .operator_process import OperatorProcess
from .waiting import wait_for

BASELINE_PODS = 1000
PLAIN_PODS = int(os.environ.get("DRA_STARTUP_PLAIN_PODS", "5000"))
DRA_PODS = 50
# Growth of the peak RSS allowed per 1,000 plain Pods added. Holding every Pod at start cost about
# 19 MiB per 1,000 (both operators, 20,000 plain Pods: 439 MiB against 75 MiB); a page of 500 at a
# time costs the same however many there are. What still grows (5 to 7 MiB from 1,000 to 11,000,
# no more at 20,000) is outside Python's heap: tracemalloc's live and peak figures are the same
# at 1,000 and 20,000 plain Pods (the TLS and gzip reads of a longer watch stream leave the C heap
# larger).
MIB_PER_1000 = 2.0
CREATORS = 32  # concurrent creates


def plain_pod(i: int) -> dict:
    """A Pod as workloads have them (labels, env, resources), with no claim; no scheduler takes it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"plain-{i}",
            "labels": {"app": "web", "tier": "frontend", "shard": str(i % 17)},
            "annotations": {"example.com/owner": "team-a", "example.com/build": f"build-{i}"},
        },
        "spec": {
            "schedulerName": "none",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "env": [{"name": f"VAR_{k}", "value": f"value-{k}-{i}"} for k in range(8)],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                    "ports": [{"containerPort": 8080, "name": "http"}],
                }
            ],
        },
    }


def dra_pod(i: int) -> dict:
    """A Pod with a claim of its own (``create_claims``): the operators cache it, and, its claim
    being cached too, sync it without a request (requests open connections, whose buffers are
    memory too: that would measure the workers, not the lists)."""
    body = objects.pod(f"dra-{i}", {"gpu": {"resourceClaimName": f"claim-{i}"}})
    body["spec"]["schedulerName"] = "none"
    return body


async def create_claims(kube: Kube, namespace: str) -> None:
    for i in range(DRA_PODS):
        await kube.create(
            RESOURCE_CLAIMS, objects.resource_claim(f"claim-{i}", "startup-memory.example.com"), namespace
        )


async def make_namespace(kube: Kube, name: str) -> None:
    await kube.create(NAMESPACES, {"metadata": {"name": name}})
    await wait_for(
        lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", name), timeout=60, what=f"ServiceAccount {name}/default"
    )


async def create_all(kube: Kube, namespace: str, bodies) -> None:
    queue: asyncio.Queue = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def creator() -> None:
        while not queue.empty():
            await kube.create(PODS, queue.get_nowait(), namespace)

    await asyncio.gather(*(creator() for _ in range(CREATORS)))


def health(op: OperatorProcess) -> dict:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.liveness_port}/healthz", timeout=10) as r:
            return json.loads(r.read() or b"{}")
    except OSError:
        return {}


def started_pods(op: OperatorProcess) -> dict[str, int]:
    """Pods each operator says it cached at start ("... operator started", pods=N)."""
    found = {}
    for line in op.log.read_text(errors="replace").splitlines():
        if "operator started" in line and line.startswith("{"):
            entry = json.loads(line)
            found[entry["event"].split()[0]] = entry.get("pods")
    return found


async def peak_after_start(op: OperatorProcess, plain: int) -> float:
    """Start ``op``; once both operators have listed every Pod and each watch is open from its
    LIST's resourceVersion, its VmHWM in MiB."""
    op.start(timeout=600)

    async def settled() -> bool:
        answer = health(op)
        operators = [answer.get(name) or {} for name in ("claims", "taints")]
        return all(o.get("watches") and o.get("watching", 0) >= o["watches"] for o in operators)

    async def describe() -> str:
        return f"healthz {health(op)}; log:\n{op.tail()}"

    await wait_for(settled, timeout=900, interval=1, what="both operators' watches caught up", describe=describe)

    async def logged() -> bool:
        return len(started_pods(op)) == 2

    await wait_for(logged, timeout=60, what="both operators' start-up lines")
    peak = op.peak_rss_mib
    assert peak is not None, op.tail()
    return peak


async def test_start_up_memory_does_not_grow_with_plain_pods(fault_lab, tmp_path):
    async with await Kube.connect(str(fault_lab.kubeconfig)) as kube:
        await make_namespace(kube, "dra")
        await make_namespace(kube, "plain")
        await create_claims(kube, "dra")
        await create_all(kube, "dra", (dra_pod(i) for i in range(DRA_PODS)))
        await create_all(kube, "plain", (plain_pod(i) for i in range(BASELINE_PODS)))
        op = OperatorProcess(["claims", "taints"], fault_lab.kubeconfig, tmp_path)
        try:
            baseline = await peak_after_start(op, BASELINE_PODS)
            op.stop()
            started = time.monotonic()
            await create_all(kube, "plain", (plain_pod(i) for i in range(BASELINE_PODS, BASELINE_PODS + PLAIN_PODS)))
            created_in = time.monotonic() - started
            with_plain = await peak_after_start(op, BASELINE_PODS + PLAIN_PODS)
            kept = started_pods(op)
        finally:
            op.stop()
    growth = with_plain - baseline
    print(
        f"\nstart-up peak RSS (VmHWM) of claims+taints: {baseline:.1f} MiB beside {DRA_PODS} DRA Pods and "
        f"{BASELINE_PODS} plain Pods, "
        f"{with_plain:.1f} MiB with {PLAIN_PODS} plain Pods more ({growth:+.1f} MiB, "
        f"{growth / PLAIN_PODS * 1000:+.2f} MiB per 1,000; Pods created in {created_in:.0f} s)"
    )
    assert growth <= MIB_PER_1000 * PLAIN_PODS / 1000, (
        f"peak RSS grew {growth:.1f} MiB with {PLAIN_PODS} plain Pods ({baseline:.1f} -> {with_plain:.1f} MiB): "
        f"more than {MIB_PER_1000} MiB per 1,000; start-up holds Pods without claims"
    )
    assert kept == {"claims": DRA_PODS, "taints": DRA_PODS}, kept  # the Pods with claims, all of them
