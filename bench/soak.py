#!/usr/bin/env python3
"""A churn soak (``make soak``): a lab, the four operators as real processes, steady churn for
``SOAK_SECONDS`` (default 3600), their memory sampled every 30 s, and the end state checked.

What it does:

- starts its own lab (two kwok Nodes, upstream's resourceclaim and device-taint controllers off,
  the lab's default) in a run directory of its own (``SOAK_RUN_DIR``, default
  ``.cache/soak/<UTC time>``), and the claims, taints and binding operators and one simulated node
  agent per Node, each as its own process, as users run them (``python -m operators.cli run ...``,
  JSON logs, leader election off, the node agent without its kubelet plugin);
- churns at a rate a shared 2-core machine sustains (about 0.65 Pods created and as many deleted
  per second, with their claims), in four lanes and a fifth for the inventory:
  - *template*: waves of Pods whose claims come from a ResourceClaimTemplate; half of each wave
    finishes first (its claims must then be deleted by the claims operator), then all are deleted;
  - *shared*: one ResourceClaim used by three Pods in turn (two together, one replaced), which the
    claims operator must deallocate when the last goes; then the claim is deleted;
  - *taints*: two Pods on devices whose claims tolerate a NoExecute taint for 5 s; a NoExecute
    DeviceTaintRule on the first Pod's device (the taints operator must evict it and write the
    rule's status) and an effect-None rule on the second's (status NoEffect, no eviction); then
    both rules and Pods are deleted;
  - *binding*: Pods on devices with binding conditions, which the binding operator prepares
    (simulated preparer, 1 s, 10% failing, so cool-off taints come and go) and undoes on deletion;
  - *inventory*: every 150 s one node agent's inventory file changes (a device added or removed,
    an attribute changed) and its slices must show it;
- samples each operator process's RSS (``VmRSS`` of the Python process itself) every 30 s into
  ``rss.csv`` in the run directory, with the live Pods and claims;
- after the churn, lets it drain and checks: no ResourceClaim left in the soak namespaces once every
  Pod is gone, no Pod or claim deleting for more than 60 s, no DeviceTaintRule left, no operator
  process exited, no error-level operator log line other than transient API retries (counted),
  every wait of the churn met, and RSS after warm-up (``SOAK_WARMUP``, default 600 s) grown by at
  most 10% for every operator (final sample against the end of warm-up);
- with ``SOAK_TRACEMALLOC`` frames (default 10; 0: off) every operator traces its allocations
  (``DRA_TRACEMALLOC``, ``core/memprofile.py``) and the soak reads them (``/debug/tracemalloc`` on
  its metrics port) at the start, half-way through and at the end of warm-up, every ``SOAK_TRACEMALLOC_PERIOD``
  (default 3600 s) after it and at the end of the churn: ``tracemalloc/<operator>-<t>.json`` in the
  run directory, and the call stacks whose live memory grew most, per period and from the end of
  warm-up to the end, in the summary (tracing costs memory: the RSS figures include it);
- writes ``summary.md`` and ``summary.json`` in the run directory, rewrites its section of
  ``bench/RESULTS.md`` (one section per command), and exits non-zero, saying why, when a check fails.
"""

from __future__ import annotations

import asyncio
import csv
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from operators.core import memprofile  # noqa: E402
from operators.core.api.kube import MERGE_PATCH, ApiError, Kube  # noqa: E402
from operators.core.api.resources import (  # noqa: E402
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.core.framework.metrics import samples  # noqa: E402
from operators.lab import Lab, LabOptions  # noqa: E402
from operators.lab.components import FINISH_ANNOTATION  # noqa: E402
from operators.lab.operator_process import OperatorProcess, is_transient_retry, rss_kib  # noqa: E402
from operators.taints.decisions import existing_condition  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
NODES = ("lab-node-0", "lab-node-1")
DRIVER = "soak.dra-operators.dev"
TAINT_KEY = f"{DRIVER}/maintenance"
READY_CONDITION = f"{DRIVER}/attached"
FAILED_CONDITION = f"{DRIVER}/attach-failed"
TOLERATION_SECONDS = 5
BINDING_COOL_OFF = 20
BINDING_PREPARER = {"delay": 1, "failProbability": 0.1}

NS_TEMPLATE, NS_SHARED, NS_TAINTS, NS_BINDING = "soak-template", "soak-shared", "soak-taints", "soak-binding"
NAMESPACES_USED = (NS_TEMPLATE, NS_SHARED, NS_TAINTS, NS_BINDING)

SAMPLE_INTERVAL = 30.0
STUCK_AFTER = 60.0
RSS_LIMIT_PERCENT = 10.0
# Lane pacing: (pods per wave, least seconds per cycle). About 0.7 Pods/s in all.
TEMPLATE_WAVE, TEMPLATE_PERIOD = 8, 20.0
SHARED_PERIOD = 30.0
TAINTS_PERIOD = 40.0
BINDING_WAVE, BINDING_PERIOD = 2, 20.0
INVENTORY_PERIOD = 150.0
RUNNING_TIMEOUT = 180.0
GONE_TIMEOUT = 120.0


def say(message: str) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    print(f"soak {stamp} {message}", flush=True)


def env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"soak: {name}={raw!r} is not a number of seconds") from None
    if value < 0:
        raise SystemExit(f"soak: {name} must not be negative")
    return value


def the_command() -> str:
    """The command as the user typed it (as far as the environment tells)."""
    prefix = " ".join(
        f"{k}={os.environ[k]}"
        for k in ("SOAK_SECONDS", "SOAK_WARMUP", "SOAK_TRACEMALLOC", "SOAK_TRACEMALLOC_PERIOD", "SOAK_RUN_DIR")
        if os.environ.get(k)
    )
    command = "make soak" if os.environ.get("MAKELEVEL") else f"{Path(sys.executable).name} bench/soak.py"
    if not os.environ.get("MAKELEVEL") and Path(sys.executable).is_relative_to(ROOT):
        command = f"{Path(sys.executable).relative_to(ROOT)} bench/soak.py"
    return f"{prefix} {command}".strip()


# -- objects ---------------------------------------------------------------------------------


def inventory(revision: int) -> dict[str, Any]:
    """The simulated inventory of a node agent. Device names are gpu-<i> counted over the
    groups, so the group that changes comes last and the others keep their names."""

    def group(model: str, count: int, kind: str, **extra: Any) -> dict[str, Any]:
        return {"model": model, "memory": "40Gi", "count": count, "attributes": {"type": {"string": kind}}, **extra}

    spare = group("SoakSpare", 1 + revision % 2, "spare")
    spare["attributes"]["revision"] = {"int": revision}
    return {
        "gpus": [
            group("SoakGPU", 6, "gpu"),  # gpu-0..5: template and shared claims
            group("SoakGPU", 2, "taintable"),  # gpu-6..7: tolerating claims, tainted by rules
            group(
                "SoakFabricGPU",
                2,
                "fabric",
                bindsToNode=True,
                bindingConditions=[READY_CONDITION],
                bindingFailureConditions=[FAILED_CONDITION],
            ),  # gpu-8..9: binding conditions
            spare,  # gpu-10(..11): changes with the revision
        ]
    }


