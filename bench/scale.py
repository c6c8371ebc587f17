#!/usr/bin/env python3
"""``make bench-scale``: our controllers against upstream's at Kubernetes' scalability envelope
(a benchmark, never a test; issue 32).

The envelope: 5,000 Nodes, a ResourceSlice per Node with 8 devices (40,000; a tenth of the
Nodes partitionable: counter sets in a slice of their own, as 1.35 and later want), 150,000 Pods
of which 10,000 use claims (four in five from templates, the rest four Pods to a shared claim).
Every fraction of ``SCALE_FRACTIONS`` (default ``0.1,0.25,0.5,1``) gets a lab of its own, filled
with that fraction of the envelope: kwok Nodes, plain Pods scheduled by kube-scheduler, claim Pods
allocated by it (upstream's resourceclaim-controller makes the template claims while filling).

Then, on the same objects, one controller after the other (``SCALE_PARTS``, in this order):

- *startup*: each of our claims, taints and poolstatus operators (a process each, leader
  election off, kube-controller-manager without upstream's DRA controllers), and
  kube-controller-manager with them: seconds from the start until its caches are primed (ours:
  the ``... operator started`` log line, after the start-up LIST; upstream: the last DRA
  controller's "Caches are synced"), the peak RSS by then (VmHWM) and the steady RSS
  ``SCALE_SETTLE`` (30) seconds later. Upstream's figures are all of kube-controller-manager.
  ``SCALE_STARTUP_ROUNDS=N``: N rounds, ours and upstream first in turn.
- *claims*: 1,000 more template Pods (schedulerName ``none``): seconds until every one has its
  claim, and the CPU seconds the controller's process spent (utime + stime).
- *poolstatus*: one ResourcePoolStatusRequest for the driver (limit 1000, the maximum):
  seconds until Complete, and CPU seconds.
- *cli*: ``kubectl dra devices`` and ``kubectl dra explain`` of a claim Pod, wall time, once
  kube-controller-manager (restarted with its DRA controllers) has done its own start-up.
- *taints*: a NoExecute DeviceTaintRule over the whole driver: seconds until every claim Pod is
  being deleted, and CPU seconds; the claim Pods are made again before the next controller. Ours
  is the taints and the claims operator (CPU: both), as upstream's is kube-controller-manager
  with its resourceclaim-controller, so that the evicted Pods' claims are released during both.
  ``SCALE_TAINTS_ROUNDS=N``: N rounds, ours and upstream first in turn. Each turn also records
  where the work went: the CPU seconds of every lab process, and the API server's requests by
  kind (count and mean latency, from its own histograms). ``SCALE_APISERVER_PROFILE=S``: a CPU
  profile of kube-apiserver over S seconds from 15 s into each turn (``go tool pprof -top``
  beside it in the run directory).

``SCALE_PLAIN_PODS=N``: N plain Pods instead of the fraction's share (the CLI at the whole
envelope's Nodes and devices on a machine that cannot hold its 140,000 plain Pods; the command
only reads the namespaces with DRA objects, which the plain Pods are not in).

Results: the run directory (``SCALE_RUN_DIR``, default ``.cache/bench-scale/<UTC time>``:
``results.json``, logs) and a section of ``bench/RESULTS.md`` per command.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from bench import (  # noqa: E402
    LAB_LIMITS,
    Operator,
    StatusWatch,
    connect,
    say,
    watch_pods,
    write_results_section,
)
from operators.core.api.kube import ApiError, Kube  # noqa: E402
from operators.core.api.resources import (  # noqa: E402
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_POOL_STATUS_REQUESTS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
    Resource,
)
from operators.lab import Lab, LabOptions  # noqa: E402
from operators.lab.components import build_node  # noqa: E402
from operators.lab.operator_process import rss_kib  # noqa: E402

DRIVER = "scale.dra-operators.dev"
CLASS = "scale-gpu"
DRA_NS = "scale-dra"
PLAIN_NS = 10  # plain Pods spread over this many namespaces
ENVELOPE = {"nodes": 5000, "pods": 150_000, "claim_pods": 10_000}
DEVICES_PER_NODE = 8
SHARED_PER_CLAIM = 4
PARTS = ("startup", "claims", "poolstatus", "cli", "taints")
KNOBS = (
    "SCALE_FRACTIONS",
    "SCALE_PLAIN_PODS",
    "SCALE_PARTS",
    "SCALE_NEW_CLAIMS",
    "SCALE_SETTLE",
    "SCALE_STARTUP_ROUNDS",
    "SCALE_TAINTS_ROUNDS",
    "SCALE_APISERVER_PROFILE",
    "SCALE_HOLD",
)
OURS = ("claims", "taints", "poolstatus")
INFLIGHT = 64
CLK_TCK = os.sysconf("SC_CLK_TCK")
PROBE_NS = "scale-probe"
# Alpha, off by default, and unused here: with it on, kube-scheduler 1.37's DynamicResources Filter
# lists every ResourceSlice for every Node it filters a claim Pod on
# (nodeallocatabledynamicresources.go, filterSlicesForNode), Nodes times slices per Pod: 29% of its
# CPU at 0.1, growing as the square. It would make the fill, not a measured part, take hours.
SCHEDULER_COSTLY_GATES = ("DRANodeAllocatableResources",)
# Claim Pods go in a batch at a time, each scheduled before the next. kube-scheduler requeues
# every pending Pod on each new or changed claim (isPodWorthRequeuing, 40% of its CPU at 0.5 with
# all 5,000 at once): pending Pods times claim events, the square of the fill.
CLAIM_POD_BATCH = 500
# kube-scheduler filters a Pod on 100 feasible Nodes (its minimum), not its default 10-46% of
# them: DRA's Filter costs per Node, and where a claim Pod lands is not measured.
SCHEDULER_CONFIG = {"percentageOfNodesToScore": 1}
# kwok on 2 cores renews 2,500 Nodes' leases minutes late; kube-controller-manager's
# node-lifecycle-controller then taints them unreachable and evicts their Pods (seen at 0.5). No
# figure here is about Nodes that die, so it waits an hour before it thinks one has.
# kwok leaves the plain Pods Pending (scheduled, never Running). It moves 4 Pods at a time to
# Running: at the envelope about 9 a second, so that an hour after the fill it had reached a third
# of the plain Pods and none of the claim Pods behind them, its status patches loaded the API
# server under every part, and the taints part could not start. (More at a time did not help: at
# 32 kwok played the stage twice for almost every Pod.) A plain Pod is thus 2.8 KB of JSON on the
# wire instead of about 4.2 KB (kwok's status and its managedFields entry), for ours and
# upstream's listings alike.
PLAIN_POD_ANNOTATION = "bench.dra-operators.dev/kwok"
KWOK_OPTIONS = {"disregardStatusWithAnnotationSelector": f"{PLAIN_POD_ANNOTATION}=ignore"}
CONTROLLER_MANAGER_FLAGS = ("--node-monitor-grace-period=1h",)
# device-taint-eviction-controller's last informer (klog names no controller in the others' "Caches
# are synced" lines, so those two are timed by the first work they do: see Scale.kcm_primed).
TAINTS_SYNCED = re.compile(r'device_taint_eviction.go.*"Done waiting".*instance="SharedIndexInformer \*v1.Pod \+')


def env_float_list(name: str, default: str) -> list[float]:
    raw = os.environ.get(name, default)
    try:
        values = [float(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"bench-scale: {name}={raw!r} is not a comma-separated list of numbers") from None
    if not values or any(not 0 < v <= 1 for v in values):
        raise SystemExit(f"bench-scale: {name} wants fractions in (0, 1], e.g. 0.1,0.25")
    return values


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process (/proc/<pid>/stat fields 14 and 15)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, ValueError, IndexError):
        return None


def mib(kib: int | None) -> float | None:
    return round(kib / 1024, 1) if kib is not None else None


# The API server's request histograms, by the labels that say what was asked. Watches are left out:
# their "duration" is how long they stayed open.
REQUEST_HISTOGRAMS = {
    "apiserver_request_duration_seconds": ("", ("verb", "resource", "subresource")),
    "etcd_request_duration_seconds": ("etcd ", ("operation", "type")),
}
LONG_RUNNING = {"WATCH", "WATCHLIST", "CONNECT"}


def request_totals(metrics: str) -> dict[str, tuple[float, float]]:
    """Per kind of request, (count, seconds) so far, from the API server's ``/metrics``."""
    totals: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(metrics):
        prefix, labels = REQUEST_HISTOGRAMS.get(family.name, ("", ()))
        if not labels:
            continue
        for sample in family.samples:
            if sample.labels.get("verb") in LONG_RUNNING:
                continue
            count = sample.name.endswith("_count")
            if not count and not sample.name.endswith("_sum"):
                continue
            key = prefix + " ".join(v for v in (sample.labels.get(label, "") for label in labels) if v)
            n, seconds = totals.get(key, (0.0, 0.0))
            totals[key] = (n + sample.value, seconds) if count else (n, seconds + sample.value)
    return totals


