"""``dra-operators demo`` (``make run``): the whole suite on a fresh machine.

Starts a lab (or uses ``$KUBECONFIG``), installs the DeviceClasses, runs the claims, taints and
binding operators and a simulated node agent per Node, applies the examples, and shows the live
device table until Ctrl-C, which stops everything it started.

As root with the real-node binaries built (``make lab-build-node``), the lab also has a real Node
(kubelet + containerd): its node agent is kubelet's DRA plugin, the basic-template example runs
there too (namespace ``dra-demo-real``), and the table is followed by what its containers printed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import yaml

from .core.api.kube import Kube
from .core.api.resources import NAMESPACES, NODES, PODS
from .devices import snapshot
from .lab import Lab, LabOptions, paths, process

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = (
    "basic-template",
    "shared-claim",
    "cel-selector",
    "prioritized-list",
    "consumable-capacity",
    "admin-access",
    "taints-tolerations",
    "binding-conditions",
)
DEMO_NAMESPACE = "dra-demo"
REAL_NAMESPACE = "dra-demo-real"
INVENTORY = ROOT / "kustomize" / "overlays" / "simulated-devices" / "inventory.yaml"


def _say(message: str) -> None:
    click.echo(f"demo: {message}", err=True)


class Demo:
    def __init__(self, nodes: int, logs: Path):
        self.nodes = nodes
        self.logs = logs
        self.lab: Lab | None = None
        self.procs: list[subprocess.Popen] = []
        self.kubeconfig = os.environ.get("KUBECONFIG")
        self.kubectl = ["kubectl"]

    def start_cluster(self) -> None:
        if self.kubeconfig:
            _say(f"using the cluster of KUBECONFIG={self.kubeconfig}")
            return
        real = int(os.geteuid() == 0 and not paths.missing_real_node_binaries(paths.bin_dir()))
        if not real:
            _say("no real node (needs root and `make lab-build-node`); kwok Nodes only")
        self.lab = Lab(LabOptions(name="demo", nodes=self.nodes, real_nodes=real), log=_say)
        self.lab.start()
        self.kubeconfig = str(self.lab.kubeconfig)
        self.kubectl = [str(self.lab.bin_dir / "kubectl")]

    def kubectl_apply(self, *args: str) -> None:
        result = subprocess.run(
            [*self.kubectl, f"--kubeconfig={self.kubeconfig}", "apply", *args], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise click.ClickException(f"kubectl apply {' '.join(args)}: {result.stderr.strip()}")

    def run_operator(self, name: str, log_name: str, **env: str) -> None:
        if self.kubeconfig is None:
            raise RuntimeError("run_operator before start_cluster")
        environment = {
            **os.environ,
            "KUBECONFIG": self.kubeconfig,
            "DRA_LOG_FORMAT": "console",
            "DRA_METRICS_PORT": "0",
            **env,
        }
        log = self.logs / f"{log_name}.log"
        self.procs.append(
            process.spawn([sys.executable, "-m", "operators.cli", "run", name, "--liveness", ""], log, env=environment)
        )
        _say(f"started {log_name} (log {log})")

    def agent_env(self, node: str) -> dict[str, str]:
        """kwok Nodes: no kubelet, so no kubelet plugin. A real Node: kubelet's directories."""
        if self.lab is None or node not in [n.name for n in self.lab.real_nodes]:
            return {"DRA_NODEAGENT_KUBELET_PLUGIN": "false"}
        files = self.lab.real_node(node)
        return {
            "DRA_NODEAGENT_REGISTRY_DIR": str(files.plugins_registry),
            "DRA_NODEAGENT_PLUGINS_DIR": str(files.plugins),
            "DRA_NODEAGENT_CDI_ROOT": str(files.cdi),
        }

    def apply_on_real_nodes(self, example: str) -> None:
        """The example again, in REAL_NAMESPACE, with its Pods on the first real Node."""
        if self.lab is None or not self.lab.real_nodes:
            return
        documents = list(yaml.safe_load_all((ROOT / "config" / "examples" / example / "example.yaml").read_text()))
        for document in documents:
            if document and document.get("kind") == "Pod":
                document["spec"]["nodeSelector"] = {"kubernetes.io/hostname": self.lab.real_nodes[0].name}
        result = subprocess.run(
            [*self.kubectl, f"--kubeconfig={self.kubeconfig}", "apply", "-n", REAL_NAMESPACE, "-f", "-"],
            input=yaml.safe_dump_all(documents),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise click.ClickException(f"kubectl apply {example} on the real node: {result.stderr.strip()}")

    def printed_on_real_nodes(self, pods: list[dict]) -> str:
        """What the containers on real Nodes printed (kubectl logs: kube-apiserver -> kubelet)."""
        real = {n.name for n in self.lab.real_nodes} if self.lab is not None else set()
        lines = []
        for pod in pods:
            if pod.get("spec", {}).get("nodeName") not in real:
                continue
            meta = pod["metadata"]
            logs = subprocess.run(
                [*self.kubectl, f"--kubeconfig={self.kubeconfig}", "logs", "-n", meta["namespace"], meta["name"]],
                capture_output=True,
                text=True,
            ).stdout.strip()
            lines.append(
                f"{meta['namespace']}/{meta['name']} on {pod['spec']['nodeName']} "
                f"({pod.get('status', {}).get('phase')}) printed:"
            )
            lines.extend(f"  {line}" for line in (logs.splitlines() or ["(nothing yet)"]))
        return "\n".join(lines)

    async def nodes_to_serve(self) -> list[str]:
        async with await Kube.connect(self.kubeconfig) as kube:
            return sorted(n["metadata"]["name"] for n in await kube.list(NODES))

    async def ensure_namespace(self) -> None:
        async with await Kube.connect(self.kubeconfig) as kube:
            for name in (DEMO_NAMESPACE, REAL_NAMESPACE):
                if await kube.get_or_none(NAMESPACES, name) is None:
                    await kube.create(NAMESPACES, {"metadata": {"name": name}})

    async def table(self, interval: float, started: float) -> None:
        async with await Kube.connect(self.kubeconfig) as kube:
            announced = False
            while True:
                text, rows = await snapshot(kube)
                click.clear()
                click.echo(text)
                printed = self.printed_on_real_nodes(await kube.list(PODS))
                if printed:
                    click.echo("\n" + printed)
                click.echo(f"\n(refreshing every {interval:.0f}s; Ctrl-C stops the demo)")
                if not announced and rows and all(r.phase == "Running" and r.state == "reserved" for r in rows):
                    _say(f"every example Pod runs and holds its device, {time.monotonic() - started:.0f}s after start")
                    announced = True
                await asyncio.sleep(interval)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            process.terminate(proc.pid, timeout=10)
        if self.lab is not None:
            self.lab.stop()


def run_demo(nodes: int, interval: float) -> None:
    started = time.monotonic()
    logs = Path(tempfile.mkdtemp(prefix="dra-demo-"))
    demo = Demo(nodes, logs)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        demo.start_cluster()
        demo.kubectl_apply("--server-side", "-f", str(ROOT / "config" / "deviceclasses"))
        for operator in ("claims", "taints", "binding"):
            demo.run_operator(
                operator, operator, DRA_BINDING_DRIVERS="gpu.sim.dra-operators.dev,fabric-gpu.example.com"
            )
        for node in asyncio.run(demo.nodes_to_serve()):
            demo.run_operator(
                "nodeagent",
                f"nodeagent-{node}",
                NODE_NAME=node,
                DRA_NODEAGENT_BACKEND="simulated",
                DRA_NODEAGENT_INVENTORY=str(INVENTORY),
                **demo.agent_env(node),
            )
        asyncio.run(demo.ensure_namespace())
        for example in EXAMPLES:
            path = str(ROOT / "config" / "examples" / example)
            demo.kubectl_apply("-f", path) if example == "admin-access" else demo.kubectl_apply(
                "-n", DEMO_NAMESPACE, "-f", path
            )
        demo.apply_on_real_nodes("basic-template")
        _say(f"examples applied in namespace {DEMO_NAMESPACE} (and dra-example-admin); logs in {logs}")
        asyncio.run(demo.table(interval, started))
    except KeyboardInterrupt:
        pass
    finally:
        _say("stopping")
        demo.stop()
        _say("stopped")