def device_class(kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"soak-{kind}"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{kind}"'
                    }
                }
            ]
        },
    }


def claim_spec(kind: str, tolerations: list[dict] | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": f"soak-{kind}", "allocationMode": "ExactCount", "count": 1}
    if tolerations:
        exactly["tolerations"] = tolerations
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def template(name: str, kind: str, tolerations: list[dict] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": claim_spec(kind, tolerations)},
    }


def pod(name: str, source: dict[str, str], lane: str, node: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"soak-lane": lane}},
        "spec": {
            "resourceClaims": [{"name": "gpu", **source}],
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }
    if node:
        body["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return body


def taint_rule(name: str, effect: str, node: str, device: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "labels": {"soak": "true"}},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node, "device": device},
            "taint": {"key": TAINT_KEY, "value": "true", "effect": effect},
        },
    }


# -- pure helpers ----------------------------------------------------------------------------


def metric_sum(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(value for _, value in samples(text, name, **labels))


def metric_by_label(text: str, name: str, label: str) -> dict[str, float]:
    out: Counter = Counter()
    for labels, value in samples(text, name):
        out[labels.get(label, "")] += value
    return dict(out)


def classify_log(path: Path) -> dict[str, Any]:
    """Error-level lines (and tracebacks) of one operator log: transient API retries apart."""
    errors, transient, warnings, published = [], 0, 0, 0
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        if '"level": "warning"' in line:
            warnings += 1
        if '"event": "published"' in line:
            published += 1
        if '"level": "error"' in line or '"level": "critical"' in line or "Traceback" in line:
            if is_transient_retry(line):
                transient += 1
            else:
                errors.append(line)
    return {"errors": errors, "transient": transient, "warnings": warnings, "published": published}


def slope_mib_per_hour(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, KiB) in MiB per hour."""
    if len(points) < 3:
        return None
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    sxx = sum((t - mx) ** 2 for t, _ in points)
    if sxx == 0:
        return None
    sxy = sum((t - mx) * (v - my) for t, v in points)
    return sxy / sxx * 3600 / 1024


def age_seconds(timestamp: str | None, now: datetime.datetime) -> float:
    if not timestamp:
        return 0.0
    when = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return (now - when).total_seconds()


def claim_of(pod_obj: dict) -> str | None:
    for status in (pod_obj.get("status") or {}).get("resourceClaimStatuses") or []:
        if status.get("name") == "gpu" and status.get("resourceClaimName"):
            return status["resourceClaimName"]
    return None


def allocated_device(claim: dict) -> str | None:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return results[0]["device"] if results else None


# -- operator processes ------------------------------------------------------------------------


class Operator(OperatorProcess):
    """A soak operator under a label of its own (one node agent per Node); its exit is noted."""

    def __init__(self, label: str, name: str, kubeconfig: Path, log_dir: Path, env: dict[str, str]):
        super().__init__([name], kubeconfig, log_dir / f"{label}.log", {"DRA_LEADER_ELECTION": "false", **env})
        self._label = label
        self.exit_code: int | None = None
        self.exited_at: float | None = None
        self.liveness_failures = 0

    @property
    def label(self) -> str:
        return self._label

    @property
    def pid(self) -> int:
        assert self.proc
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        super().start(timeout)
        cmdline = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        if b"operators.cli" not in cmdline:  # the pid must be the Python process itself (its RSS is sampled)
            raise RuntimeError(f"{self.label}: pid {self.pid} is not the operator ({cmdline!r})")

    def alive(self) -> bool:
        if self.proc is None:
            return False
        if self.proc.poll() is not None:
            if self.exit_code is None:
                self.exit_code, self.exited_at = self.proc.returncode, time.monotonic()
            return False
        return True

    def metrics(self) -> str:
        try:
            return super().metrics()
        except OSError:
            return ""

    def tracemalloc(self) -> str:
        """Its live allocations (``core/memprofile``); the snapshot takes seconds in a big process."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{memprofile.PATH}", timeout=300) as r:
            return r.read().decode()


# -- the soak --------------------------------------------------------------------------------


@dataclass
class Sample:
    t: float
    phase: str
    rss: dict[str, int | None]
    pods: int
    claims: int
    stuck: int


@dataclass
class Stats:
    created: Counter = field(default_factory=Counter)  # kind -> objects the soak created
    deleted: Counter = field(default_factory=Counter)  # kind -> objects the soak deleted
    evicted: Counter = field(default_factory=Counter)  # kind -> objects an operator deleted
    events: Counter = field(default_factory=Counter)  # what the operators were seen doing
    misses: list[str] = field(default_factory=list)  # waits of the churn that timed out
    churn_errors: list[str] = field(default_factory=list)
    cycles: Counter = field(default_factory=Counter)


