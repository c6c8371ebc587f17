#!/usr/bin/env python3
"""``make bench``: our controllers against upstream's on one lab (a benchmark, never a test).

What it runs, in one lab (one kwok Node), each part selected by ``BENCH_PARTS``:

- *claims*: bursts of template Pods (schedulerName ``none``, so they stay Pending and only the
  claims controller works on them), created with ``BENCH_INFLIGHT`` (64) requests in flight, for
  every size of ``BENCH_SIZES`` (1000,10000), clean and while ``BENCH_NOISE`` (8000) plain Pods
  are created at the same time. Each burst runs against our claims operator (a process of its
  own, kube-controller-manager without its resourceclaim-controller) and against upstream's
  resourceclaim-controller in kube-controller-manager at the lab's client limits (500 QPS /
  1000 burst) and, for the sizes of ``BENCH_UPSTREAM_DEFAULT_SIZES`` (1000), at upstream's
  defaults (20/30). Measured: per-Pod latency from the create request to the first watch event
  showing ``status.resourceClaimStatuses`` (p50, p99), the total time from the first create to
  the last such event, throughput, and the controller process's RSS at the end (ours: the
  operator's Python process; upstream: kube-controller-manager, all its controllers). Every
  Pod's claim is counted afterwards.
- *taints*: ``BENCH_TAINT_PODS`` (1000) bound Pods whose claims are allocated the same device;
  one NoExecute DeviceTaintRule on it; time from the rule's create until every Pod is deleting,
  ours against upstream's device-taint-eviction-controller (500/1000), and the RSS.
- *nodeagent*: one simulated node agent with ``BENCH_DEVICES`` (1024) devices: time from the
  process start until the API server has all of them in ResourceSlices (cold), and RSS once idle;
  publishing only, then again with the kubelet plugin and gRPC health served (as the DaemonSet).
- *cel*: device-selector evaluations per second through ``operators/core/dra/cel.py`` (in process).

``BENCH_OPERATOR_SRC``: run our operators from another source tree (a checkout of an older
commit, to measure before and after on the same machine). ``BENCH_BASELINE_SRC``: the claims
part also runs every burst with the claims operator from that tree, "ours (baseline)", in the
same run (before and after on the same lab, minutes apart). Results: the run directory
(``BENCH_RUN_DIR``, default ``.cache/bench/<UTC time>``: ``results.json``, logs) and a section
of ``bench/RESULTS.md`` per command.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from operators.core.api.kube import ApiError, ConnectionLost, Kube  # noqa: E402
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
from operators.lab import Lab, LabOptions  # noqa: E402
from operators.lab.cluster import free_ports  # noqa: E402
from operators.lab.operator_process import OperatorProcess, rss_kib  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
NODE = "lab-node-0"
DRIVER = "bench.dra-operators.dev"
AGENT_DRIVER = "agent.bench.dra-operators.dev"
CLASS = "bench-gpu"
LAB_LIMITS, DEFAULT_LIMITS = (500, 1000), (20, 30)
STALL = 180.0  # seconds without progress after which a burst is given up (and reported so)


def say(message: str) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    print(f"bench {stamp} {message}", flush=True)


def env_ints(name: str, default: str) -> list[int]:
    raw = os.environ.get(name, default).strip()
    try:
        return [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"bench: {name}={raw!r} is not a comma-separated list of whole numbers") from None


def env_int(name: str, default: int) -> int:
    values = env_ints(name, str(default))
    if len(values) != 1 or values[0] < 0:
        raise SystemExit(f"bench: {name} must be one whole number >= 0")
    return values[0]


KNOBS = (
    "BENCH_SIZES",
    "BENCH_NOISE",
    "BENCH_UPSTREAM_DEFAULT_SIZES",
    "BENCH_INFLIGHT",
    "BENCH_TAINT_PODS",
    "BENCH_DEVICES",
    "BENCH_PARTS",
    "BENCH_OPERATOR_SRC",
    "BENCH_BASELINE_SRC",
    "BENCH_PROFILE",
    "BENCH_RUN_DIR",
)


def the_command() -> str:
    prefix = " ".join(f"{k}={os.environ[k]}" for k in KNOBS if os.environ.get(k) and k != "BENCH_RUN_DIR")
    command = "make bench" if os.environ.get("MAKELEVEL") else ".venv/bin/python bench/bench.py"
    return f"{prefix} {command}".strip()


def rss_mib(pid: int) -> float | None:
    kib = rss_kib(pid)
    return round(kib / 1024, 1) if kib is not None else None


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


# -- objects -----------------------------------------------------------------------------------


def template_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "template"}},
        "spec": {
            "schedulerName": "none",
            "terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def plain_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "noise"}},
        "spec": {
            "schedulerName": "none",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def claim_spec() -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {"name": "gpu", "exactly": {"deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}}
            ]
        }
    }


def inventory(devices: int) -> dict[str, Any]:
    return {
        "gpus": [{"model": "BenchGPU", "memory": "40Gi", "count": devices, "attributes": {"type": {"string": "gpu"}}}]
    }


# -- processes ---------------------------------------------------------------------------------


class Operator(OperatorProcess):
    """One of our operators as users run it, from this tree or ``BENCH_OPERATOR_SRC``; with
    ``BENCH_PROFILE``, sampled by py-spy."""

    def __init__(
        self, name: str, kubeconfig: Path, log: Path, env: dict[str, str] | None = None, src: str | None = None
    ):
        env = {"DRA_LEADER_ELECTION": "false", **(env or {})}
        python = [sys.executable]
        if src := src or os.environ.get("BENCH_OPERATOR_SRC"):
            # -P: not the current directory first on sys.path; the other tree's code is.
            env["PYTHONPATH"] = str(Path(src).resolve())
            python.append("-P")
        super().__init__([name], kubeconfig, log, env, python)

    def start(self, wait_live: bool = True, timeout: float = 90.0) -> None:
        super().start(timeout, wait_live)

    def profile(self, output: Path) -> subprocess.Popen | None:
        """With BENCH_PROFILE: py-spy samples the process (40 Hz, without stopping it) until
        ``stop_profile``; a flame graph in ``output`` (.svg), or collapsed stacks (.txt: one
        line per stack and its count, for ``sort -k2 -n`` or a flame-graph tool)."""
        if not os.environ.get("BENCH_PROFILE") or self.proc is None:
            return None
        spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
        if spy is None:
            say("BENCH_PROFILE: py-spy not found (pip install py-spy, or make bench BENCH_PROFILE=1)")
            return None
        form = "raw" if output.suffix == ".txt" else "flamegraph"
        return subprocess.Popen(
            [spy, "record", "-p", str(self.proc.pid), "--rate", "40", "--nonblocking", "-f", form, "-o", str(output)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @staticmethod
    def stop_profile(spy: subprocess.Popen | None) -> None:
        if spy is not None and spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()

    @property
    def rss(self) -> float | None:
        return self.rss_mib


def interrupted() -> bool:
    """The run is being stopped (Ctrl-C, SIGTERM: asyncio.run cancels it). The lab goes with it,
    so its namespaces need no tidying, and deleting 9,000 Pods would keep the user waiting."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def connect(kubeconfig: Path) -> Kube:
    """The bench's own client: a connection pool larger than the requests it keeps in flight."""
    return await Kube.connect(str(kubeconfig), connections=400)