def request_costs(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], top: int = 12
) -> dict[str, dict[str, float]]:
    """The requests between two ``request_totals``: the ``top`` kinds by time spent, each with its
    count, mean latency and total seconds."""
    costs = []
    for key, (n, seconds) in after.items():
        n0, seconds0 = before.get(key, (0.0, 0.0))
        if n - n0 > 0:
            costs.append((seconds - seconds0, key, n - n0))
    costs.sort(reverse=True)
    return {
        key: {"count": int(n), "mean_ms": round(seconds * 1000 / n, 2), "seconds": round(seconds, 2)}
        for seconds, key, n in costs[:top]
    }


def cpu_deltas(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, float]:
    """CPU seconds each process spent between two samples (those alive at both), most first."""
    spent = {
        name: round(cpu - start, 2)
        for name, cpu in after.items()
        if cpu is not None and (start := before.get(name)) is not None
    }
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


# -- objects (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    fraction: float
    nodes: int
    plain_pods: int
    template_pods: int
    shared_claims: int

    @classmethod
    def of(cls, fraction: float, plain_pods: int | None = None) -> Size:
        """That fraction of the envelope; ``plain_pods`` instead of its share of plain Pods."""
        claim_pods = round(ENVELOPE["claim_pods"] * fraction)
        shared_pods = claim_pods // 5
        return cls(
            fraction=fraction,
            nodes=max(1, round(ENVELOPE["nodes"] * fraction)),
            plain_pods=round(ENVELOPE["pods"] * fraction) - claim_pods if plain_pods is None else plain_pods,
            template_pods=claim_pods - shared_pods,
            shared_claims=shared_pods // SHARED_PER_CLAIM,
        )

    @property
    def claim_pods(self) -> int:
        return self.template_pods + self.shared_claims * SHARED_PER_CLAIM

    @property
    def devices(self) -> int:
        return self.nodes * DEVICES_PER_NODE


def node_name(i: int) -> str:
    return f"scale-node-{i:05d}"


def build_slices(node: str, partitionable: bool) -> list[dict[str, Any]]:
    """The pool of one Node: 8 whole devices, or (partitionable) 4 GPUs and 4 halves of two of
    them, their counter sets in a slice of their own."""

    def slice_(suffix: str, spec: dict[str, Any], count: int) -> dict[str, Any]:
        return {
            "apiVersion": RESOURCE_SLICES.group_version,
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{suffix}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
                **spec,
            },
        }

    def device(name: str, index: int) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"index": {"int": index}, "model": {"string": "scale-gpu"}},
            "capacity": {"memory": {"value": "80Gi"}},
        }

    if not partitionable:
        devices = [device(f"gpu-{i}", i) for i in range(DEVICES_PER_NODE)]
        return [slice_("devices", {"devices": devices}, 1)]
    sets = [{"name": f"gpu-{i}-counters", "counters": {"memory": {"value": "80Gi"}}} for i in range(4)]
    devices = []
    for i in range(4):
        whole = device(f"gpu-{i}", i)
        whole["consumesCounters"] = [{"counterSet": f"gpu-{i}-counters", "counters": {"memory": {"value": "80Gi"}}}]
        devices.append(whole)
    for i in range(4):
        half = device(f"gpu-{i // 2}-half-{i % 2}", i // 2)
        half["capacity"] = {"memory": {"value": "40Gi"}}
        half["consumesCounters"] = [{"counterSet": f"gpu-{i // 2}-counters", "counters": {"memory": {"value": "40Gi"}}}]
        devices.append(half)
    return [
        slice_("counters", {"sharedCounters": sets}, 2),
        slice_("devices", {"devices": devices}, 2),
    ]


def build_plain_pod(name: str) -> dict[str, Any]:
    """A Pod without claims, as most of a cluster's are (labels, env, requests); kwok leaves it
    Pending."""
    pod = _build_pod(name)
    pod["metadata"]["annotations"] = {PLAIN_POD_ANNOTATION: "ignore"}
    return pod


def _build_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web", "shard": name[-1]}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(4)],
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


def build_claim_pod(name: str, source: dict[str, str], scheduler: str | None = None) -> dict[str, Any]:
    pod = _build_pod(name)
    pod["spec"]["resourceClaims"] = [{"name": "gpu", **source}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if scheduler:
        pod["spec"]["schedulerName"] = scheduler
    return pod


def claim_spec() -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}


# -- results ---------------------------------------------------------------------------------


@dataclass
class Fraction:
    size: dict[str, Any]
    fill_seconds: dict[str, float] = field(default_factory=dict)
    startup: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    poolstatus: dict[str, dict[str, Any]] = field(default_factory=dict)
    cli: dict[str, dict[str, Any]] = field(default_factory=dict)
    taints: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Per taints turn: where the work went (cpu_seconds by process, requests by kind).
    taints_detail: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Results:
    started: str
    command: str
    commit: str
    fractions: list[Fraction] = field(default_factory=list)
    seconds: float = 0.0
    load_start: tuple[float, float, float] = (0.0, 0.0, 0.0)
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)