class Soak:
    def __init__(
        self,
        seconds: float,
        warmup: float,
        run_dir: Path,
        tracemalloc_frames: int = 0,
        tracemalloc_period: float = 3600.0,
    ):
        self.seconds, self.warmup = seconds, warmup
        self.tracemalloc_frames, self.tracemalloc_period = tracemalloc_frames, tracemalloc_period
        # operator label -> [(t, phase, tracemalloc report)], kept: the first, warm-up end, the last.
        self.traces: dict[str, list[tuple[float, str, dict[str, Any]]]] = {}
        self.growth_by_period: list[dict[str, Any]] = []  # per snapshot after the first: top growers
        self.run_dir = run_dir
        self.log_dir = run_dir / "logs"
        self.lab: Lab | None = None
        self.kube: Kube | None = None
        self.operators: list[Operator] = []
        self.stats = Stats()
        self.samples: list[Sample] = []
        self.stop_churn: asyncio.Event | None = None  # created in the event loop
        self.warmup_traced: asyncio.Event | None = None  # set once the warm-up end's readings are in
        self.eviction_delays: list[float] = []
        self.t0 = 0.0
        self.churn_seconds = 0.0
        self.drain_seconds = 0.0
        self.revisions = {node: 0 for node in NODES}
        self.checks: list[tuple[str, bool, str]] = []
        self.stuck_seen: dict[str, float] = {}  # object -> longest deleting age seen during the run
        self.started_at = datetime.datetime.now(datetime.UTC)
        self.load_start = os.getloadavg()
        self.load_end = (0.0, 0.0, 0.0)
        self.metrics: dict[str, str] = {}
        self.logs: dict[str, dict[str, Any]] = {}

    # -- setup ---------------------------------------------------------------------------------

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        say(f"run directory {self.run_dir}")
        self.lab = Lab(
            LabOptions(name=f"soak-{self.run_dir.name}", nodes=len(NODES), run_dir=self.run_dir / "lab"), log=say
        )
        self.lab.start()
        if self.lab.upstream_controllers:
            raise RuntimeError("the lab runs upstream's DRA controllers; the soak needs them off")
        kubeconfig = self.lab.kubeconfig
        traced = {"DRA_TRACEMALLOC": str(self.tracemalloc_frames)}
        for name in ("claims", "taints"):
            self.operators.append(Operator(name, name, kubeconfig, self.log_dir, traced))
        self.operators.append(
            Operator(
                "binding",
                "binding",
                kubeconfig,
                self.log_dir,
                {
                    "DRA_BINDING_DRIVERS": DRIVER,
                    "DRA_BINDING_PREPARER": "simulated",
                    "DRA_BINDING_PREPARER_CONFIG": json.dumps(BINDING_PREPARER),
                    "DRA_BINDING_COOL_OFF": str(BINDING_COOL_OFF),
                    **traced,
                },
            )
        )
        for node in NODES:
            path = self.inventory_path(node)
            path.write_text(yaml.safe_dump(inventory(0)))
            self.operators.append(
                Operator(
                    f"nodeagent-{node}",
                    "nodeagent",
                    kubeconfig,
                    self.log_dir,
                    {
                        "NODE_NAME": node,
                        "DRA_NODEAGENT_BACKEND": "simulated",
                        "DRA_NODEAGENT_INVENTORY": str(path),
                        "DRA_NODEAGENT_DRIVER": DRIVER,
                        "DRA_NODEAGENT_KUBELET_PLUGIN": "false",
                        **traced,
                    },
                )
            )
        for op in self.operators:
            op.start()
            say(f"started {op.label} (pid {op.pid}, log {op.log})")

    def inventory_path(self, node: str) -> Path:
        return self.run_dir / f"inventory-{node}.yaml"

    def stop(self) -> None:
        for op in reversed(self.operators):
            op.stop()
        if self.lab is not None:
            self.lab.stop()
            shutil.rmtree(self.lab.files.etcd_data, ignore_errors=True)  # gigabytes after an hour, no use

    async def prepare_cluster(self) -> None:
        kube = self.kube
        for kind in ("gpu", "taintable", "fabric"):
            await kube.create(DEVICE_CLASSES, device_class(kind))
        for ns in NAMESPACES_USED:
            await kube.create(NAMESPACES, {"metadata": {"name": ns}})
        for ns in NAMESPACES_USED:
            await self.until(
                lambda ns=ns: kube.get_or_none(SERVICE_ACCOUNTS, "default", ns),
                60,
                f"default ServiceAccount of {ns}",
                fatal=True,
            )
        toleration = {
            "key": TAINT_KEY,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": TOLERATION_SECONDS,
        }
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template("gpu", "gpu"), NS_TEMPLATE)
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template("tolerating", "taintable", [toleration]), NS_TAINTS)
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template("fabric", "fabric"), NS_BINDING)
        # Both node agents published: 11 devices each.
        for node in NODES:
            await self.until(
                lambda node=node: self.node_devices(node, lambda ds: len(ds) >= 11), 90, f"slices of {node}", fatal=True
            )

    async def node_devices(self, node: str, predicate: Callable[[list[dict]], bool]) -> bool:
        slices = await self.kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={node},spec.driver={DRIVER}")
        if not slices:
            return False
        newest = max(s["spec"]["pool"]["generation"] for s in slices)
        devices = [
            d for s in slices if s["spec"]["pool"]["generation"] == newest for d in s["spec"].get("devices") or []
        ]
        return predicate(devices)

    # -- small async helpers ---------------------------------------------------------------------

    async def until(
        self, check: Callable[[], Awaitable[Any]], timeout: float, what: str, interval: float = 1.0, fatal: bool = False
    ) -> Any:
        """Poll ``check`` until truthy; on timeout record a miss (or raise with ``fatal``)."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            try:
                value = await check()
                if value:
                    return value
            except Exception as e:  # noqa: BLE001 - the churn goes on; the miss says why
                last_error = f"{type(e).__name__}: {e}"[:300]
            if time.monotonic() >= deadline:
                message = f"{what} not within {timeout:.0f}s" + (f" ({last_error})" if last_error else "")
                if fatal:
                    raise RuntimeError(message)
                self.miss(message)
                return None
            await asyncio.sleep(interval)

    def miss(self, message: str) -> None:
        t = time.monotonic() - self.t0 if self.t0 else 0.0
        self.stats.misses.append(f"t={t:.0f}s {message}")
        say(f"MISS {message}")

    async def pods(self, ns: str) -> dict[str, dict]:
        return {p["metadata"]["name"]: p for p in await self.kube.list(PODS, ns)}

    async def create_pod(self, ns: str, body: dict, lane: str) -> None:
        await self.kube.create(PODS, body, ns)
        self.stats.created[f"Pod ({lane})"] += 1

    async def running(
        self, ns: str, names: list[str], timeout: float = RUNNING_TIMEOUT, what: str = ""
    ) -> dict[str, dict] | None:
        async def check():
            pods = await self.pods(ns)
            if all(n in pods and (pods[n].get("status") or {}).get("phase") == "Running" for n in names):
                return {n: pods[n] for n in names}
            return None

        return await self.until(check, timeout, what or f"{ns}: pods {', '.join(names)} Running")

    async def delete_pods(self, ns: str, names: list[str], lane: str) -> None:
        """Delete (ignoring those already gone) and wait until they are gone."""
        for name in names:
            try:
                await self.kube.delete(PODS, name, ns)
                self.stats.deleted[f"Pod ({lane})"] += 1
            except ApiError as e:
                if not e.not_found:
                    raise

        async def gone():
            pods = await self.pods(ns)
            return not any(n in pods for n in names)

        await self.until(gone, GONE_TIMEOUT, f"{ns}: pods {', '.join(names)} gone")

    async def paced(self, lane: str, period: float, cycle: Callable[[int], Awaitable[None]]) -> None:
        """Run ``cycle`` until the churn stops, at most once per ``period``. A cycle that fails
        is recorded and the lane goes on (its own cleanup runs in its ``finally``)."""
        n = 0
        while not self.stop_churn.is_set():
            started = time.monotonic()
            try:
                await cycle(n)
                self.stats.cycles[lane] += 1
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - recorded, the churn goes on
                message = f"{lane} cycle {n}: {type(e).__name__}: {e}"[:500]
                self.stats.churn_errors.append(message)
                say(f"churn error {message}")
            n += 1
            rest = period - (time.monotonic() - started)
            if rest > 0:
                try:
                    await asyncio.wait_for(self.stop_churn.wait(), rest)
                except TimeoutError:
                    pass

    # -- lanes -----------------------------------------------------------------------------------

    async def template_cycle(self, n: int) -> None:
        names = [f"t{n}-{i}" for i in range(TEMPLATE_WAVE)]
        try:
            for name in names:
                await self.create_pod(
                    NS_TEMPLATE, pod(name, {"resourceClaimTemplateName": "gpu"}, "template"), "template"
                )
            pods = await self.running(NS_TEMPLATE, names)
            if pods is None:
                return
            finished = names[: TEMPLATE_WAVE // 2]
            claims = {claim_of(pods[name]) for name in finished} - {None}
            for name in finished:
                await self.kube.patch(
                    PODS,
                    name,
                    {"metadata": {"annotations": {FINISH_ANNOTATION: "Succeeded"}}},
                    NS_TEMPLATE,
                    content_type=MERGE_PATCH,
                )

            async def claims_of_finished_gone():
                left = {c["metadata"]["name"] for c in await self.kube.list(RESOURCE_CLAIMS, NS_TEMPLATE)}
                return not (claims & left)

            if await self.until(claims_of_finished_gone, 60, f"template wave {n}: claims of finished Pods deleted"):
                self.stats.events["claims of finished Pods deleted by the claims operator"] += len(claims)
        finally:
            await self.delete_pods(NS_TEMPLATE, names, "template")

    async def shared_cycle(self, n: int) -> None:
        claim = f"shared-{n}"
        a, b, c = (f"s{n}-{x}" for x in "abc")
        source = {"resourceClaimName": claim}
        created = False
        try:
            await self.kube.create(
                RESOURCE_CLAIMS,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim},
                    "spec": claim_spec("gpu"),
                },
                NS_SHARED,
            )
            created = True
            self.stats.created["ResourceClaim (shared)"] += 1
            await self.create_pod(NS_SHARED, pod(a, source, "shared"), "shared")
            await self.create_pod(NS_SHARED, pod(b, source, "shared"), "shared")
            if await self.running(NS_SHARED, [a, b]) is None:
                return
            await self.delete_pods(NS_SHARED, [a], "shared")
            await self.create_pod(NS_SHARED, pod(c, source, "shared"), "shared")
            await self.running(NS_SHARED, [c])
            await self.delete_pods(NS_SHARED, [b, c], "shared")

            async def deallocated():
                obj = await self.kube.get(RESOURCE_CLAIMS, claim, NS_SHARED)
                status = obj.get("status") or {}
                return not status.get("allocation") and not status.get("reservedFor")

            if await self.until(deallocated, 60, f"shared claim {claim} deallocated after its Pods"):
                self.stats.events["shared claims deallocated by the claims operator"] += 1
        finally:
            await self.delete_pods(NS_SHARED, [a, b, c], "shared")
            if created:
                try:
                    await self.kube.delete(RESOURCE_CLAIMS, claim, NS_SHARED)
                    self.stats.deleted["ResourceClaim (shared)"] += 1
                except ApiError as e:
                    if not e.not_found:
                        raise
                await self.until(
                    lambda: self._gone(RESOURCE_CLAIMS, claim, NS_SHARED), 60, f"shared claim {claim} gone after delete"
                )

    async def _gone(self, res, name: str, ns: str | None) -> bool:
        return await self.kube.get_or_none(res, name, ns) is None

    async def taints_cycle(self, n: int) -> None:
        node = NODES[n % len(NODES)]
        evicted_pod, kept_pod = f"x{n}-evicted", f"x{n}-kept"
        names = [evicted_pod, kept_pod]
        rules = [f"soak-noexecute-{n}", f"soak-none-{n}"]
        made: list[tuple[str, str]] = []
        try:
            for name in names:
                await self.create_pod(
                    NS_TAINTS, pod(name, {"resourceClaimTemplateName": "tolerating"}, "taints", node), "taints"
                )
            pods = await self.running(NS_TAINTS, names)
            if pods is None:
                return
            devices = {}
            for name in names:
                claim = await self.kube.get(RESOURCE_CLAIMS, claim_of(pods[name]), NS_TAINTS)
                devices[name] = allocated_device(claim)
            for rule, effect, name in ((rules[0], "NoExecute", evicted_pod), (rules[1], "None", kept_pod)):
                await self.kube.create(DEVICE_TAINT_RULES, taint_rule(rule, effect, node, devices[name]))
                made.append((rule, effect))
                self.stats.created[f"DeviceTaintRule ({effect})"] += 1
            started = time.monotonic()

            async def evicted():
                p = (await self.pods(NS_TAINTS)).get(evicted_pod)
                return p is None or bool(p["metadata"].get("deletionTimestamp"))

            if await self.until(evicted, 60, f"taints cycle {n}: {evicted_pod} evicted", interval=0.5):
                self.stats.events["Pods evicted by the taints operator"] += 1
                self.stats.evicted["Pod (taints)"] += 1
                self.eviction_delays.append(time.monotonic() - started)

            async def statuses():
                nx = existing_condition(await self.kube.get(DEVICE_TAINT_RULES, rules[0])) or {}
                none = existing_condition(await self.kube.get(DEVICE_TAINT_RULES, rules[1])) or {}
                return nx.get("reason") in ("Completed", "PodsPendingEviction") and none.get("reason") == "NoEffect"

            if await self.until(statuses, 60, f"taints cycle {n}: rule status (Completed, NoEffect)"):
                self.stats.events["DeviceTaintRule statuses written by the taints operator"] += 2
            p = (await self.pods(NS_TAINTS)).get(kept_pod)
            if p is None or p["metadata"].get("deletionTimestamp"):
                self.miss(f"taints cycle {n}: {kept_pod} (effect None) was evicted")
        finally:
            for rule, effect in made:
                try:
                    await self.kube.delete(DEVICE_TAINT_RULES, rule)
                    self.stats.deleted[f"DeviceTaintRule ({effect})"] += 1
                except ApiError as e:
                    if not e.not_found:
                        raise
            await self.delete_pods(NS_TAINTS, names, "taints")

    async def binding_cycle(self, n: int) -> None:
        names = [f"b{n}-{i}" for i in range(BINDING_WAVE)]
        try:
            for name in names:
                await self.create_pod(
                    NS_BINDING, pod(name, {"resourceClaimTemplateName": "fabric"}, "binding"), "binding"
                )
            if await self.running(NS_BINDING, names):
                self.stats.events["Pods bound after the binding operator prepared their devices"] += len(names)
        finally:
            await self.delete_pods(NS_BINDING, names, "binding")

    async def inventory_cycle(self, n: int) -> None:
        if n == 0:  # the first change comes one period into the churn
            return
        node = NODES[n % len(NODES)]
        self.revisions[node] += 1
        revision = self.revisions[node]
        path = self.inventory_path(node)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(inventory(revision)))
        tmp.replace(path)
        self.stats.created["inventory change"] += 1
        expected = 11 + revision % 2

        def shows(devices: list[dict]) -> bool:
            spare = [d for d in devices if d["attributes"].get("type", {}).get("string") == "spare"]
            return (
                len(devices) == expected
                and bool(spare)
                and all(d["attributes"].get("revision", {}).get("int") == revision for d in spare)
            )

        if await self.until(
            lambda: self.node_devices(node, shows), 60, f"inventory revision {revision} of {node} published"
        ):
            self.stats.events["inventory changes republished by the node agents"] += 1

    # -- sampling --------------------------------------------------------------------------------

    async def sample(self, phase: str) -> Sample:
        rss = {}
        for op in self.operators:
            rss[op.label] = rss_kib(op.pid) if op.alive() else None
            if rss[op.label] is not None and not await asyncio.to_thread(op.live):
                op.liveness_failures += 1
        pods = claims = stuck = 0
        now = datetime.datetime.now(datetime.UTC)
        try:
            for ns in NAMESPACES_USED:
                for res in (PODS, RESOURCE_CLAIMS):
                    for obj in await self.kube.list(res, ns):
                        if res is PODS:
                            pods += 1
                        else:
                            claims += 1
                        age = age_seconds(obj["metadata"].get("deletionTimestamp"), now)
                        if age > STUCK_AFTER:
                            stuck += 1
                            key = f"{res.plural}/{ns}/{obj['metadata']['name']}"
                            self.stuck_seen[key] = max(age, self.stuck_seen.get(key, 0.0))
        except Exception as e:  # noqa: BLE001 - a sample without counts is still a sample
            say(f"sample: counting failed: {type(e).__name__}: {e}")
        s = Sample(time.monotonic() - self.t0, phase, rss, pods, claims, stuck)
        self.samples.append(s)
        with open(self.run_dir / "rss.csv", "a", newline="") as f:
            writer = csv.writer(f)
            if f.tell() == 0:
                writer.writerow(
                    [
                        "t_seconds",
                        "phase",
                        *(f"{op.label}_rss_kib" for op in self.operators),
                        "pods",
                        "claims",
                        "deleting_over_60s",
                    ]
                )
            writer.writerow(
                [
                    f"{s.t:.0f}",
                    phase,
                    *(rss[op.label] if rss[op.label] is not None else "" for op in self.operators),
                    pods,
                    claims,
                    stuck,
                ]
            )
        rss_text = " ".join(f"{k}={v / 1024:.1f}M" if v else f"{k}=EXITED" for k, v in rss.items())
        say(
            f"t={s.t:5.0f}s {phase:7} {rss_text} pods={pods} claims={claims} stuck={stuck} "
            f"created={sum(self.stats.created.values())} misses={len(self.stats.misses)}"
        )
        return s

    async def sampler(self) -> None:
        """A sample every SAMPLE_INTERVAL seconds of the churn, and one exactly at the end of
        warm-up (phase ``warmup-end``, the reference for growth)."""
        times = sorted({k * SAMPLE_INTERVAL for k in range(int(self.seconds // SAMPLE_INTERVAL) + 2)} | {self.warmup})
        for at in times:
            await asyncio.sleep(max(0.0, self.t0 + at - time.monotonic()))
            if at == self.warmup and self.warmup_traced is not None:
                # The reference for growth after the readings, whose snapshots cost memory RSS keeps.
                await self.warmup_traced.wait()
            phase = "warmup" if at < self.warmup else "warmup-end" if at == self.warmup else "churn"
            await self.sample(phase)

    async def trace(self, phase: str) -> None:
        """Every operator's live allocations now (``core/memprofile``), saved in the run directory;
        what grew since the previous reading is noted per period."""
        if not self.tracemalloc_frames:
            return
        (self.run_dir / "tracemalloc").mkdir(exist_ok=True)
        period: dict[str, Any] = {"t": round(time.monotonic() - self.t0), "phase": phase, "operators": {}}
        for op in self.operators:  # one after the other: a snapshot takes each a few seconds of CPU
            if not op.alive():
                continue
            t = time.monotonic() - self.t0
            try:
                answer = json.loads(await asyncio.to_thread(op.tracemalloc))
            except (OSError, ValueError) as e:
                say(f"tracemalloc of {op.label}: {type(e).__name__}: {e}")
                continue
            (self.run_dir / "tracemalloc" / f"{op.label}-{t:.0f}s.json").write_text(json.dumps(answer))
            readings = self.traces.setdefault(op.label, [])
            if readings:
                period["operators"][op.label] = {
                    "since_t": round(readings[-1][0]),
                    "traced_mib": round(answer["traced_bytes"] / 2**20, 2),
                    "traced_change_mib": round((answer["traced_bytes"] - readings[-1][2]["traced_bytes"]) / 2**20, 3),
                    # unreachable cycles freed by the reading's collection (held until then)
                    "garbage_mib": round(answer.get("garbage_bytes", 0) / 2**20, 3),
                    "top": memprofile.growth(readings[-1][2], answer),
                }
            # Keep the first reading, the end of warm-up and the latest (each is a few MB).
            keep = [r for r in readings if r is readings[0] or r[1] == "warmup-end"]
            self.traces[op.label] = [*keep, (t, phase, answer)]
        if period["operators"]:
            self.growth_by_period.append(period)
        say(
            f"t={period['t']:5.0f}s tracemalloc read ({phase}): "
            + ", ".join(
                f"{label}={readings[-1][2]['traced_bytes'] / 2**20:.1f}M" for label, readings in self.traces.items()
            )
        )

    async def tracer(self) -> None:
        """``trace`` at the start and half-way through warm-up, at the end of warm-up and every
        ``tracemalloc_period`` after it; the churn's end reads once more. A reading's snapshot
        costs its operator memory for a moment, which its RSS then keeps: the two readings in
        warm-up put that into warm-up, the later ones reuse it."""
        if not self.tracemalloc_frames:
            return
        times = [0.0, self.warmup / 2, self.warmup]
        while times[-1] + self.tracemalloc_period < self.seconds:
            times.append(times[-1] + self.tracemalloc_period)
        try:
            for at in times:
                await asyncio.sleep(max(0.0, self.t0 + at - time.monotonic()))
                await self.trace("warmup" if at < self.warmup else "warmup-end" if at == self.warmup else "churn")
                if at == self.warmup:
                    self.warmup_traced.set()
        finally:
            self.warmup_traced.set()

    def growth_rows(self) -> dict[str, tuple[float, dict[str, Any], list[dict[str, Any]]]]:
        """Per operator: (seconds between, traced MiB change, top growers) from the end of warm-up
        (or the first reading) to the last."""
        rows = {}
        for label, readings in self.traces.items():
            first = next((r for r in readings if r[1] == "warmup-end"), readings[0])
            last = readings[-1]
            if last is first:
                continue
            change = (last[2]["traced_bytes"] - first[2]["traced_bytes"]) / 2**20
            rows[label] = (
                last[0] - first[0],
                {"traced_change_mib": change},
                memprofile.growth(first[2], last[2], top=8),
            )
        return rows

    # -- the run ---------------------------------------------------------------------------------

    async def churn(self) -> None:
        self.stop_churn = asyncio.Event()
        async with await Kube.connect(str(self.lab.kubeconfig)) as kube:
            self.kube = kube
            await self.prepare_cluster()
            say(f"churning for {self.seconds:.0f}s (warm-up {self.warmup:.0f}s)")
            self.t0 = time.monotonic()
            self.warmup_traced = asyncio.Event() if self.tracemalloc_frames else None
            sampler = asyncio.create_task(self.sampler())
            tracer = asyncio.create_task(self.tracer())
            lanes = [
                asyncio.create_task(self.paced(lane, period, cycle))
                for lane, period, cycle in (
                    ("template", TEMPLATE_PERIOD, self.template_cycle),
                    ("shared", SHARED_PERIOD, self.shared_cycle),
                    ("taints", TAINTS_PERIOD, self.taints_cycle),
                    ("binding", BINDING_PERIOD, self.binding_cycle),
                    ("inventory", INVENTORY_PERIOD, self.inventory_cycle),
                )
            ]
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*lanes)), self.seconds)
            except TimeoutError:
                pass
            self.churn_seconds = time.monotonic() - self.t0
            say("churn over; letting the lanes finish their cycles")
            self.stop_churn.set()
            drain_started = time.monotonic()
            await asyncio.gather(*lanes, return_exceptions=True)
            sampler.cancel()
            tracer.cancel()
            await asyncio.gather(sampler, tracer, return_exceptions=True)
            await self.trace("end")
            await self.drain()
            self.drain_seconds = time.monotonic() - drain_started
            await self.sample("final")
            await self.final_checks()

    async def drain(self) -> None:
        """Delete what is left (nothing, unless a lane failed), then wait for Pods, claims and
        rules to go."""
        kube = self.kube
        for ns in NAMESPACES_USED:
            for p in await kube.list(PODS, ns):
                if not p["metadata"].get("deletionTimestamp"):
                    self.stats.events["Pods left by the churn, deleted at drain"] += 1
                    try:
                        await kube.delete(PODS, p["metadata"]["name"], ns)
                    except ApiError as e:
                        if not e.not_found:
                            raise

        async def none_left(res) -> bool:
            for ns in NAMESPACES_USED:
                if await kube.list(res, ns):
                    return False
            return True

        async def no_rules() -> bool:
            return not await kube.list(DEVICE_TAINT_RULES)

        started = time.monotonic()
        await self.until(lambda: none_left(PODS), 180, "drain: every Pod gone", interval=2)
        await self.until(lambda: none_left(RESOURCE_CLAIMS), 120, "drain: every ResourceClaim gone", interval=2)
        # Cool-off rules of the binding operator go BINDING_COOL_OFF seconds after a failure.
        await self.until(no_rules, BINDING_COOL_OFF + 60, "drain: every DeviceTaintRule gone", interval=2)
        say(f"drained in {time.monotonic() - started:.0f}s")

    async def final_checks(self) -> None:
        kube = self.kube
        now = datetime.datetime.now(datetime.UTC)
        pods_left = [f"{ns}/{p['metadata']['name']}" for ns in NAMESPACES_USED for p in await kube.list(PODS, ns)]
        claims_left = [(ns, c) for ns in NAMESPACES_USED for c in await kube.list(RESOURCE_CLAIMS, ns)]
        stuck = [
            f"{kind}/{ns}/{o['metadata']['name']} ({age_seconds(o['metadata'].get('deletionTimestamp'), now):.0f}s, "
            f"finalizers {o['metadata'].get('finalizers')})"
            for kind, items in (
                ("pods", [(ns, p) for ns in NAMESPACES_USED for p in await kube.list(PODS, ns)]),
                ("resourceclaims", claims_left),
            )
            for ns, o in items
            if age_seconds(o["metadata"].get("deletionTimestamp"), now) > STUCK_AFTER
        ]
        rules_left = [r["metadata"]["name"] for r in await kube.list(DEVICE_TAINT_RULES)]
        self.load_end = os.getloadavg()
        for op in self.operators:
            self.metrics[op.label] = await asyncio.to_thread(op.metrics)
            op.alive()
        exited = [
            f"{op.label} (exit code {op.exit_code} at t={op.exited_at - self.t0:.0f}s)"
            for op in self.operators
            if op.exit_code is not None
        ]
        for op in self.operators:
            self.logs[op.label] = classify_log(op.log)
        errors = {label: info["errors"] for label, info in self.logs.items() if info["errors"]}
        transient = sum(info["transient"] for info in self.logs.values())

        def check(name: str, ok: bool, detail: str) -> None:
            self.checks.append((name, ok, detail))

        check(
            "every Pod gone after the drain",
            not pods_left,
            f"{len(pods_left)} left" + (f": {', '.join(pods_left[:10])}" if pods_left else ""),
        )
        check(
            "no leaked ResourceClaim",
            not claims_left,
            f"{len(claims_left)} left in the soak namespaces"
            + (
                ": "
                + ", ".join(
                    f"{ns}/{c['metadata']['name']} (finalizers {c['metadata'].get('finalizers')}, "
                    f"reservedFor {len((c.get('status') or {}).get('reservedFor') or [])}, "
                    f"allocated {bool((c.get('status') or {}).get('allocation'))})"
                    for ns, c in claims_left[:10]
                )
                if claims_left
                else ""
            ),
        )
        check(
            "no stuck finalizer",
            not stuck,
            f"no Pod or claim deleting for more than {STUCK_AFTER:.0f}s at the end"
            + (": " + "; ".join(stuck[:10]) if stuck else "")
            + (
                f" (during the churn {len(self.stuck_seen)} object(s) were seen deleting for more than "
                f"{STUCK_AFTER:.0f}s, longest {max(self.stuck_seen.values()):.0f}s)"
                if self.stuck_seen
                else "; none seen during the churn either"
            ),
        )
        check(
            "no DeviceTaintRule left",
            not rules_left,
            f"{len(rules_left)} left" + (f": {', '.join(rules_left[:10])}" if rules_left else ""),
        )
        check(
            "no operator process exited",
            not exited,
            ", ".join(exited)
            or f"all {len(self.operators)} ran to the end"
            + (
                f" (liveness failed {sum(o.liveness_failures for o in self.operators)} time(s))"
                if any(o.liveness_failures for o in self.operators)
                else ""
            ),
        )
        check(
            "no error-level operator log line",
            not errors,
            (
                f"{sum(len(v) for v in errors.values())} error line(s): "
                + "; ".join(f"{k}: {len(v)}" for k, v in errors.items())
                if errors
                else "none"
            )
            + f"; {transient} transient API retry line(s) (kopf 'Request attempt #') not counted",
        )
        check(
            "every wait of the churn met",
            not self.stats.misses and not self.stats.churn_errors,
            f"{len(self.stats.misses)} timed out, {len(self.stats.churn_errors)} churn error(s)"
            + (
                ": " + "; ".join((self.stats.misses + self.stats.churn_errors)[:8])
                if self.stats.misses or self.stats.churn_errors
                else ""
            ),
        )
        for row in self.rss_rows():
            ok = row["change"] is not None and row["change"] <= RSS_LIMIT_PERCENT
            check(
                f"RSS of {row['label']} within +{RSS_LIMIT_PERCENT:.0f}% after warm-up",
                ok,
                "exited"
                if row["change"] is None
                else f"{row['warm']:.1f} -> {row['final']:.1f} MiB ({row['change']:+.1f}%), max {row['max']:.1f} MiB",
            )

    def rss_rows(self) -> list[dict[str, Any]]:
        rows = []
        for op in self.operators:
            label = op.label
            warm = next((s for s in self.samples if s.phase == "warmup-end"), None)
            if warm is None and self.samples:
                warm = self.samples[0]
            after = [s for s in self.samples if warm and s.t >= warm.t]
            values = [s.rss.get(label) for s in after]
            final = self.samples[-1].rss.get(label) if self.samples else None
            warm_v = warm.rss.get(label) if warm else None
            ok_values = [v for v in values if v]
            row: dict[str, Any] = {
                "label": label,
                "pid": op.pid,
                "warm": None,
                "max": None,
                "final": None,
                "change": None,
                "max_change": None,
                "slope": None,
            }
            if warm_v and final and ok_values:
                row.update(
                    warm=warm_v / 1024,
                    max=max(ok_values) / 1024,
                    final=final / 1024,
                    change=(final - warm_v) / warm_v * 100,
                    max_change=(max(ok_values) - warm_v) / warm_v * 100,
                    slope=slope_mib_per_hour(
                        [(s.t, s.rss[label]) for s in after if s.rss.get(label) and s.phase != "final"]
                    ),
                )
            rows.append(row)
        return rows

    # -- report ----------------------------------------------------------------------------------

    def report(self, command: str) -> tuple[str, bool]:
        ok = bool(self.checks) and all(passed for _, passed, _ in self.checks)
        failed = [name for name, passed, _ in self.checks if not passed]
        m = self.metrics
        creates = metric_sum(
            m.get("claims", ""), "dynamic_resource_allocation_resourceclaim_creates_total", status="success"
        )
        evictions = metric_sum(m.get("taints", ""), "device_taint_eviction_controller_pod_deletions_total")
        preparations = metric_by_label(m.get("binding", ""), "dra_operators_binding_preparations_total", "outcome")
        undos = metric_by_label(m.get("binding", ""), "dra_operators_binding_undos_total", "result")
        cool_off = metric_by_label(m.get("binding", ""), "dra_operators_binding_cool_off_taints_total", "action")
        published = {label: info["published"] for label, info in self.logs.items() if label.startswith("nodeagent")}
        try:
            commit = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
            ).stdout.strip()
        except OSError:
            commit = "?"
        pods_created = sum(v for k, v in self.stats.created.items() if k.startswith("Pod"))
        pods_deleted = sum(v for k, v in self.stats.deleted.items() if k.startswith("Pod"))
        per_s = (pods_created + pods_deleted) / self.churn_seconds if self.churn_seconds else 0.0
        date = self.started_at.strftime("%Y-%m-%d %H:%M UTC")
        lines = [
            f"### `{command}`",
            "",
            f"- **Date**: {date}; commit `{commit}`; {os.cpu_count()} cores (shared with other work; load average "
            f"{self.load_start[0]:.1f} at the start, {self.load_end[0]:.1f} at the end), Python "
            f"{platform.python_version()}.",
            f"- **Command**: `{command}` (run directory `{self.display_path(self.run_dir)}`: `rss.csv`, "
            "`summary.md`, `logs/`).",
            f"- **Duration**: churn {self.churn_seconds:.0f} s (SOAK_SECONDS={self.seconds:.0f}), warm-up "
            f"{self.warmup:.0f} s (SOAK_WARMUP), drain {self.drain_seconds:.0f} s; RSS sampled every "
            f"{SAMPLE_INTERVAL:.0f} s ({len(self.samples)} samples).",
            f"- **Setup**: lab with {len(NODES)} kwok Nodes, upstream's DRA controllers off; claims, taints, binding "
            "(simulated preparer, 1 s, 10% failing, cool-off 20 s) and one simulated node agent per Node "
            "(kubelet plugin off), each `python -m operators.cli run <name>`, JSON logs, leader election off.",
            "",
            "Objects churned (Pods evicted by the taints operator are deleted by it; claims of Pods by the "
            "claims operator or the garbage collector):",
            "",
            "| kind | created | deleted by the soak | deleted by an operator |",
            "|---|---:|---:|---:|",
        ]
        kinds = sorted(set(self.stats.created) | set(self.stats.deleted))
        for kind in kinds:
            deleted = self.stats.deleted.get(kind, "")
            lines.append(
                f"| {kind} | {self.stats.created.get(kind, '')} | {deleted} | {self.stats.evicted.get(kind, '')} |"
            )
        lines += [
            f"| ResourceClaim (generated for Pods: the claims operator's metric) | {creates:.0f} | | "
            "all (claims operator, garbage collector) |",
            "",
            f"Pods: {pods_created} created, {pods_deleted} deleted by the soak, "
            f"{per_s:.2f} Pod creations and deletions per second.",
            "",
            "What the operators did: "
            + "; ".join(f"{k}: {v}" for k, v in sorted(self.stats.events.items()))
            + f"; taints operator deletions (metric): {evictions:.0f}"
            + (
                f", eviction {min(self.eviction_delays):.1f} to {max(self.eviction_delays):.1f} s after the rule "
                f"(toleration {TOLERATION_SECONDS} s)"
                if self.eviction_delays
                else ""
            )
            + f"; binding preparations by outcome: {json.dumps(preparations, sort_keys=True)}, undos: "
            f"{json.dumps(undos, sort_keys=True)}, cool-off taints: {json.dumps(cool_off, sort_keys=True)}"
            + f"; node agent publications (log lines 'published'): {json.dumps(published, sort_keys=True)}.",
            "",
            "RSS (VmRSS of each operator's Python process, MiB):",
            "",
            "| operator | end of warm-up | max after warm-up | final | change (final) | change (max) "
            "| trend after warm-up |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in self.rss_rows():
            if row["change"] is None:
                lines.append(f"| {row['label']} | exited | | | | | |")
                continue
            slope = f"{row['slope']:+.2f} MiB/h" if row["slope"] is not None else ""
            lines.append(
                f"| {row['label']} | {row['warm']:.1f} | {row['max']:.1f} | {row['final']:.1f} | "
                f"{row['change']:+.1f}% | {row['max_change']:+.1f}% | {slope} |"
            )
        if growth := self.growth_rows():
            lines += [
                "",
                f"Allocations that grew most (tracemalloc, {self.tracemalloc_frames} frames, live memory "
                "from the end of warm-up to the end of the churn; call stack innermost first; readings in "
                "`tracemalloc/`, per period in `summary.json`):",
                "",
                "| operator | grew | live blocks | call stack |",
                "|---|---:|---:|---|",
            ]
            for label, (seconds, total, top) in growth.items():
                lines.append(
                    f"| {label} | {total['traced_change_mib']:+.2f} MiB in {seconds / 60:.0f} min (all traced) | | |"
                )
                for g in top[:5]:
                    lines.append(
                        f"| | {g['size_diff'] / 1024:+.1f} KiB | {g['count_diff']:+d} | {stack_text(g['traceback'])} |"
                    )
        lines += ["", "Checks:", ""]
        for name, passed, detail in self.checks:
            lines.append(f"- {'PASS' if passed else 'FAIL'} {name}: {detail}")
        errors = {label: info["errors"] for label, info in self.logs.items() if info["errors"]}
        if errors:
            lines += ["", "First error lines:", "", "```"]
            for label, found in errors.items():
                lines += [f"{label}: {line[:400]}" for line in found[:3]]
            lines += ["```"]
        warnings = {label: info["warnings"] for label, info in self.logs.items()}
        lines += ["", f"Warning-level log lines (not a check): {json.dumps(warnings, sort_keys=True)}."]
        verdict = (
            "PASS: no leak, no stuck object, no crash, no operator error, RSS within "
            f"+{RSS_LIMIT_PERCENT:.0f}% after warm-up"
            if ok
            else "FAIL: " + "; ".join(failed)
        )
        lines += ["", f"**Verdict**: {verdict}.", ""]
        return "\n".join(lines), ok

    @staticmethod
    def display_path(path: Path) -> str:
        try:
            return str(path.relative_to(ROOT))
        except ValueError:
            return str(path)

    def write(self, command: str) -> bool:
        text, ok = self.report(command)
        (self.run_dir / "summary.md").write_text(text)
        (self.run_dir / "summary.json").write_text(
            json.dumps(
                {
                    "command": command,
                    "date": self.started_at.isoformat(),
                    "seconds": self.seconds,
                    "warmup": self.warmup,
                    "churn_seconds": self.churn_seconds,
                    "drain_seconds": self.drain_seconds,
                    "created": self.stats.created,
                    "deleted": self.stats.deleted,
                    "events": self.stats.events,
                    "misses": self.stats.misses,
                    "churn_errors": self.stats.churn_errors,
                    "rss": self.rss_rows(),
                    "checks": [{"name": n, "ok": p, "detail": d} for n, p, d in self.checks],
                    "ok": ok,
                    "log_errors": {k: v["errors"][:20] for k, v in self.logs.items()},
                    "tracemalloc": {
                        "frames": self.tracemalloc_frames,
                        "period": self.tracemalloc_period,
                        "growth_by_period": self.growth_by_period,
                        "growth_after_warmup": {
                            label: {"seconds": round(seconds), **total, "top": top}
                            for label, (seconds, total, top) in self.growth_rows().items()
                        },
                    },
                },
                indent=2,
                default=str,
            )
        )
        write_results_section(command, text)
        print(text, flush=True)
        return ok


def stack_text(frames: list[str], most: int = 4) -> str:
    """A call stack for a table cell: the innermost frames, then the first of ours if not among them."""
    shown = frames[:most]
    ours = next((f for f in frames if f.startswith("operators/")), None)
    if ours and ours not in shown:
        shown = [*shown, "…", ours]
    return " ← ".join(f"`{f}`" if f != "…" else f for f in shown)


def write_results_section(command: str, text: str) -> None:
    """Rewrite the section of ``command`` in bench/RESULTS.md, or append one."""
    begin, end = f"<!-- soak: {command} -->", f"<!-- /soak: {command} -->"
    section = f"{begin}\n{text.rstrip()}\n{end}\n"
    if RESULTS.exists():
        current = RESULTS.read_text()
    else:
        current = (
            "# Benchmarks\n\n## Churn soak (`make soak`)\n\n"
            "What `bench/soak.py` does and how to run it: docs/development/bench-soak.md, *Soak*. Each command has one "
            "section below; running it again rewrites that section.\n\n"
        )
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        current = head + section.rstrip("\n") + tail
    elif (at := current.find("\n## ", current.find("## Churn soak"))) > 0 and "## Churn soak" in current:
        current = current[:at].rstrip("\n") + "\n\n" + section + current[at:]  # the soak chapter's end
    else:
        current = current.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(current)


def main() -> int:
    seconds = env_seconds("SOAK_SECONDS", 3600)
    warmup = env_seconds("SOAK_WARMUP", 600)
    frames = int(env_seconds("SOAK_TRACEMALLOC", 10))
    period = env_seconds("SOAK_TRACEMALLOC_PERIOD", 3600)
    if period <= 0:
        raise SystemExit("soak: SOAK_TRACEMALLOC_PERIOD must be a positive number of seconds")
    if warmup >= seconds:
        raise SystemExit(f"soak: SOAK_WARMUP ({warmup:.0f}) must be shorter than SOAK_SECONDS ({seconds:.0f})")
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = Path(os.environ.get("SOAK_RUN_DIR") or ROOT / ".cache" / "soak" / stamp).resolve()
    command = the_command()
    soak = Soak(seconds, warmup, run_dir, frames, period)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt()

    signal.signal(signal.SIGTERM, interrupted)
    say(f"{command}: {seconds:.0f}s of churn, warm-up {warmup:.0f}s")
    try:
        soak.start()
        asyncio.run(soak.churn())
    except KeyboardInterrupt:
        say("interrupted; stopping (no results written)")
        return 130
    finally:
        soak.stop()
    ok = soak.write(command)
    if not ok:
        for name, passed, detail in soak.checks:
            if not passed:
                say(f"FAILED {name}: {detail}")
    say(f"{'passed' if ok else 'FAILED'}; results in {RESULTS} and {run_dir}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