class StatusWatch:
    """Watches a namespace's Pods; records when each is first seen with resourceClaimStatuses
    (only lines that carry the field are parsed: the bench shares the CPU with what it measures)."""

    def __init__(self, kube: Kube, namespace: str):
        self.kube, self.namespace = kube, namespace
        self.seen: dict[str, float] = {}
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        listing = await self.kube.request("GET", PODS.path(self.namespace), params=[("limit", "1")])
        self._task = asyncio.create_task(self._run(listing["metadata"]["resourceVersion"]))

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, rv: str) -> None:
        await watch_pods(self.kube, self.namespace, rv, (b'"resourceClaimStatuses"',), self._seen)

    def _seen(self, event: dict[str, Any]) -> None:
        pod = event["object"]
        if (pod.get("status") or {}).get("resourceClaimStatuses"):
            self.seen.setdefault(pod["metadata"]["name"], time.monotonic())


async def watch_pods(
    kube: Kube, namespace: str, rv: str, words: tuple[bytes, ...], handle: Callable[[dict[str, Any]], None]
) -> None:
    """A namespace's Pods watched from ``rv``, resumed after each timeout. Only lines holding one
    of ``words`` are parsed and handed to ``handle`` (the bench shares the CPU with what it
    measures); bookmarks move the resourceVersion on, an error ends the watch."""
    while True:
        params = [("watch", "1"), ("resourceVersion", rv), ("allowWatchBookmarks", "true"), ("timeoutSeconds", "600")]
        async with kube.stream(PODS.path(namespace), params, read_timeout=700) as lines:
            async for line in lines:
                if not any(word in line for word in (*words, b'"BOOKMARK"', b'"ERROR"')):
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    raise RuntimeError(f"watch of {namespace} failed: {event['object']}")
                rv = event["object"]["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    handle(event)


# -- results -----------------------------------------------------------------------------------


@dataclass
class Burst:
    controller: str  # ours, upstream 500/1000, upstream 20/30
    size: int
    noise: int
    done: int = 0
    claims: int = 0
    total: float | None = None
    p50: float | None = None
    p99: float | None = None
    throughput: float | None = None
    rss: float | None = None
    create_seconds: float | None = None
    noise_seconds: float | None = None
    note: str = ""


@dataclass
class Results:
    started: str
    command: str
    commit: str
    load_start: tuple[float, float, float]
    load_end: tuple[float, float, float] = (0.0, 0.0, 0.0)
    bursts: list[Burst] = field(default_factory=list)
    taints: list[dict[str, Any]] = field(default_factory=list)
    nodeagent: dict[str, Any] = field(default_factory=dict)
    cel: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


# -- the bench ---------------------------------------------------------------------------------


class Bench:
    def __init__(self, run_dir: Path, results: Results):
        self.run_dir = run_dir
        self.results = results
        self.lab: Lab | None = None
        self.kube: Kube | None = None
        self.serial = 0

    def start_lab(self) -> None:
        self.lab = Lab(LabOptions(name=f"bench-{self.run_dir.name}", nodes=1, run_dir=self.run_dir / "lab"), log=say)
        self.lab.start()

    def stop(self) -> None:
        if self.lab is not None:
            self.lab.stop()
            shutil.rmtree(self.lab.files.etcd_data, ignore_errors=True)

    def controller_manager(self, upstream: bool, limits: tuple[int, int]) -> None:
        say(
            f"kube-controller-manager: upstream's DRA controllers {'on' if upstream else 'off'}, "
            f"client limits {limits[0]}/{limits[1]}"
        )
        self.lab.restart_controller_manager(upstream, limits)

    def kcm_rss(self) -> float | None:
        return rss_mib(self.lab.processes()["kube-controller-manager"])

    async def namespace(self, prefix: str) -> str:
        self.serial += 1
        name = f"{prefix}-{self.serial}"
        await self.kube.create(NAMESPACES, {"metadata": {"name": name}})
        for _ in range(600):  # the ServiceAccount admission wants the default ServiceAccount
            if await self.kube.get_or_none(SERVICE_ACCOUNTS, "default", name):
                return name
            await asyncio.sleep(0.1)
        raise RuntimeError(f"no default ServiceAccount in {name}")

    async def drop_namespace(self, name: str) -> None:
        """Delete its Pods and claims at once (not through the namespace controller, whose pace
        depends on the client limits under test), then the namespace."""
        for res in (PODS, RESOURCE_CLAIMS):
            try:
                await self.kube.request("DELETE", res.path(name), params=[("gracePeriodSeconds", "0")], timeout=600)
            except (ApiError, ConnectionLost) as e:
                # A loaded API server ends a long delete with 504 and goes on deleting.
                say(f"deleting the {res.plural} of {name}: {e}; the namespace controller finishes")
        await self.kube.delete(NAMESPACES, name)
        await self.until(lambda: self._namespace_gone(name), 900, f"namespace {name} gone")

    async def _namespace_gone(self, name: str) -> bool:
        return await self.kube.get_or_none(NAMESPACES, name) is None

    async def create_all(self, namespace: str, names: list[str], build, created: dict[str, float] | None) -> float:
        inflight = env_int("BENCH_INFLIGHT", 64)
        queue = iter(names)
        start = time.monotonic()

        async def worker() -> None:
            for name in queue:
                if created is not None:
                    created[name] = time.monotonic()
                await self.kube.create(PODS, build(name), namespace)

        await asyncio.gather(*(worker() for _ in range(inflight)))
        return time.monotonic() - start

    # -- claims ----------------------------------------------------------------------------

    async def claims_part(self) -> None:
        sizes = env_ints("BENCH_SIZES", "1000,10000")
        noise = env_int("BENCH_NOISE", 8000)
        default_sizes = set(env_ints("BENCH_UPSTREAM_DEFAULT_SIZES", "1000"))
        for size in sizes:
            for noisy in (0, noise) if noise else (0,):
                await self.burst("ours", size, noisy)
                if os.environ.get("BENCH_BASELINE_SRC"):
                    await self.burst("ours (baseline)", size, noisy)
                await self.burst("upstream 500/1000", size, noisy)
                if size in default_sizes:
                    await self.burst("upstream 20/30", size, noisy)

    async def burst(self, controller: str, size: int, noise: int) -> None:
        result = Burst(controller, size, noise)
        say(f"claims: {controller}, {size} template Pods, {noise} plain Pods at the same time")
        operator = None
        if controller.startswith("ours"):
            self.controller_manager(False, LAB_LIMITS)
            baseline = os.environ.get("BENCH_BASELINE_SRC") if "baseline" in controller else None
            operator = Operator(
                "claims", self.lab.kubeconfig, self.run_dir / f"claims-{self.serial + 1}.log", src=baseline
            )
            operator.start()
        else:
            self.controller_manager(True, LAB_LIMITS if "500" in controller else DEFAULT_LIMITS)
        ns = await self.namespace("bench")
        noise_ns = await self.namespace("noise") if noise else None
        watch = StatusWatch(self.kube, ns)
        spy = creating = None
        try:
            await self.kube.create(
                RESOURCE_CLAIM_TEMPLATES,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaimTemplate",
                    "metadata": {"name": "gpu"},
                    "spec": {"spec": claim_spec()},
                },
                ns,
            )
            await watch.start()
            # A first Pod, untimed: the controller is up and has its caches.
            await self.kube.create(PODS, template_pod("warm-up"), ns)
            await self.until(lambda: "warm-up" in watch.seen, 300, "the warm-up Pod's claim status")
            created: dict[str, float] = {}
            names = [f"p-{i}" for i in range(size)]
            if operator:
                spy = operator.profile(self.run_dir / f"profile-claims-{size}-{noise}.svg")
            t0 = time.monotonic()
            tasks = [self.create_all(ns, names, template_pod, created)]
            if noise:
                tasks.append(self.create_all(noise_ns, [f"n-{i}" for i in range(noise)], plain_pod, None))
            creating = asyncio.gather(*tasks)
            last, last_change = -1, time.monotonic()
            while True:
                done = sum(1 for n in names if n in watch.seen)
                if done != last:
                    last, last_change = done, time.monotonic()
                if done == size and creating.done():
                    break
                if time.monotonic() - last_change > STALL and creating.done():
                    result.note = f"gave up: no progress for {STALL:.0f}s"
                    break
                await asyncio.sleep(0.2)
            seconds = await creating
            result.create_seconds = round(seconds[0], 1)
            if noise:
                result.noise_seconds = round(seconds[1], 1)
            result.rss = operator.rss if operator else self.kcm_rss()
            Operator.stop_profile(spy)
            latencies = [watch.seen[n] - created[n] for n in names if n in watch.seen]
            result.done = len(latencies)
            if latencies:
                result.total = round(max(watch.seen[n] for n in names if n in watch.seen) - t0, 2)
                result.p50 = round(percentile(latencies, 50), 2)
                result.p99 = round(percentile(latencies, 99), 2)
                result.throughput = round(result.done / result.total, 1)
            claims = await self.kube.list(RESOURCE_CLAIMS, ns)
            result.claims = len(claims) - 1  # the warm-up Pod's
            if result.claims != size and not result.note:
                result.note = f"{result.claims} claims for {size} Pods"
            say(
                f"claims: {controller} {size}+{noise}: {result.done} done in {result.total}s, p50 {result.p50}s, "
                f"p99 {result.p99}s, RSS {result.rss} MiB {result.note}"
            )
        finally:
            if creating is not None and not creating.done():
                creating.cancel()
                creating.add_done_callback(
                    lambda f: f.cancelled() or f.exception()
                )  # retrieved: no "never retrieved" noise
            Operator.stop_profile(spy)
            await watch.stop()
            if operator:
                operator.stop()
            if not interrupted():
                await self.drop_namespace(ns)
                if noise_ns:
                    await self.drop_namespace(noise_ns)
        self.results.bursts.append(result)

    async def until(self, check, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            await asyncio.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")

    # -- taints ----------------------------------------------------------------------------

    async def taints_part(self) -> None:
        pods = env_int("BENCH_TAINT_PODS", 1000)
        await self.kube.create(
            RESOURCE_SLICES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "bench-taints"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": NODE,
                    "pool": {"name": "bench-taints", "generation": 1, "resourceSliceCount": 1},
                    "devices": [{"name": "gpu-0"}],
                },
            },
        )
        for controller in ("ours", "upstream 500/1000"):
            await self.eviction(controller, pods)

    async def eviction(self, controller: str, count: int) -> None:
        say(f"taints: {controller}, {count} Pods behind one NoExecute DeviceTaintRule")
        operator = None
        if controller == "ours":
            self.controller_manager(False, LAB_LIMITS)
            operator = Operator("taints", self.lab.kubeconfig, self.run_dir / f"taints-{self.serial + 1}.log")
            operator.start()
        else:
            self.controller_manager(True, LAB_LIMITS)
        ns = await self.namespace("taints")
        rule = f"bench-evict-{self.serial}"
        result: dict[str, Any] = {"controller": controller, "pods": count}
        spy = None
        try:
            names = [f"t-{i}" for i in range(count)]
            sem = asyncio.Semaphore(env_int("BENCH_INFLIGHT", 64))

            async def one(name: str) -> None:
                async with sem:
                    await self.kube.create(
                        RESOURCE_CLAIMS,
                        {
                            "apiVersion": "resource.k8s.io/v1",
                            "kind": "ResourceClaim",
                            "metadata": {"name": name},
                            "spec": claim_spec(),
                        },
                        ns,
                    )
                    pod = template_pod(name)
                    pod["spec"] = {
                        **pod["spec"],
                        "nodeName": NODE,
                        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    }
                    pod["spec"].pop("schedulerName")
                    created = await self.kube.create(PODS, pod, ns)
                    claim = await self.kube.get(RESOURCE_CLAIMS, name, ns)
                    claim["status"] = {
                        "allocation": {
                            "devices": {
                                "results": [
                                    {"request": "gpu", "driver": DRIVER, "pool": "bench-taints", "device": "gpu-0"}
                                ]
                            },
                            "nodeSelector": {
                                "nodeSelectorTerms": [
                                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                                ]
                            },
                        },
                        "reservedFor": [{"resource": "pods", "name": name, "uid": created["metadata"]["uid"]}],
                    }
                    await self.kube.replace(RESOURCE_CLAIMS, claim, subresource="status")

            await asyncio.gather(*(one(n) for n in names))
            await asyncio.sleep(3)  # the controller has seen them all (both sides alike)
            if operator:
                spy = operator.profile(self.run_dir / f"profile-taints-{count}.svg")
            t0 = time.monotonic()
            await self.kube.create(
                DEVICE_TAINT_RULES,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceTaintRule",
                    "metadata": {"name": rule},
                    "spec": {
                        "deviceSelector": {"driver": DRIVER, "pool": "bench-taints", "device": "gpu-0"},
                        "taint": {"key": f"{DRIVER}/broken", "value": "true", "effect": "NoExecute"},
                    },
                },
            )
            left, last_change, seconds = count, time.monotonic(), None
            while True:
                pods = await self.kube.list(PODS, ns)
                alive = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp"))
                if alive != left:
                    left, last_change = alive, time.monotonic()
                if alive == 0:
                    seconds = round(time.monotonic() - t0, 2)
                    break
                if time.monotonic() - last_change > STALL:
                    result["note"] = f"gave up with {alive} Pods not evicted"
                    break
                await asyncio.sleep(0.2)
            result.update(seconds=seconds, evicted=count - left, rss=operator.rss if operator else self.kcm_rss())
            say(f"taints: {controller}: {result['evicted']} evicted in {seconds}s, RSS {result['rss']} MiB")
        finally:
            Operator.stop_profile(spy)
            if operator:
                operator.stop()
            if not interrupted():
                await self.kube.delete(DEVICE_TAINT_RULES, rule)
                await self.drop_namespace(ns)
        self.results.taints.append(result)

    # -- node agent ------------------------------------------------------------------------

    async def nodeagent_part(self) -> None:
        devices = env_int("BENCH_DEVICES", 1024)
        path = self.run_dir / "inventory.yaml"
        path.write_text(yaml.safe_dump(inventory(devices)))
        self.results.nodeagent = {"devices": devices}
        # Publish-only (no kubelet plugin: no gRPC loaded), then as the DaemonSet runs it: the
        # kubelet plugin's sockets and the gRPC health service served (no kubelet calls them here).
        for mode, extra in (
            ("publish", {"DRA_NODEAGENT_KUBELET_PLUGIN": "false"}),
            (
                "plugin",
                {
                    "DRA_NODEAGENT_KUBELET_PLUGIN": "true",
                    "DRA_NODEAGENT_GRPC_HEALTH_PORT": str(free_ports(1)[0]),
                    **{
                        env: str(self.run_dir / f"kubelet-{name}")
                        for env, name in (
                            ("DRA_NODEAGENT_REGISTRY_DIR", "registry"),
                            ("DRA_NODEAGENT_PLUGINS_DIR", "plugins"),
                            ("DRA_NODEAGENT_CDI_ROOT", "cdi"),
                        )
                    },
                },
            ),
        ):
            driver = f"{mode}.{AGENT_DRIVER}"
            agent = Operator(
                "nodeagent",
                self.lab.kubeconfig,
                self.run_dir / f"nodeagent-{mode}.log",
                {
                    "NODE_NAME": NODE,
                    "DRA_NODEAGENT_BACKEND": "simulated",
                    "DRA_NODEAGENT_INVENTORY": str(path),
                    "DRA_NODEAGENT_DRIVER": driver,
                    **extra,
                },
            )
            say(f"nodeagent ({mode}): {devices} simulated devices, cold start")
            agent.start(wait_live=False)
            published = None
            try:
                while time.monotonic() - agent.started_at < 120:
                    slices = await self.kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={driver}")
                    if sum(len(s["spec"].get("devices") or []) for s in slices) >= devices:
                        published = round(time.monotonic() - agent.started_at, 2)
                        break
                    await asyncio.sleep(0.05)
                await asyncio.sleep(15)
                self.results.nodeagent[mode] = {"published_seconds": published, "idle_rss": agent.rss}
                say(f"nodeagent ({mode}): published in {published}s, idle RSS {agent.rss} MiB")
            finally:
                agent.stop()

    # -- CEL -------------------------------------------------------------------------------

    def cel_part(self) -> None:
        from operators.core.dra import cel

        expression = (
            f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].model == "BenchGPU" '
            f'&& device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0'
        )
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {"model": {"string": "BenchGPU"}, "index": {"int": i}},
                "capacity": {"memory": {"value": "40Gi"}},
            }
            for i in range(1024)
        ]
        assert cel.matches(expression, DRIVER, devices[0])
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < 5:
            for device in devices:
                cel.matches(expression, DRIVER, device)
            count += len(devices)
        rate = round(count / (time.perf_counter() - start))
        self.results.cel = {"expression": expression, "evaluations": count, "per_second": rate}
        say(f"cel: {rate} device-selector evaluations per second")

    async def run(self, parts: list[str]) -> None:
        self.kube = await connect(self.lab.kubeconfig)
        try:
            await self.kube.create(
                DEVICE_CLASSES,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": CLASS},
                    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
                },
            )
            if "cel" in parts:
                self.cel_part()
            if "nodeagent" in parts:
                await self.nodeagent_part()
            if "taints" in parts:
                await self.taints_part()
            if "claims" in parts:
                await self.claims_part()
        finally:
            await self.kube.close()


