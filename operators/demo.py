"""``dra-operators demo`` (``make run``): the whole suite on a fresh machine.

Starts a lab (or uses ``$KUBECONFIG``), installs the DeviceClasses, runs the claims, taints and
binding operators and a simulated node agent per Node, applies the examples, and shows the live
device table until Ctrl-C, which stops everything it started.

As root with the real-node binaries built (``make lab-build-node``), the lab also has a real Node
(kubelet + containerd): its node agent is kubelet's DRA plugin, the basic-template example runs
there too (namespace ``dra-demo-real``), and the table is followed by what its containers printed.

With ``$KUBECONFIG`` set the demo works on that cluster, which it does not own: ``build_plan``
decides what it creates and runs there (no claims and taints operators beside
kube-controller-manager's own controllers unless told they are off, no DeviceClass or node
agent where one is there already), ``describe_plan`` says it, ``confirmation`` decides whether
to go ahead, ask or refuse, and on exit the demo removes what it created (``removal_order``).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import click
import yaml

from .core.api.kube import ApiError, Kube
from .core.api.resources import DEVICE_CLASSES, NAMESPACES, NODES, PODS, RESOURCE_SLICES, Resource
from .devices import snapshot
from .lab import Lab, LabOptions, paths, process
from .lab.components import REPLACED_CONTROLLERS

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
DEVICE_CLASS_DIR = ROOT / "config" / "deviceclasses"
SIMULATED_DRIVER = "gpu.sim.dra-operators.dev"
BINDING_DRIVERS = f"{SIMULATED_DRIVER},fabric-gpu.example.com"
# The operators that replace a kube-controller-manager controller, and which one.
REPLACES = {"claims": "resourceclaim-controller", "taints": "device-taint-eviction-controller"}
KCM_FLAG = "--controllers=" + ",".join(["*", *(f"-{c}" for c in REPLACED_CONTROLLERS)])
YES_OPTION = "--yes"
KCM_OPTION = "--kcm-dra-controllers-off"
# Seconds to wait on exit for the demo's namespaces to go while the operators still run (the
# binding operator removes its finalizers from the claims in them).
NAMESPACE_GRACE = 60.0


def _say(message: str) -> None:
    click.echo(f"demo: {message}", err=True)


# -- decisions (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """What the demo learnt of a KUBECONFIG cluster before changing anything in it."""

    context: str
    server: str
    nodes: tuple[str, ...] = ()
    device_classes: frozenset[str] = frozenset()  # of ours, those that exist already
    namespaces: frozenset[str] = frozenset()  # of ours, those that exist already
    nodes_with_slices: frozenset[str] = frozenset()  # with a ResourceSlice of SIMULATED_DRIVER already


@dataclass(frozen=True)
class Plan:
    """What the demo creates and runs, and what it removes on exit."""

    lab: bool
    operators: tuple[str, ...]  # control-plane operators, run as processes here
    skipped: tuple[tuple[str, str], ...] = ()  # (operator or node agent, why not)
    agent_nodes: tuple[str, ...] | None = None  # None: every Node of the lab
    device_classes: tuple[str, ...] = ()  # names of config/deviceclasses/ to create
    namespaces: tuple[str, ...] = ()  # to create
    examples: tuple[str, ...] = EXAMPLES
    remove_on_exit: bool = False
    context: str = ""
    server: str = ""


def build_plan(cluster: Cluster | None, ours: Iterable[str], kcm_controllers_off: bool) -> Plan:
    """The lab (``cluster`` None) gets everything, and goes away with the demo. A KUBECONFIG
    cluster gets the claims and taints operators only when the user says its
    kube-controller-manager runs without their upstream counterparts (two controllers would
    create each claim twice and evict twice); no DeviceClass of ``ours`` that it has already
    (the demo would take its fields over, then delete it); no node agent on a Node that publishes
    the simulated driver already (two agents would rewrite each other's slices); and everything
    created is removed on exit."""
    if cluster is None:
        return Plan(
            lab=True,
            operators=("claims", "taints", "binding"),
            device_classes=tuple(sorted(ours)),
            namespaces=(DEMO_NAMESPACE, REAL_NAMESPACE),
        )
    operators: list[str] = []
    skipped: list[tuple[str, str]] = []
    for name, upstream in REPLACES.items():
        if kcm_controllers_off:
            operators.append(name)
        else:
            skipped.append(
                (name, f"kube-controller-manager's {upstream} does this job there (pass {KCM_OPTION} if it is off)")
            )
    operators.append("binding")
    agents = tuple(n for n in cluster.nodes if n not in cluster.nodes_with_slices)
    skipped.extend(
        (f"nodeagent on {n}", f"it has ResourceSlices of {SIMULATED_DRIVER} already")
        for n in cluster.nodes
        if n in cluster.nodes_with_slices
    )
    return Plan(
        lab=False,
        operators=tuple(operators),
        skipped=tuple(skipped),
        agent_nodes=agents,
        device_classes=tuple(sorted(set(ours) - cluster.device_classes)),
        namespaces=tuple(n for n in (DEMO_NAMESPACE,) if n not in cluster.namespaces),
        remove_on_exit=True,
        context=cluster.context,
        server=cluster.server,
    )


def describe_plan(plan: Plan) -> str:
    """What the demo will do to a KUBECONFIG cluster, in the words shown before it asks."""
    agents = ", ".join(plan.agent_nodes or ()) or "none"
    operators = f"the {', '.join(plan.operators)} operator{'s' if len(plan.operators) > 1 else ''}"
    lines = [
        f"The demo will use the cluster of KUBECONFIG context {plan.context!r} (server {plan.server}):",
        f"- run here, against it: {operators}, and a simulated node agent "
        f"publishing ResourceSlices of {SIMULATED_DRIVER} for each of these Nodes: {agents}",
    ]
    lines.extend(f"- not run: {name}: {why}" for name, why in plan.skipped)
    if plan.device_classes:
        lines.append(f"- create the DeviceClasses {', '.join(plan.device_classes)}")
    if plan.namespaces:
        lines.append(f"- create the namespace {', '.join(plan.namespaces)}")
    lines.append(
        f"- apply the examples {', '.join(plan.examples)} from config/examples/ (namespace {DEMO_NAMESPACE}; "
        "admin-access brings the namespace dra-example-admin, taints-tolerations a DeviceTaintRule, "
        "binding-conditions a DeviceClass and a ResourceSlice)"
    )
    lines.append(
        "- on Ctrl-C or exit: delete the examples' objects, the namespace and DeviceClasses it created, and "
        "the ResourceSlices its node agents published, and stop the operators"
    )
    if "claims" in plan.operators:
        lines.append(
            f"The cluster's kube-controller-manager must run without {' and '.join(REPLACES.values())} "
            f"({KCM_OPTION} says it does: {KCM_FLAG})."
        )
    else:
        lines.append(
            "Claims from templates and evictions for device taints are left to the cluster's "
            f"kube-controller-manager; if it runs with {KCM_FLAG} (kind with config/kind/cluster.yaml), pass "
            f"{KCM_OPTION} or the examples' Pods stay pending."
        )
    return "\n".join(lines)


Decision = Literal["go", "ask", "refuse"]


def confirmation(plan: Plan, yes: bool, interactive: bool) -> Decision:
    """The lab is the demo's own; another cluster needs ``--yes`` or, at a terminal, a yes."""
    if plan.lab or yes:
        return "go"
    return "ask" if interactive else "refuse"


def refusal() -> str:
    return (
        f"not changing a KUBECONFIG cluster without consent: pass {YES_OPTION} "
        f"(make run DEMO_ARGS={YES_OPTION}), or run it at a terminal to be asked, or unset KUBECONFIG for a lab"
    )


def current_context(documents: Iterable[Mapping[str, Any] | None]) -> tuple[str, str]:
    """(context, server) that kubectl uses for a KUBECONFIG list: the first file's
    current-context, its cluster's server; ``("?", "?")`` for what cannot be told."""
    merged: dict[str, dict[str, Any]] = {"contexts": {}, "clusters": {}}
    current = ""
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        current = current or str(document.get("current-context") or "")
        for kind in merged:
            for entry in document.get(kind) or []:
                if isinstance(entry, Mapping) and "name" in entry:
                    merged[kind].setdefault(str(entry["name"]), entry.get(kind[:-1]) or {})
    cluster = merged["clusters"].get(str(merged["contexts"].get(current, {}).get("cluster")), {})
    return current or "?", str(cluster.get("server") or "?")


@dataclass(frozen=True)
class Removal:
    """One step of the clean-up, in order."""

    what: str  # "examples", "namespaces", "operators", "slices", "deviceclasses"
    names: tuple[str, ...] = ()


def removal_order(plan: Plan) -> list[Removal]:
    """The examples first and then the namespaces, while the operators still run (the binding
    operator takes its finalizers off the claims); then the operators; then the slices their
    node agents published (an agent leaves them when it stops); then the DeviceClasses, which
    nothing uses any more. The lab: only the operators (the lab goes, and everything with it)."""
    if not plan.remove_on_exit:
        return [Removal("operators")]
    steps = [Removal("examples", tuple(reversed(plan.examples)))]
    if plan.namespaces:
        steps.append(Removal("namespaces", plan.namespaces))
    steps.append(Removal("operators"))
    if plan.agent_nodes:
        steps.append(Removal("slices", plan.agent_nodes))
    if plan.device_classes:
        steps.append(Removal("deviceclasses", plan.device_classes))
    return steps


def nodes_publishing(slices: Iterable[Mapping[str, Any]]) -> set[str]:
    """The Nodes with a slice of the simulated driver (another node agent of ours publishes there)."""
    return {
        str(s["spec"]["nodeName"])
        for s in slices
        if s.get("spec", {}).get("driver") == SIMULATED_DRIVER and s.get("spec", {}).get("nodeName")
    }


def slices_to_remove(slices: Iterable[Mapping[str, Any]], nodes: Iterable[str]) -> list[str]:
    """The simulated driver's slices on the Nodes whose node agent the demo ran."""
    served = set(nodes)
    return sorted(
        s["metadata"]["name"]
        for s in slices
        if s.get("spec", {}).get("driver") == SIMULATED_DRIVER and s.get("spec", {}).get("nodeName") in served
    )


def device_classes(directory: Path = DEVICE_CLASS_DIR) -> dict[str, dict[str, Any]]:
    """The DeviceClasses of config/deviceclasses/ by name (a file may hold several)."""
    return {
        d["metadata"]["name"]: d
        for path in sorted(directory.glob("*.yaml"))
        for d in yaml.safe_load_all(path.read_text())
        if d and d.get("kind") == "DeviceClass"
    }


# -- I/O -------------------------------------------------------------------------------------


class Demo:
    def __init__(self, nodes: int, logs: Path):
        self.nodes = nodes
        self.logs = logs
        self.lab: Lab | None = None
        self.procs: list[subprocess.Popen] = []
        self.kubeconfig = os.environ.get("KUBECONFIG")
        self.kubectl = ["kubectl"]
        # What it set out to create, by removal step (Removal.what): on exit only these go, so
        # that a demo stopped early deletes nothing it did not apply.
        self.created: dict[str, set[str]] = {"examples": set(), "namespaces": set(), "deviceclasses": set()}

    def start_cluster(self) -> None:
        if self.kubeconfig:
            return
        real = int(os.geteuid() == 0 and not paths.missing_real_node_binaries(paths.bin_dir()))
        if not real:
            _say("no real node (needs root and `make lab-build-node`); kwok Nodes only")
        self.lab = Lab(LabOptions(name="demo", nodes=self.nodes, real_nodes=real), log=_say)
        self.lab.start()
        self.kubeconfig = str(self.lab.kubeconfig)
        self.kubectl = [str(self.lab.bin_dir / "kubectl")]

    async def connect(self) -> Kube:
        """The API client, for ``async with`` (the unit tests give it the fake API)."""
        return await Kube.connect(self.kubeconfig)

    def context_and_server(self) -> tuple[str, str]:
        documents = []
        for path in (self.kubeconfig or "").split(os.pathsep):
            try:
                documents.append(yaml.safe_load(Path(path).expanduser().read_text()))
            except (OSError, yaml.YAMLError):
                continue
        return current_context(documents)

    async def survey(self, ours: Iterable[str]) -> Cluster:
        """Reads (never writes) what build_plan needs to know of a KUBECONFIG cluster."""
        context, server = self.context_and_server()
        async with await self.connect() as kube:
            nodes = sorted(n["metadata"]["name"] for n in await kube.list(NODES))
            classes = {n for n in ours if await kube.get_or_none(DEVICE_CLASSES, n) is not None}
            namespaces = {n for n in (DEMO_NAMESPACE,) if await kube.get_or_none(NAMESPACES, n) is not None}
            slices = await kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={SIMULATED_DRIVER}")
        return Cluster(
            context=context,
            server=server,
            nodes=tuple(nodes),
            device_classes=frozenset(classes),
            namespaces=frozenset(namespaces),
            nodes_with_slices=frozenset(nodes_publishing(slices)),
        )

    def kubectl_run(self, verb: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.kubectl, f"--kubeconfig={self.kubeconfig}", verb, *args], capture_output=True, text=True
        )

    def kubectl_apply(self, *args: str) -> None:
        result = self.kubectl_run("apply", *args)
        if result.returncode != 0:
            raise click.ClickException(f"kubectl apply {' '.join(args)}: {result.stderr.strip()}")

    def apply_example(self, example: str) -> None:
        self.created["examples"].add(example)
        self.kubectl_apply(*self.example_args(example))

    def apply_device_classes(self, names: Iterable[str], classes: Mapping[str, dict[str, Any]]) -> None:
        """Only the named ones: one that exists already is not touched, even when its file holds
        a missing one."""
        names = list(names)
        if not names:
            return
        self.created["deviceclasses"].update(names)
        result = subprocess.run(
            [*self.kubectl, f"--kubeconfig={self.kubeconfig}", "apply", "--server-side", "-f", "-"],
            input=yaml.safe_dump_all([classes[n] for n in names]),
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise click.ClickException(
                f"kubectl apply of the DeviceClasses {', '.join(names)}: {result.stderr.strip()}"
            )

    @staticmethod
    def example_args(example: str) -> list[str]:
        path = str(ROOT / "config" / "examples" / example)
        return ["-f", path] if example == "admin-access" else ["-n", DEMO_NAMESPACE, "-f", path]

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
        async with await self.connect() as kube:
            return sorted(n["metadata"]["name"] for n in await kube.list(NODES))

    async def ensure_namespaces(self, names: Iterable[str]) -> None:
        async with await self.connect() as kube:
            for name in names:
                if await kube.get_or_none(NAMESPACES, name) is None:
                    self.created["namespaces"].add(name)
                    await kube.create(NAMESPACES, {"metadata": {"name": name}})

    async def table(self, interval: float, started: float) -> None:
        async with await self.connect() as kube:
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

    def stop_operators(self) -> None:
        for proc in reversed(self.procs):
            process.terminate(proc.pid, timeout=10)
        self.procs.clear()

    def stop(self, plan: Plan | None) -> None:
        """Stops what it started; on a KUBECONFIG cluster also removes what it created, each
        step on its own (one that fails is reported, the next still runs)."""
        if plan is None or not plan.remove_on_exit:
            self.stop_operators()
            if self.lab is not None:
                self.lab.stop()
            return
        for step in removal_order(plan):
            try:
                removed = self.remove(step)
            except Exception as e:  # noqa: BLE001 - say what is left and go on with the rest
                _say(f"could not remove the {step.what} ({e}); remove them by hand")
                continue
            for line in removed:
                _say(f"removed {line}")

    def remove(self, step: Removal) -> list[str]:
        if step.what == "operators":
            self.stop_operators()
            return []
        if step.what in self.created:
            step = Removal(step.what, tuple(n for n in step.names if n in self.created[step.what]))
        if step.what == "examples":
            removed = []
            for example in step.names:
                result = self.kubectl_run(
                    "delete", "--ignore-not-found", "--wait=false", "-o", "name", *self.example_args(example)
                )
                if result.returncode != 0:
                    raise RuntimeError(f"kubectl delete {example}: {result.stderr.strip()}")
                removed.extend(result.stdout.split())
            return removed
        return asyncio.run(self.remove_objects(step))

    async def remove_objects(self, step: Removal) -> list[str]:
        async with await self.connect() as kube:

            async def delete(res: Resource, names: Iterable[str], kind: str) -> list[str]:
                deleted = []
                for name in names:
                    try:
                        await kube.delete(res, name)
                    except ApiError as e:
                        if not e.not_found:  # never created (the demo stopped early), or gone already
                            raise
                        continue
                    deleted.append(f"{kind}/{name}")
                return deleted

            if step.what == "namespaces":
                removed = await delete(NAMESPACES, step.names, "namespace")
                deadline = time.monotonic() + NAMESPACE_GRACE
                while time.monotonic() < deadline:
                    if all([await kube.get_or_none(NAMESPACES, n) is None for n in step.names]):
                        break
                    await asyncio.sleep(1)
                else:
                    _say(f"namespaces {', '.join(step.names)} still terminating after {NAMESPACE_GRACE:.0f}s")
                return removed
            if step.what == "slices":
                found = await kube.list(RESOURCE_SLICES, field_selector=f"spec.driver={SIMULATED_DRIVER}")
                return await delete(RESOURCE_SLICES, slices_to_remove(found, step.names), "resourceslice")
            if step.what == "deviceclasses":
                return await delete(DEVICE_CLASSES, step.names, "deviceclass")
        raise ValueError(f"unknown removal step {step.what!r}")


def _consent(plan: Plan, yes: bool) -> None:
    decision = confirmation(plan, yes, interactive=sys.stdin.isatty())
    if decision == "go":
        return
    if decision == "refuse":
        raise click.ClickException(refusal())
    if not click.confirm("Go ahead?", default=False, err=True):
        raise click.ClickException("nothing done")


def run_demo(nodes: int, interval: float, yes: bool = False, kcm_controllers_off: bool = False) -> None:
    started = time.monotonic()
    demo = Demo(nodes, Path(tempfile.mkdtemp(prefix="dra-demo-")))
    classes = device_classes()
    plan: Plan | None = None
    if demo.kubeconfig:
        if shutil.which("kubectl") is None:
            raise click.ClickException(
                "the demo on a KUBECONFIG cluster applies the examples with kubectl: put it on PATH"
            )
        try:
            cluster = asyncio.run(demo.survey(classes))
        except Exception as e:  # noqa: BLE001 - the client's message says what failed; nothing was changed
            raise click.ClickException(f"cannot read the cluster of KUBECONFIG={demo.kubeconfig}: {e}") from None
        plan = build_plan(cluster, classes, kcm_controllers_off)
        click.echo(describe_plan(plan), err=True)
        _consent(plan, yes)
    elif kcm_controllers_off:
        _say(f"{KCM_OPTION} is for a KUBECONFIG cluster; the lab's kube-controller-manager runs without them")
    # Ctrl-C and SIGTERM stop the demo and clean up, also when started from a script in the
    # background, which starts it with SIGINT ignored (POSIX: asynchronous lists without job control).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        demo.start_cluster()
        if plan is None:
            plan = build_plan(None, classes, kcm_controllers_off)
            demo.kubectl_apply("--server-side", "-f", str(DEVICE_CLASS_DIR))
        else:
            demo.apply_device_classes(plan.device_classes, classes)
        for operator in plan.operators:
            demo.run_operator(operator, operator, DRA_BINDING_DRIVERS=BINDING_DRIVERS)
        agent_nodes = plan.agent_nodes if plan.agent_nodes is not None else asyncio.run(demo.nodes_to_serve())
        for node in agent_nodes:
            demo.run_operator(
                "nodeagent",
                f"nodeagent-{node}",
                NODE_NAME=node,
                DRA_NODEAGENT_BACKEND="simulated",
                DRA_NODEAGENT_INVENTORY=str(INVENTORY),
                **demo.agent_env(node),
            )
        asyncio.run(demo.ensure_namespaces(plan.namespaces))
        for example in plan.examples:
            demo.apply_example(example)
        demo.apply_on_real_nodes("basic-template")
        _say(f"examples applied in namespace {DEMO_NAMESPACE} (and dra-example-admin); logs in {demo.logs}")
        asyncio.run(demo.table(interval, started))
    except KeyboardInterrupt:
        pass
    finally:
        removing = plan is not None and plan.remove_on_exit
        _say("stopping" + (": removing what the demo created (Ctrl-C again leaves the rest)" if removing else ""))
        try:
            demo.stop(plan)
        except KeyboardInterrupt:
            demo.stop_operators()
            _say("interrupted: what was not removed yet stays in the cluster")
        _say("stopped")
