"""The live part of the monitoring check: a lab with every operator and two simulated node agents
as processes, a workload, and a Prometheus on loopback scraping them every 2 s with the rules
(``for`` capped at 10 s, evaluated every 2 s).

The workload: Pods with claims from a ResourceClaimTemplate on both Nodes (the claims operator
creates the claims, kube-scheduler allocates, kwok runs the Pods); a fake kubelet prepares and
unprepares the claims on lab-node-0 through its node agent's DRA plugin socket (kwok Nodes have no
kubelet); a NoExecute DeviceTaintRule on one Pod's device (the taints operator evicts it); a
deleted Pod (its claim goes); a ResourcePoolStatusRequest (the poolstatus operator answers); and a
fabric device Pod whose preparation the binding operator's simulated preparer always fails (with a
5 s cool-off, so it fails again and again). Then lab-node-1's node agent is stopped.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from operators.core.api.kube import MERGE_PATCH, Kube
from operators.core.api.resources import (
    DEVICE_TAINT_RULES,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_POOL_STATUS_REQUESTS,
    SERVICE_ACCOUNTS,
)
from operators.lab import Lab, monitoring
from operators.lab.prometheus import Prometheus, QueryError
from operators.nodeagent.backends.simulated import HEALTH_ANNOTATION
from tests.integration import objects
from tests.integration.fake_kubelet import FakeKubelet
from tests.integration.operator_process import OperatorProcess
from tests.integration.waiting import wait_for
from tests.paths import ROOT

SCRAPE_INTERVAL = 2.0
MAX_FOR = 10.0
NAMESPACE = "monitoring-check"
DRIVER = "gpu.sim.dra-operators.dev"
FABRIC_DRIVER = "fabric-gpu.example.com"
INVENTORY = ROOT / "kustomize" / "overlays" / "simulated-devices" / "inventory.yaml"
PODS_PER_NODE = 3
LAB_NODES = ("lab-node-0", "lab-node-1")
STOPPED_NODE = "lab-node-1"


@dataclass
class Outcome:
    """What one expression gave: ``error`` (it did not parse or evaluate), ``series`` (how many),
    and for an alert the selectors that returned nothing."""

    expression: monitoring.Expression
    error: str | None = None
    series: int = 0
    empty_selectors: list[str] = field(default_factory=list)

    @property
    def has_data(self) -> bool:
        if self.error:
            return False
        if self.expression.kind == "alert":
            return not self.empty_selectors
        return self.series > 0


@dataclass
class Results:
    outcomes: list[Outcome] = field(default_factory=list)
    targets_down: list[str] = field(default_factory=list)
    agent_down_alerts: list[dict[str, Any]] = field(default_factory=list)
    agent_down_error: str | None = None
    preparer_alerts: list[dict[str, Any]] = field(default_factory=list)
    preparer_error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)

    def report(self) -> str:
        lines = ["# monitoring check", ""]
        lines += [f"- {what}: {seconds:.0f}s" for what, seconds in self.timings.items()]
        lines += ["", "## expressions", ""]
        for o in self.outcomes:
            if o.error:
                state = f"ERROR {o.error}"
            elif o.has_data:
                state = f"ok ({o.series} series)"
            elif o.empty_selectors:
                state = f"NO DATA from {', '.join(o.empty_selectors)}"
            else:
                state = "NO SERIES"
            lines.append(f"- {o.expression.label}: {state}\n  `{o.expression.expr}`")
        lines += ["", "## alerts", ""]
        lines.append(
            f"- node agent of {STOPPED_NODE} stopped: {_alerts(self.agent_down_alerts, self.agent_down_error)}"
        )
        lines.append(f"- failing preparer: {_alerts(self.preparer_alerts, self.preparer_error)}")
        if self.targets_down:
            lines.append(f"- targets not up before the faults: {', '.join(self.targets_down)}")
        return "\n".join(lines) + "\n"


def _alerts(alerts: list[dict[str, Any]], error: str | None) -> str:
    if error:
        return f"NONE ({error})"
    return ", ".join(f"{a['labels'].get('alertname')} {_labels(a['labels'])}" for a in alerts)


def _labels(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "alertname") + "}"


class Scenario:
    def __init__(self, lab: Lab, kube: Kube, binaries: Path, work: Path, groups: dict[str, Any]):
        self.lab, self.kube, self.binaries, self.work, self.groups = lab, kube, binaries, work, groups
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.operators: dict[str, OperatorProcess] = {}
        self.agents: dict[str, OperatorProcess] = {}
        self.plugin_root = Path(tempfile.mkdtemp(prefix="mon-", dir="/tmp"))  # socket paths must be short
        self.kubelet = FakeKubelet(self.plugin_root / "registry")
        self.prometheus = Prometheus(binaries, work / "prometheus")

    # -- processes ------------------------------------------------------------------------------

    def start_processes(self) -> None:
        binding_env = {
            "DRA_BINDING_DRIVERS": FABRIC_DRIVER,
            "DRA_BINDING_PREPARER": "simulated",
            "DRA_BINDING_PREPARER_CONFIG": json.dumps({"delay": 1, "fail": ["gpu-0", "gpu-1"]}),
            "DRA_BINDING_COOL_OFF": "5",
        }
        # As deployed (the kustomize base): leader election on, so the leader series exist.
        election = {
            "DRA_LEADER_ELECTION": "true",
            "DRA_LEADER_ELECTION_NAMESPACE": "default",
            "DRA_LEADER_ELECTION_LEASE_DURATION": "4",
        }
        for name, env in (("claims", {}), ("taints", {}), ("binding", binding_env), ("poolstatus", {})):
            self.operators[name] = OperatorProcess([name], self.lab.kubeconfig, self.logs, election | env)
        for node in LAB_NODES:
            env = {
                "NODE_NAME": node,
                "DRA_NODEAGENT_BACKEND": "simulated",
                "DRA_NODEAGENT_INVENTORY": str(INVENTORY),
                "DRA_NODEAGENT_SYNC_DELAY": "1",
            }
            if node == LAB_NODES[0]:
                env |= {
                    "DRA_NODEAGENT_REGISTRY_DIR": str(self.plugin_root / "registry"),
                    "DRA_NODEAGENT_PLUGINS_DIR": str(self.plugin_root / "plugins"),
                    "DRA_NODEAGENT_CDI_ROOT": str(self.plugin_root / "cdi"),
                }
            else:
                env["DRA_NODEAGENT_KUBELET_PLUGIN"] = "false"
            agent = OperatorProcess(["nodeagent"], self.lab.kubeconfig, self.logs, env)
            agent.log = self.logs / f"nodeagent-{node}.log"
            self.agents[node] = agent
        for process in [*self.operators.values(), *self.agents.values()]:
            process.start()

    def targets(self) -> list[monitoring.Target]:
        found = [
            monitoring.Target(name, f"dra-{name}-0", f"127.0.0.1:{p.metrics_port}")
            for name, p in self.operators.items()
        ]
        found += [
            monitoring.Target("nodeagent", f"dra-nodeagent-{node}", f"127.0.0.1:{p.metrics_port}")
            for node, p in self.agents.items()
        ]
        return found

    def start_prometheus(self) -> None:
        directory = self.prometheus.directory
        directory.mkdir(parents=True, exist_ok=True)
        rules = monitoring.shortened(self.groups, SCRAPE_INTERVAL, MAX_FOR)
        (directory / "rules.yaml").write_text(json.dumps(rules, indent=1))
        config = monitoring.prometheus_config(self.targets(), SCRAPE_INTERVAL, str(directory / "rules.yaml"))
        self.prometheus.start(config)

    async def stop(self) -> None:
        self.prometheus.stop()
        await self.kubelet.close()
        for process in [*self.agents.values(), *self.operators.values()]:
            process.stop()

    # -- workload -------------------------------------------------------------------------------

    def kubectl(self, *args: str) -> None:
        result = subprocess.run(
            [str(self.lab.bin_dir / "kubectl"), f"--kubeconfig={self.lab.kubeconfig}", *args],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"

    async def workload(self) -> None:
        self.kubectl("apply", "--server-side", "-f", str(ROOT / "config" / "deviceclasses"))
        await self.kube.create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        await wait_for(
            lambda: self.kube.get_or_none(SERVICE_ACCOUNTS, "default", NAMESPACE), timeout=30, what="ServiceAccount"
        )
        await self.kube.create(RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("one-gpu", DRIVER), NAMESPACE)
        for node in LAB_NODES:
            for i in range(PODS_PER_NODE):
                pod = objects.pod(f"{node}-{i}", {"gpu": {"resourceClaimTemplateName": "one-gpu"}})
                pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
                await self.kube.create(PODS, pod, NAMESPACE)
        await wait_for(self._all_running, timeout=120, what="every Pod Running with its claim allocated")
        # Prepared and unprepared by a fake kubelet on lab-node-0 (kwok Nodes have none).
        await self.kubelet.register()
        claims = await self._claims_on(LAB_NODES[0])
        response = await self.kubelet.prepare(claims)
        assert all(not r.error for r in response.claims.values()), response
        await self.kubelet.unprepare(claims[:1])
        # An eviction: NoExecute on the device of lab-node-1's first Pod.
        [allocated] = (await self._claims_on(LAB_NODES[1], full=True))[:1]
        result = allocated["status"]["allocation"]["devices"]["results"][0]
        await self.kube.create(
            DEVICE_TAINT_RULES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": "monitoring-check-evict"},
                "spec": {
                    "deviceSelector": {"driver": result["driver"], "pool": result["pool"], "device": result["device"]},
                    "taint": {"key": "dra-operators.dev/monitoring-check", "value": "broken", "effect": "NoExecute"},
                },
            },
        )
        # A health event (the simulated backend reads failing devices from a Node annotation):
        # an XID on gpu-3 of lab-node-0 (the check does not care whether a Pod holds it).
        await self.kube.request(
            "PATCH",
            NODES.path(name=LAB_NODES[0]),
            content_type=MERGE_PATCH,
            body={"metadata": {"annotations": {HEALTH_ANNOTATION: "gpu-3=xid:79"}}},
        )
        # A Pod deleted: the claims operator deletes its claim.
        await self.kube.delete(PODS, f"{LAB_NODES[0]}-{PODS_PER_NODE - 1}", NAMESPACE)
        await self.kube.create(
            RESOURCE_POOL_STATUS_REQUESTS,
            {
                "apiVersion": RESOURCE_POOL_STATUS_REQUESTS.group_version,
                "kind": "ResourcePoolStatusRequest",
                "metadata": {"name": "monitoring-check"},
                "spec": {"driver": DRIVER},
            },
        )
        # A fabric device whose preparation fails (binding operator, simulated preparer). The
        # example's slice skips node operations (alpha DRAOptionalNodeOperations): kube-scheduler
        # allocates such devices only on Nodes that declare the feature, as a 1.37 kubelet with the
        # gate does (allocator_experimental.go, allocateDevice); kwok's Nodes declare nothing.
        for node in LAB_NODES:
            await self.kube.request(
                "PATCH",
                NODES.path(name=node, subresource="status"),
                content_type=MERGE_PATCH,
                body={"status": {"declaredFeatures": ["DRAOptionalNodeOperations"]}},
            )
        self.kubectl("apply", "-n", NAMESPACE, "-f", str(ROOT / "config" / "examples" / "binding-conditions"))

    async def _all_running(self) -> bool:
        pods = await self.kube.list(PODS, NAMESPACE)
        claims = await self.kube.list(RESOURCE_CLAIMS, NAMESPACE)
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        return (
            len(pods) == len(LAB_NODES) * PODS_PER_NODE
            and all(p["status"].get("phase") == "Running" for p in pods)
            and len(allocated) == len(pods)
        )

    async def _claims_on(self, node: str, full: bool = False) -> list[dict[str, Any]]:
        pods = {
            p["metadata"]["name"] for p in await self.kube.list(PODS, NAMESPACE) if p["spec"].get("nodeName") == node
        }
        claims = [
            c
            for c in await self.kube.list(RESOURCE_CLAIMS, NAMESPACE)
            if {r["name"] for r in (c.get("status") or {}).get("reservedFor") or []} & pods
        ]
        claims.sort(key=lambda c: c["metadata"]["name"])
        return claims if full else [{"metadata": c["metadata"]} for c in claims]

    # -- evaluation -----------------------------------------------------------------------------

    def evaluate(self, expression: monitoring.Expression) -> Outcome:
        outcome = Outcome(expression)
        try:
            outcome.series = len(self.prometheus.query(expression.expr))
            if expression.kind == "alert":
                for selector in monitoring.selectors(self.prometheus.parse(expression.expr)):
                    if not self.prometheus.query(selector):
                        outcome.empty_selectors.append(selector)
        except QueryError as e:
            outcome.error = str(e)
        return outcome

    async def evaluate_all(self, expressions: list[monitoring.Expression], timeout: float) -> list[Outcome]:
        """Every expression until each has data or ``timeout`` passed (rates need two scrapes, the
        workload's counters move over a minute); an error is final."""
        outcomes = {e: self.evaluate(e) for e in expressions}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            waiting = [e for e, o in outcomes.items() if not o.error and not o.has_data]
            if not waiting:
                break
            await asyncio.sleep(SCRAPE_INTERVAL)
            for e in waiting:
                outcomes[e] = self.evaluate(e)
        return list(outcomes.values())

    def targets_down(self) -> list[str]:
        return sorted(
            f"{t['labels'].get('job')} {t['labels'].get('pod')} ({t.get('lastError') or t.get('health')})"
            for t in self.prometheus.targets()
            if t.get("health") != "up"
        )

    def firing(self) -> list[dict[str, Any]]:
        return [a for a in self.prometheus.alerts() if a.get("state") == "firing"]

    def alert_exprs(self) -> dict[str, str]:
        return {r["alert"]: str(r["expr"]) for g in self.groups["groups"] for r in g.get("rules") or [] if "alert" in r}

    async def wait_alerts(
        self, matches: Any, timeout: float, before: list[dict[str, Any]] | None = None
    ) -> list[dict[str, Any]]:
        """The firing alerts ``matches(alert, rule expression)`` picks, once there is one; none of
        those firing ``before`` (the same name and labels) counts."""
        exprs = self.alert_exprs()
        old = {json.dumps(a["labels"], sort_keys=True) for a in before or []}

        async def found() -> list[dict[str, Any]]:
            return [
                a
                for a in self.firing()
                if json.dumps(a["labels"], sort_keys=True) not in old
                and matches(a, exprs.get(a["labels"].get("alertname"), ""))
            ]

        return await wait_for(found, timeout=timeout, interval=SCRAPE_INTERVAL, what="alert firing")