# -- report ------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "n/a"


def fmt(value: Any, unit: str = "") -> str:
    return "n/a" if value is None else f"{value}{unit}"


def report(r: Results) -> str:
    lines = [
        f"### `{r.command}`",
        "",
        f"- **Date**: {r.started}; commit `{r.commit}`; {os.cpu_count()} cores shared with other sessions' "
        f"tests and builds (load average {r.load_start[0]:.1f} at the start, {r.load_end[0]:.1f} at the end), "
        f"Python {platform.python_version()}; {r.seconds / 60:.0f} min in all.",
        f"- **Our operators' code**: {os.environ.get('BENCH_OPERATOR_SRC') or 'this tree'}"
        + (f"; baseline (claims): {baseline}." if (baseline := os.environ.get("BENCH_BASELINE_SRC")) else "."),
        "- **Lab**: one kwok Node; kube-controller-manager restarted for every run with upstream's DRA "
        "controllers on (upstream) or off (ours, our operator a process of its own), at the client limits "
        "named.",
        "",
    ]
    if r.bursts:
        lines += [
            "Claims: template Pods kept Pending (schedulerName `none`), created with "
            f"{env_int('BENCH_INFLIGHT', 64)} requests in flight; latency from the create request to the "
            "first watch event with `resourceClaimStatuses`; total from the first create to the last such "
            "event; RSS of the controller's process at the end (upstream: all of kube-controller-manager).",
            "",
            "| Pods | plain Pods at the same time | controller | done | total s | Pods/s | p50 s | p99 s "
            "| RSS MiB | note |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for b in r.bursts:
            lines.append(
                f"| {b.size} | {b.noise} | {b.controller} | {b.done} | {fmt(b.total)} | {fmt(b.throughput)} "
                f"| {fmt(b.p50)} | {fmt(b.p99)} | {fmt(b.rss)} | {b.note} |"
            )
        lines += [
            "",
            "Ratios (upstream's time / ours: above 1 we are faster; RSS: ours / upstream's):",
            "",
            "| Pods | plain Pods | total vs 500/1000 | p99 vs 500/1000 | total vs 20/30 | RSS ours/upstream |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for b in r.bursts:
            if b.controller != "ours":
                continue
            by = {x.controller: x for x in r.bursts if x.size == b.size and x.noise == b.noise}
            tuned, default = by.get("upstream 500/1000"), by.get("upstream 20/30")
            lines.append(
                f"| {b.size} | {b.noise} | {ratio(tuned and tuned.total, b.total)} "
                f"| {ratio(tuned and tuned.p99, b.p99)} "
                f"| {ratio(default.total, b.total) if default else 'not run'} "
                f"| {ratio(b.rss, tuned and tuned.rss)} |"
            )
        lines.append("")
    if r.taints:
        lines += [
            "Taints: Pods bound to a kwok Node whose claims are allocated the same device; time from the "
            "NoExecute DeviceTaintRule's create until every Pod is deleting.",
            "",
            "| controller | Pods | evicted | seconds | RSS MiB | note |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for t in r.taints:
            lines.append(
                f"| {t['controller']} | {t['pods']} | {t.get('evicted')} | {fmt(t.get('seconds'))} "
                f"| {fmt(t.get('rss'))} | {t.get('note', '')} |"
            )
        if len(r.taints) == 2:
            lines.append(
                f"\nRatio upstream's time / ours: {ratio(r.taints[1].get('seconds'), r.taints[0].get('seconds'))}."
            )
        lines.append("")
    if r.nodeagent:
        n = r.nodeagent
        for mode, what in (
            ("publish", "publishing only (no kubelet plugin, no gRPC)"),
            ("plugin", "as the DaemonSet runs it (kubelet plugin sockets and gRPC health served)"),
        ):
            if m := n.get(mode):
                lines.append(
                    f"Node agent, {what}: {n['devices']} simulated devices published "
                    f"{fmt(m['published_seconds'], ' s')} after the process started (cold: interpreter "
                    f"start, imports, discovery, slices written); idle RSS {fmt(m['idle_rss'], ' MiB')} 15 s later."
                )
        lines.append("")
    if r.cel:
        lines += [
            f"CEL: {r.cel['per_second']} device-selector evaluations per second through "
            f"`operators/core/cel.matches` (`{r.cel['expression']}`, 1,024 devices, 5 s, in the bench process).",
            "",
        ]
    return "\n".join(lines)


def write_results_section(command: str, text: str) -> None:
    begin, end = f"<!-- bench: {command} -->", f"<!-- /bench: {command} -->"
    section = f"{begin}\n{text.rstrip()}\n{end}\n"
    current = RESULTS.read_text() if RESULTS.exists() else "# Benchmarks\n"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        _, tail = rest.split(end, 1)
        current = head + section.rstrip("\n") + tail
    else:
        current = current.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(current)


def main() -> int:
    parts = [p.strip() for p in os.environ.get("BENCH_PARTS", "claims,taints,nodeagent,cel").split(",") if p.strip()]
    unknown = set(parts) - {"claims", "taints", "nodeagent", "cel"}
    if unknown:
        raise SystemExit(f"bench: unknown BENCH_PARTS {sorted(unknown)}; choose from claims,taints,nodeagent,cel")
    stamp = datetime.datetime.now(datetime.UTC)
    run_dir = Path(os.environ.get("BENCH_RUN_DIR") or ROOT / ".cache" / "bench" / stamp.strftime("%Y%m%dT%H%M%SZ"))
    run_dir = run_dir.resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    src = Path(os.environ.get("BENCH_OPERATOR_SRC") or ROOT)
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    if (src / "COMMIT").exists():
        commit = (src / "COMMIT").read_text().strip()
    results = Results(
        started=stamp.strftime("%Y-%m-%d %H:%M UTC"), command=the_command(), commit=commit, load_start=os.getloadavg()
    )
    bench = Bench(run_dir, results)
    say(f"{results.command}: parts {parts}, run directory {run_dir}")
    t0 = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    interrupted = False
    try:
        if parts == ["cel"]:
            bench.cel_part()  # in process; no lab needed
        else:
            bench.start_lab()
            asyncio.run(bench.run(parts))
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: writing what was measured so far")
    except Exception as e:  # noqa: BLE001 - what was measured is still written, marked as such
        interrupted = True
        say(f"failed ({type(e).__name__}: {e}): writing what was measured so far")
    finally:
        bench.stop()
    if interrupted:
        results.command += " (interrupted)"
    results.seconds = time.monotonic() - t0
    results.load_end = os.getloadavg()
    (run_dir / "results.json").write_text(json.dumps(asdict(results), indent=2))
    text = report(results)
    write_results_section(results.command, text)
    print(text, flush=True)
    say(f"results in {RESULTS} and {run_dir}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