# -- the run -----------------------------------------------------------------------------------


class EvictionWatch:
    """The claim Pods not yet being deleted, from a watch. Listing 10,000 Pods every half second
    took most of a core from the controllers being timed (at 1); the watch parses only the lines
    that say a Pod is going."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.left: set[str] = set()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        pods, rv = await self.kube.list_with_version(PODS, self.namespace)
        self.left = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
        self._task = asyncio.create_task(self._run(rv))

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def evicted(self) -> bool | str:
        if self._task is not None and self._task.done():
            self._task.result()  # a watch that failed fails the part
        return not self.left or f"{len(self.left)} not evicted"

    async def _run(self, rv: str) -> None:
        await watch_pods(self.kube, self.namespace, rv, (b'"deletionTimestamp"', b'"DELETED"'), self._going)

    def _going(self, event: dict[str, Any]) -> None:
        meta = event["object"]["metadata"]
        if event["type"] == "DELETED" or meta.get("deletionTimestamp"):
            self.left.discard(meta["name"])


class Scale:
    def __init__(self, run_dir: Path, size: Size, parts: list[str], result: Fraction):
        self.run_dir, self.size, self.parts, self.result = run_dir, size, parts, result
        self.lab: Lab | None = None
        self.kube: Kube | None = None
        self.serial = 0

    # -- helpers -------------------------------------------------------------------------

    async def many(self, items: list[Any], one, what: str) -> float:
        """``one(item)`` for every item, INFLIGHT at a time, progress every 10 s."""
        queue = iter(items)
        done = 0
        started = last = time.monotonic()

        async def worker() -> None:
            nonlocal done, last
            for item in queue:
                await one(item)
                done += 1
                if time.monotonic() - last > 10:
                    last = time.monotonic()
                    say(f"  {what}: {done}/{len(items)}")

        await asyncio.gather(*(worker() for _ in range(INFLIGHT)))
        seconds = time.monotonic() - started
        say(f"  {what}: {len(items)} in {seconds:.0f}s")
        return seconds

    async def until(self, check, timeout: float, what: str, every: float = 2.0) -> float:
        started = time.monotonic()
        last_note = started
        while True:
            state = await check()
            if state is True:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what} ({state})")
            if time.monotonic() - last_note > 15:
                last_note = time.monotonic()
                say(f"  waiting for {what}: {state}")
            await asyncio.sleep(every)

    async def namespace(self, name: str) -> None:
        await self.kube.create(NAMESPACES, {"metadata": {"name": name}})
        await self.until(lambda: self._has_sa(name), 120, f"default ServiceAccount in {name}", every=0.2)

    async def _has_sa(self, name: str) -> bool | str:
        return await self.kube.get_or_none(SERVICE_ACCOUNTS, "default", name) is not None or "not yet"

    async def count_pods(self, namespace: str | None, test) -> int:
        return sum(1 for p in await self.kube.list(PODS, namespace, limit=5000) if test(p))

    def controller_manager(self, upstream: bool) -> None:
        say(f"kube-controller-manager: upstream's DRA controllers {'on' if upstream else 'off'}")
        self.lab.restart_controller_manager(upstream, LAB_LIMITS)

    def kcm_pid(self) -> int:
        return self.lab.processes()["kube-controller-manager"]

    async def controller_manager_quiet(self, window: float = 2.0, busy: float = 0.5, calm: int = 3) -> float:
        """Seconds until kube-controller-manager, just restarted, has done its own start-up:
        ``calm`` windows in a row of at most ``busy`` CPU seconds each. Its listing of every object
        would otherwise load the API server and the cores while one of ours starts (at 0.25 that
        made our start-up look 50% slower). Not idle: at 1, kwok's Node heartbeats alone keep it
        at 0.15-0.3 CPU s in 2 s; its listing takes what it can get of the two cores."""
        started = time.monotonic()
        last, quiet = cpu_seconds(self.kcm_pid()) or 0.0, 0
        while time.monotonic() - started < 300:
            await asyncio.sleep(window)
            now = cpu_seconds(self.kcm_pid()) or 0.0
            quiet = quiet + 1 if now - last <= busy else 0
            if quiet >= calm:
                return time.monotonic() - started
            last = now
        say("  kube-controller-manager still busy after 300 s; measuring anyway")
        return time.monotonic() - started

    def operator(self, name: str) -> Operator:
        self.serial += 1
        return Operator(name, self.lab.kubeconfig, self.run_dir / f"{name}-{self.serial}.log")

    # -- filling the lab -----------------------------------------------------------------

    async def fill(self) -> None:
        s, kube = self.size, self.kube
        say(f"filling: {s.nodes} Nodes, {s.devices} devices, {s.plain_pods} plain Pods, {s.claim_pods} claim Pods")
        self.controller_manager(True)  # upstream makes the template claims while filling
        names = [node_name(i) for i in range(s.nodes)]
        self.result.fill_seconds["nodes"] = await self.many(
            names, lambda n: kube.create(NODES, build_node(n, pods="110")), "Nodes"
        )
        await self.until(self._nodes_ready, 600, "every Node Ready")
        await kube.create(
            DEVICE_CLASSES,
            {
                "apiVersion": DEVICE_CLASSES.group_version,
                "kind": "DeviceClass",
                "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        slices = [sl for i, n in enumerate(names) for sl in build_slices(n, partitionable=i % 10 == 0)]
        self.result.fill_seconds["slices"] = await self.many(
            slices, lambda sl: kube.create(RESOURCE_SLICES, sl), "ResourceSlices"
        )
        for i in range(PLAIN_NS):
            await self.namespace(f"scale-plain-{i}")
        plain = [(f"scale-plain-{i % PLAIN_NS}", f"p-{i:06d}") for i in range(s.plain_pods)]
        self.result.fill_seconds["plain pods"] = await self.many(
            plain, lambda item: kube.create(PODS, build_plain_pod(item[1]), item[0]), "plain Pods"
        )
        await self.make_claim_pods()
        scheduled = await self.until(self._all_scheduled, 3600, "every Pod scheduled", every=10)
        self.result.fill_seconds["scheduling (after the last create)"] = scheduled

    async def make_claim_pods(self) -> None:
        s, kube = self.size, self.kube
        if await kube.get_or_none(NAMESPACES, DRA_NS) is None:
            for ns in (DRA_NS, PROBE_NS):
                await self.namespace(ns)
                await kube.create(
                    RESOURCE_CLAIM_TEMPLATES, {"metadata": {"name": "gpu"}, "spec": {"spec": claim_spec()}}, ns
                )
        for j in range(s.shared_claims):  # kept from a first round (deallocated once their Pods went)
            if await kube.get_or_none(RESOURCE_CLAIMS, f"s-{j}", DRA_NS) is None:
                await kube.create(RESOURCE_CLAIMS, {"metadata": {"name": f"s-{j}"}, "spec": claim_spec()}, DRA_NS)
        pods = [build_claim_pod(f"t-{i}", {"resourceClaimTemplateName": "gpu"}) for i in range(s.template_pods)]
        pods += [
            build_claim_pod(f"s-{j}-{k}", {"resourceClaimName": f"s-{j}"})
            for j in range(s.shared_claims)
            for k in range(SHARED_PER_CLAIM)
        ]
        key = f"claim pods ({CLAIM_POD_BATCH} at a time, until scheduled)"
        self.result.fill_seconds.setdefault(key, 0.0)
        started = time.monotonic()
        for first in range(0, len(pods), CLAIM_POD_BATCH):
            batch = pods[first : first + CLAIM_POD_BATCH]
            await self.many(batch, lambda pod: kube.create(PODS, pod, DRA_NS), f"claim Pods {first + len(batch)}")
            await self.until(self._claim_pods_scheduled, 3600, "claim Pods scheduled", every=2)
        self.result.fill_seconds[key] += time.monotonic() - started

    async def _nodes_ready(self) -> bool | str:
        ready = 0
        for node in await self.kube.list(NODES, limit=5000):
            conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
            ready += conditions.get("Ready") == "True"
        return ready >= self.size.nodes or f"{ready} Ready"

    async def _claim_pods_scheduled(self) -> bool | str:
        pending = await self.kube.list(PODS, DRA_NS, field_selector="spec.nodeName=", limit=5000)
        return not pending or f"{len(pending)} not scheduled yet"

    async def _all_scheduled(self) -> bool | str:
        pods = await self.kube.list(PODS, field_selector="spec.nodeName=", limit=5000)
        pending = [p for p in pods if (p["spec"].get("schedulerName") or "default-scheduler") == "default-scheduler"]
        return not pending or f"{len(pending)} Pods not scheduled yet"

    async def claim_pods_running(self) -> bool | str:
        pods = await self.kube.list(PODS, DRA_NS, limit=5000)
        running = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")
        return running >= self.size.claim_pods or f"{running}/{self.size.claim_pods} claim Pods running"

    # -- parts ---------------------------------------------------------------------------

    async def startup(self) -> None:
        """``SCALE_STARTUP_ROUNDS`` rounds (default 1), ours first in odd rounds and upstream
        first in even ones: what else loads the API server (kwok's status patches and
        heartbeats) changes over a run, and alternating shows how much."""
        rounds = int(os.environ.get("SCALE_STARTUP_ROUNDS", "1"))
        for index in range(rounds):
            label = "" if index == 0 else f" (round {index + 1})"
            if index % 2 == 0:
                await self._startup_ours(label)
                await self._startup_upstream(label)
            else:
                await self._startup_upstream(label)
                await self._startup_ours(label)

    async def _startup_ours(self, label: str) -> None:
        settle = float(os.environ.get("SCALE_SETTLE", "30"))
        self.controller_manager(False)
        say(f"  kube-controller-manager quiet after {await self.controller_manager_quiet():.0f}s")
        for name in OURS:
            op = self.operator(name)
            started = time.monotonic()
            op.start(wait_live=False)
            spy = op.profile(self.run_dir / f"profile-startup-{name}-{self.size.fraction}.txt")
            try:
                primed = await self.until(
                    lambda op=op, name=name: self._logged(op, f"{name} operator started"),
                    900,
                    f"{name} operator primed",
                    every=0.2,
                )
                Operator.stop_profile(spy)
                pid = op.proc.pid
                figures = {"primed_seconds": round(primed, 2), "peak_rss_mib": mib(rss_kib(pid, "VmHWM"))}
                await asyncio.sleep(settle)
                figures["steady_rss_mib"] = mib(rss_kib(pid))
                figures["peak_rss_mib"] = mib(rss_kib(pid, "VmHWM"))
                figures["cpu_seconds_to_steady"] = cpu_seconds(pid)
                self.result.startup[f"ours: {name}{label}"] = figures
                say(f"  startup ours {name}{label}: {figures} (started {time.monotonic() - started:.0f}s ago)")
            finally:
                op.stop()

    async def _startup_upstream(self, label: str) -> None:
        settle = float(os.environ.get("SCALE_SETTLE", "30"))
        started = time.monotonic()
        primed = await self.kcm_primed()
        pid = self.kcm_pid()
        figures = {"primed_seconds": round(primed, 2), "peak_rss_mib": mib(rss_kib(pid, "VmHWM"))}
        await asyncio.sleep(settle)
        figures["steady_rss_mib"] = mib(rss_kib(pid))
        figures["peak_rss_mib"] = mib(rss_kib(pid, "VmHWM"))
        figures["cpu_seconds_to_steady"] = cpu_seconds(pid)
        self.result.startup[f"upstream: kube-controller-manager{label}"] = figures
        say(f"  startup upstream{label}: {figures} ({time.monotonic() - started:.0f}s)")

    async def _logged(self, op: Operator, message: str) -> bool | str:
        if op.proc is not None and op.proc.poll() is not None:
            raise RuntimeError(f"{op.label} exited with {op.proc.returncode}:\n{op.tail()}")
        text = op.log.read_text(errors="replace") if op.log.exists() else ""
        start = text.rfind("--- start")
        return message in text[start:] or "not yet"

    async def primed_controller(self, controller: str, name: str) -> tuple[Operator | None, int]:
        """Our operator ``name`` (kube-controller-manager without upstream's DRA controllers) or,
        for "upstream", kube-controller-manager with them; started and primed. Returns the
        operator (None for upstream) and the pid whose CPU is measured."""
        if controller != "ours":
            await self.kcm_primed()
            return None, self.kcm_pid()
        self.controller_manager(False)
        await self.controller_manager_quiet()
        op = await self.started_operator(name)
        return op, op.proc.pid

    async def started_operator(self, name: str) -> Operator:
        """Our operator ``name``, started and primed."""
        op = self.operator(name)
        # kopf answers the liveness probe only once the start-up (our priming) is done: 75 s for
        # the Pods of the whole envelope, beyond the liveness wait of a start. The kustomize
        # base's startupProbe allows 300 s; this waits for the log line, or for the exit.
        op.start(wait_live=False)
        await self.until(lambda: self._logged(op, f"{name} operator started"), 900, f"{name} primed", 0.2)
        return op

    async def kcm_primed(self) -> float:
        """Restart kube-controller-manager with upstream's DRA controllers; seconds until all
        three work: the resourceclaim controller has made a probe Pod's claim, the pool status
        controller has answered a probe request, and the device-taint-eviction controller has
        synced its last informer (its log says so)."""
        self.controller_manager(False)
        self.serial += 1
        probe = f"probe-{self.serial}"
        await self.kube.create(
            PODS, build_claim_pod(probe, {"resourceClaimTemplateName": "gpu"}, scheduler="none"), PROBE_NS
        )
        await self.kube.create(
            RESOURCE_POOL_STATUS_REQUESTS, {"metadata": {"name": probe}, "spec": {"driver": DRIVER, "limit": 1}}
        )
        log = self.lab.files.logs / "kube-controller-manager.log"
        offset = log.stat().st_size
        self.controller_manager(True)
        started = time.monotonic()

        async def working() -> bool | str:
            waiting = []
            pod = await self.kube.get(PODS, probe, PROBE_NS)
            if not (pod.get("status") or {}).get("resourceClaimStatuses"):
                waiting.append("claims")
            if not await self.request_done(probe):
                waiting.append("poolstatus")
            with open(log, errors="replace") as f:
                f.seek(offset)
                if not TAINTS_SYNCED.search(f.read()):
                    waiting.append("taints")
            return not waiting or f"waiting for {waiting}"

        await self.until(working, 900, "kube-controller-manager's DRA controllers working", every=0.1)
        seconds = time.monotonic() - started
        await self.kube.delete(PODS, probe, PROBE_NS)
        await self.kube.delete(RESOURCE_POOL_STATUS_REQUESTS, probe)
        return seconds

    async def request_done(self, name: str) -> dict[str, Any] | None:
        obj = await self.kube.get(RESOURCE_POOL_STATUS_REQUESTS, name)
        conditions = {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}
        return obj if conditions.get("Complete") == "True" or conditions.get("Failed") == "True" else None

    async def claims(self) -> None:
        count = int(os.environ.get("SCALE_NEW_CLAIMS", "1000"))
        for controller in ("ours", "upstream"):
            op, pid = await self.primed_controller(controller, "claims")
            ns = f"scale-burst-{controller}"
            try:
                await self.namespace(ns)
                await self.kube.create(
                    RESOURCE_CLAIM_TEMPLATES, {"metadata": {"name": "gpu"}, "spec": {"spec": claim_spec()}}, ns
                )
                watch = StatusWatch(self.kube, ns)
                await watch.start()
                spy = op.profile(self.run_dir / f"profile-claims-{self.size.fraction}.txt") if op else None
                cpu0, started = cpu_seconds(pid), time.monotonic()
                names = [f"b-{i}" for i in range(count)]
                await self.many(
                    names,
                    lambda n, ns=ns: self.kube.create(
                        PODS, build_claim_pod(n, {"resourceClaimTemplateName": "gpu"}, scheduler="none"), ns
                    ),
                    f"{controller}: template Pods",
                )
                await self.until(
                    lambda watch=watch: asyncio.sleep(0, len(watch.seen) >= count or f"{len(watch.seen)}/{count}"),
                    900,
                    "every burst Pod's claim",
                    every=0.2,
                )
                seconds, cpu = time.monotonic() - started, (cpu_seconds(pid) or 0) - (cpu0 or 0)
                Operator.stop_profile(spy)
                await watch.stop()
                self.result.claims[controller] = {
                    "pods": count,
                    "seconds": round(seconds, 2),
                    "cpu_seconds_per_1000": round(cpu * 1000 / count, 2),
                }
                say(f"  claims {controller}: {self.result.claims[controller]}")
            finally:
                if op is not None:
                    op.stop()
                await self.kube.delete(NAMESPACES, ns)

    async def poolstatus(self) -> None:
        for controller in ("ours", "upstream"):
            op, pid = await self.primed_controller(controller, "poolstatus")
            name = f"scale-{controller}"
            try:
                cpu0, started = cpu_seconds(pid), time.monotonic()
                await self.kube.create(
                    RESOURCE_POOL_STATUS_REQUESTS,
                    {"metadata": {"name": name}, "spec": {"driver": DRIVER, "limit": 1000}},
                )
                answer: dict[str, Any] = {}

                async def complete(name: str = name, answer: dict[str, Any] = answer) -> bool | str:
                    done = await self.request_done(name)
                    answer.update(done or {})
                    return done is not None or "no answer"

                await self.until(complete, 900, f"pool status request {name}", every=0.1)
                seconds, cpu = time.monotonic() - started, (cpu_seconds(pid) or 0) - (cpu0 or 0)
                status = answer.get("status") or {}
                self.result.poolstatus[controller] = {
                    "seconds": round(seconds, 2),
                    "cpu_seconds": round(cpu, 2),
                    "pools_listed": len(status.get("pools") or []),
                    "pool_count": status.get("poolCount"),
                }
                say(f"  poolstatus {controller}: {self.result.poolstatus[controller]}")
            finally:
                if op is not None:
                    op.stop()
                try:
                    await self.kube.delete(RESOURCE_POOL_STATUS_REQUESTS, name)
                except ApiError:
                    pass

    async def cli(self) -> None:
        kubectl_dra = shutil.which("kubectl-dra", path=str(Path(sys.executable).parent)) or "kubectl-dra"
        env = {**os.environ, "KUBECONFIG": str(self.lab.kubeconfig)}
        pod = "t-0" if self.size.template_pods else "s-0-0"
        # A Pod whose claim waits for allocation: explain then checks the request against every
        # device of the cluster, as kube-scheduler would.
        await self.kcm_primed()
        # Not while kube-controller-manager, just restarted, lists and sorts every object (its
        # garbage collector's graph of 150,000 Pods): that took the API server from the command
        # (23.2 s at the envelope, against 7.9-14.9 s on the quiet lab).
        say(f"  kube-controller-manager quiet after {await self.controller_manager_quiet():.0f}s")
        if await self.kube.get_or_none(PODS, "pending", PROBE_NS) is None:  # made by an earlier run (SCALE_HOLD)
            await self.kube.create(
                PODS, build_claim_pod("pending", {"resourceClaimTemplateName": "gpu"}, scheduler="none"), PROBE_NS
            )
        await self.until(lambda: self._has_claim_status(PROBE_NS, "pending"), 300, "the pending Pod's claim", every=0.2)
        for label, args in (
            ("kubectl dra devices", ["devices"]),
            ("kubectl dra explain (allocated)", ["explain", f"pod/{pod}", "-n", DRA_NS]),
            ("kubectl dra explain (pending)", ["explain", "pod/pending", "-n", PROBE_NS]),
        ):
            command = [kubectl_dra, *args]
            spy = shutil.which("py-spy", path=str(Path(sys.executable).parent))
            if os.environ.get("BENCH_PROFILE") and spy:
                slug = re.sub(r"[^a-z]+", "-", label).strip("-")
                profile = self.run_dir / f"profile-{slug}-{self.size.fraction}.txt"
                command = [spy, "record", "--rate", "100", "-f", "raw", "-o", str(profile), "--", *command]
            started = time.monotonic()
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            seconds = time.monotonic() - started
            (self.run_dir / f"{label.replace(' ', '-')}.out").write_text(done.stdout + done.stderr)
            self.result.cli[label] = {
                "seconds": round(seconds, 2),
                "exit": done.returncode,
                "lines": len(done.stdout.splitlines()),
            }
            say(f"  {label}: {self.result.cli[label]}")

    async def taints(self) -> None:
        rounds = int(os.environ.get("SCALE_TAINTS_ROUNDS", "1"))
        for n in range(rounds):
            label = f" (round {n + 1})" if rounds > 1 else ""
            for controller in ("ours", "upstream") if n % 2 == 0 else ("upstream", "ours"):
                await self._claim_pods_afresh()
                await self._taints_turn(controller, label)

    async def _claim_pods_afresh(self) -> None:
        """Every claim Pod there and none going: those an earlier turn evicted are made again
        (kube-controller-manager with its DRA controllers makes their claims, as in the fill)."""
        pods = await self.kube.list(PODS, DRA_NS, limit=5000)
        if len(pods) == self.size.claim_pods and not any(p["metadata"].get("deletionTimestamp") for p in pods):
            return
        await self.many(
            [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")],
            lambda name: self._delete(PODS, name, DRA_NS),
            "claim Pods left by an earlier turn",
        )
        await self.until(self._claim_pods_gone, 1800, "evicted claim Pods gone", every=2)
        self.controller_manager(True)
        await self.make_claim_pods()

    async def _delete(self, res: Resource, name: str, namespace: str | None = None) -> None:
        """Deleted, or already gone."""
        try:
            await self.kube.delete(res, name, namespace)
        except ApiError as e:
            if not e.not_found:
                raise

    async def _taints_turn(self, controller: str, label: str) -> None:
        """One controller's turn. Ours is the taints and the claims operator: an evicted Pod's
        claims are then released and its template claims deleted during the turn, as
        kube-controller-manager's resourceclaim-controller does during upstream's (without it our
        turn left that work, a third of the API server's requests, to after the clock stopped)."""
        op, pid = await self.primed_controller(controller, "taints")
        helper = await self.started_operator("claims") if op else None
        measured = {"kube-controller-manager": pid}
        if helper is not None:
            measured = {"ours: taints": pid, "ours: claims": helper.proc.pid}
        rule = f"scale-{controller}"
        evictions = EvictionWatch(self.kube, DRA_NS)
        profile: asyncio.Task | None = None
        try:
            await self.until(self.claim_pods_running, 1800, "claim Pods running", every=5)
            await evictions.start()
            slug = f"{controller}{label}".replace(" ", "-").replace("(", "").replace(")", "")
            spy = op.profile(self.run_dir / f"profile-taints-{slug}-{self.size.fraction}.txt") if op else None
            claims_spy = (
                helper.profile(self.run_dir / f"profile-claims-{slug}-{self.size.fraction}.txt") if helper else None
            )
            processes = {**self.lab.processes(), "bench": os.getpid(), **measured}
            requests0 = await self.api_request_totals()
            cpu_all0 = {name: cpu_seconds(p) for name, p in processes.items()}
            started = time.monotonic()
            profile = self.apiserver_profile(f"apiserver-taints-{slug}")
            await self.kube.create(
                DEVICE_TAINT_RULES,
                {
                    "metadata": {"name": rule},
                    "spec": {
                        "deviceSelector": {"driver": DRIVER},
                        "taint": {"key": "scale.dra-operators.dev/broken", "effect": "NoExecute"},
                    },
                },
            )
            await self.until(evictions.evicted, 1800, "every claim Pod evicted", every=0.5)
            seconds = time.monotonic() - started
            cpu_all = cpu_deltas(cpu_all0, {name: cpu_seconds(p) for name, p in processes.items()})
            cpu = sum(cpu_all.get(name, 0.0) for name in measured)
            Operator.stop_profile(spy)
            Operator.stop_profile(claims_spy)
            requests = request_costs(requests0, await self.api_request_totals())
            key = f"{controller}{label}"
            self.result.taints[key] = {
                "pods": self.size.claim_pods,
                "seconds": round(seconds, 2),
                "cpu_seconds": round(cpu, 2),
            }
            self.result.taints_detail[key] = {"cpu_seconds": cpu_all, "requests": requests}
            say(f"  taints {key}: {self.result.taints[key]}")
            say(f"    CPU seconds by process: {cpu_all}")
            say(f"    API requests: {requests}")
        finally:
            if profile is not None:
                await profile
            await evictions.stop()
            for ours in (op, helper):
                if ours is not None:
                    ours.stop()
            await self._delete(DEVICE_TAINT_RULES, rule)  # not there when the turn failed before it

    async def api_request_totals(self) -> dict[str, tuple[float, float]]:
        metrics = await asyncio.to_thread(self.lab.raw, "/metrics", timeout=120)
        return request_totals(metrics.decode())

    def apiserver_profile(self, name: str) -> asyncio.Task | None:
        """``SCALE_APISERVER_PROFILE=S``: kube-apiserver's CPU profile over S seconds, from 15 s
        on (the turn under way), to ``<name>.pb.gz`` and its ``go tool pprof -top`` to
        ``<name>.txt``. Never fails the turn: a profile that could not be taken says why."""
        seconds = int(os.environ.get("SCALE_APISERVER_PROFILE") or 0)
        if seconds <= 0:
            return None
        target = self.run_dir / f"{name}.pb.gz"

        async def take() -> None:
            try:
                await asyncio.sleep(15)
                data = await asyncio.to_thread(
                    self.lab.raw, f"/debug/pprof/profile?seconds={seconds}", timeout=seconds + 60
                )
                target.write_bytes(data)
                go = shutil.which("go") or "go"
                text = []
                for order in ("-flat", "-cum"):
                    top = await asyncio.to_thread(
                        subprocess.run,
                        [go, "tool", "pprof", "-top", order, "-nodecount=60", str(target)],
                        capture_output=True,
                        text=True,
                        timeout=300,
                    )
                    text.append(top.stdout + top.stderr)
                (self.run_dir / f"{name}.txt").write_text("\n".join(text))
                say(f"  kube-apiserver profile: {target}")
            except Exception as e:  # noqa: BLE001 - a profile is an aid, never the measurement
                say(f"  kube-apiserver profile {name} failed: {type(e).__name__}: {e}")

        return asyncio.create_task(take())

    async def _has_claim_status(self, namespace: str, name: str) -> bool | str:
        pod = await self.kube.get(PODS, name, namespace)
        return bool((pod.get("status") or {}).get("resourceClaimStatuses")) or "no claim yet"

    async def _claim_pods_gone(self) -> bool | str:
        left = len(await self.kube.list(PODS, DRA_NS, limit=5000))
        return left == 0 or f"{left} left"

    async def run_parts(self, parts: list[str]) -> None:
        for part in PARTS:
            if part in parts:
                say(f"part {part}")
                await getattr(self, part)()

    async def hold(self) -> None:
        """``SCALE_HOLD``: keep the filled lab and run parts again on request. Our operators
        start from the tree each time, so a change to them is measured on the same objects
        without filling again. The request is a file, ``again``, in the run directory: the parts
        to run (``SCALE_PARTS``' names, one line), or ``stop``."""
        again = self.run_dir / "again"
        say(
            f"holding the lab: KUBECONFIG={self.lab.kubeconfig}; "
            f"echo startup > {again} runs a part again, echo stop > {again} ends"
        )
        while True:
            if not again.exists():
                await asyncio.sleep(1)
                continue
            words = again.read_text().replace(",", " ").split()
            again.unlink()
            if words == ["stop"]:
                return
            if unknown := set(words) - set(PARTS):
                say(f"hold: unknown parts {sorted(unknown)}; choose from {','.join(PARTS)} or stop")
                continue
            try:
                await self.run_parts(words)
                self.result.notes.append(f"held: {' '.join(words)} run again; its figures replace the earlier ones")
            except Exception as e:  # noqa: BLE001 - a failed experiment must not lose the filled lab
                say(f"hold: {' '.join(words)} failed: {type(e).__name__}: {e}")

    async def run(self) -> None:
        self.lab = Lab(
            LabOptions(
                name=f"scale-{self.run_dir.name}",
                nodes=1,
                run_dir=self.run_dir / "lab",
                disabled_gates=SCHEDULER_COSTLY_GATES,
                scheduler_config=SCHEDULER_CONFIG,
                controller_manager_flags=CONTROLLER_MANAGER_FLAGS,
                kwok_options=KWOK_OPTIONS,
            ),
            log=say,
        )
        self.lab.start()
        try:
            self.kube = await connect(self.lab.kubeconfig)
            started = time.monotonic()
            await self.fill()
            self.result.fill_seconds["total"] = round(time.monotonic() - started, 1)
            await self.run_parts(self.parts)
            if os.environ.get("SCALE_HOLD"):
                await self.hold()
        finally:
            if self.kube is not None:
                await self.kube.close()
            self.lab.stop()
            shutil.rmtree(self.lab.files.etcd_data, ignore_errors=True)


# -- the report ----------------------------------------------------------------------------------


def fmt(value: Any, unit: str = "") -> str:
    return "–" if value is None else f"{value:g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def taints_detail_lines(detail: dict[str, dict[str, Any]]) -> list[str]:
    """Where each taints turn's work went: CPU seconds by process, then the API server's
    requests by kind (count, mean latency)."""
    if not detail:
        return []
    turns = list(detail)
    processes = list(dict.fromkeys(p for d in detail.values() for p in d.get("cpu_seconds", {})))
    lines = [
        "| taints turn: CPU seconds | " + " | ".join(turns) + " |",
        "|---|" + "---:|" * len(turns),
    ]
    for p in processes:
        lines.append(f"| {p} | " + " | ".join(fmt(detail[t]["cpu_seconds"].get(p)) for t in turns) + " |")
    kinds = list(dict.fromkeys(k for d in detail.values() for k in d.get("requests", {})))
    lines += [
        "",
        "| taints turn: requests (count, mean ms) | " + " | ".join(turns) + " |",
        "|---|" + "---:|" * len(turns),
    ]
    for k in kinds:
        cells = []
        for t in turns:
            r = detail[t]["requests"].get(k)
            cells.append(f"{r['count']:,}, {r['mean_ms']:g}" if r else "–")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def report(r: Results) -> str:
    lines = [
        f"### `{r.command}`",
        "",
        f"- **Date**: {r.started}; commit `{r.commit}`; {os.cpu_count()} cores; load average "
        f"{r.load_start[0]:.1f} at the start, {r.load_end[0]:.1f} at the end; {r.seconds / 60:.0f} minutes in all.",
        "- **Envelope**: 5,000 Nodes, 40,000 devices (8 per Node's ResourceSlice, a tenth partitionable), "
        "150,000 Pods of which 10,000 use claims; each fraction a lab of its own.",
        "- Ours: each operator a process of its own; upstream: kube-controller-manager with its DRA "
        "controllers (all of it: RSS and CPU include its other controllers). Client limits 500/1000 for both.",
        "",
    ]
    for f in r.fractions:
        s = f.size
        lines += [
            f"#### {s['fraction']:g} of the envelope: {s['nodes']} Nodes, {s['devices']} devices, "
            f"{s['plain_pods'] + s['claim_pods']} Pods ({s['claim_pods']} with claims)",
            "",
            "Filling (seconds): " + ", ".join(f"{k} {v:.0f}" for k, v in f.fill_seconds.items()),
            "",
        ]
        if f.startup:
            lines += [
                "| start-up | primed (s) | peak RSS (MiB) | steady RSS (MiB) | peak / steady |",
                "|---|---:|---:|---:|---:|",
            ]
            for name, v in f.startup.items():
                ratio = (
                    f"{v['peak_rss_mib'] / v['steady_rss_mib']:.2f}"
                    if v.get("peak_rss_mib") and v.get("steady_rss_mib")
                    else "–"
                )
                lines.append(
                    f"| {name} | {fmt(v.get('primed_seconds'))} | {fmt(v.get('peak_rss_mib'))} | "
                    f"{fmt(v.get('steady_rss_mib'))} | {ratio} |"
                )
            lines.append("")
        rows = []
        for label, table, keys in (
            ("claims for new template Pods", f.claims, ("seconds", "cpu_seconds_per_1000")),
            ("pool status request (all pools)", f.poolstatus, ("seconds", "cpu_seconds")),
            ("NoExecute rule over the driver: all claim Pods evicted", f.taints, ("seconds", "cpu_seconds")),
        ):
            # "ours", "upstream", and with rounds "ours (round 2)" and so on: a row per round.
            for suffix in dict.fromkeys(k.removeprefix("ours").removeprefix("upstream") for k in table):
                ours, up = table.get(f"ours{suffix}") or {}, table.get(f"upstream{suffix}") or {}
                rows.append(
                    f"| {label}{suffix} | {fmt(ours.get(keys[0]))} s, {fmt(ours.get(keys[1]))} CPU s | "
                    f"{fmt(up.get(keys[0]))} s, {fmt(up.get(keys[1]))} CPU s |"
                )
        if rows:
            lines += ["| work | ours | upstream |", "|---|---|---|", *rows, ""]
        lines += taints_detail_lines(f.taints_detail)
        for label, v in f.cli.items():
            lines.append(f"- `{label}`: {fmt(v['seconds'])} s (exit {v['exit']}, {v['lines']} lines)")
        for note in f.notes:
            lines.append(f"- {note}")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    fractions = env_float_list("SCALE_FRACTIONS", "0.1,0.25,0.5,1")
    parts = [p.strip() for p in os.environ.get("SCALE_PARTS", ",".join(PARTS)).split(",") if p.strip()]
    if unknown := set(parts) - set(PARTS):
        raise SystemExit(f"bench-scale: unknown SCALE_PARTS {sorted(unknown)}; choose from {','.join(PARTS)}")
    stamp = datetime.datetime.now(datetime.UTC)
    run_root = Path(
        os.environ.get("SCALE_RUN_DIR") or ROOT / ".cache" / "bench-scale" / stamp.strftime("%Y%m%dT%H%M%SZ")
    )
    knobs = " ".join(f"{k}={os.environ[k]}" for k in KNOBS if os.environ.get(k))
    command = f"{knobs} make bench-scale".strip()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    results = Results(
        started=stamp.strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        commit=commit.stdout.strip(),
        load_start=os.getloadavg(),
    )
    t0 = time.monotonic()
    failed = False
    plain = os.environ.get("SCALE_PLAIN_PODS")
    if plain is not None and not plain.isdigit():
        raise SystemExit(f"bench-scale: SCALE_PLAIN_PODS={plain!r} is not a number of Pods")
    for fraction in fractions:
        size = Size.of(fraction, None if plain is None else int(plain))
        result = Fraction(size={**asdict(size), "claim_pods": size.claim_pods, "devices": size.devices})
        results.fractions.append(result)
        run_dir = (run_root / f"{fraction:g}").resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        say(f"{command}: fraction {fraction:g}, parts {parts}, run directory {run_dir}")
        try:
            asyncio.run(Scale(run_dir, size, parts, result).run())
        except KeyboardInterrupt:
            result.notes.append("interrupted")
            failed = True
            break
        except Exception as e:  # noqa: BLE001 - what was measured is still written, marked as such
            result.notes.append(f"stopped: {type(e).__name__}: {e}")
            say(f"fraction {fraction:g} failed: {type(e).__name__}: {e}")
            failed = True
            break  # a larger fraction would fail the same way, later
    results.seconds = time.monotonic() - t0
    results.load_end = os.getloadavg()
    run_root.mkdir(parents=True, exist_ok=True)
    (run_root / "results.json").write_text(json.dumps(asdict(results), indent=2))
    text = report(results)
    write_results_section(command + (" (stopped)" if failed else ""), text)
    print(text, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
