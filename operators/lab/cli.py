"""``dra-operators lab``: up, down, status, env, and the faults: restart, compact, net."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click
import yaml

from . import control, netfault, paths, process, realnode
from .cluster import COMPONENTS, IDENTITIES, Lab, LabOptions, LabState
from .supervisor import options_to_json, run


def _state_or_exit(name: str, run_dir: Path | None) -> LabState:
    directory = Path(run_dir) if run_dir else paths.run_dir(name)
    state = LabState.load(directory)
    if state is None:
        raise click.ClickException(
            f"no lab named {name!r} (nothing in {directory}); start one with `dra-operators lab up`"
        )
    return state


name_option = click.option(
    "--name", default="default", show_default=True, help="Lab name; labs with different names run side by side."
)
run_dir_option = click.option(
    "--run-dir", type=click.Path(path_type=Path), help="State and logs directory (default: <lab home>/runs/<name>)."
)


@click.group("lab")
def lab() -> None:
    """A real local control plane (etcd, kube-apiserver, kube-scheduler,
    kube-controller-manager, kwok) on 127.0.0.1, with toxiproxy in front of kube-apiserver
    for network faults (restart, compact and net inject faults)."""


@lab.command("up")
@name_option
@run_dir_option
@click.option("--nodes", default=1, show_default=True, help="kwok Nodes to create (lab-node-0, ...).")
@click.option(
    "--real-nodes",
    default=0,
    show_default=True,
    help="Real Nodes to add (lab-real-0, ...): a kubelet and a containerd each, with runc, "
    "a bridge pod network and local busybox images (needs `make lab-build-node` and root).",
)
@click.option(
    "--upstream-controllers",
    is_flag=True,
    help="Run upstream's resourceclaim, device-taint-eviction and resourcepoolstatusrequest controllers in "
    "kube-controller-manager (the reference to compare the operators against).",
)
@click.option(
    "--scheduler-config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A KubeSchedulerConfiguration file (for example DynamicResources bindingTimeout).",
)
@click.option(
    "--deploy",
    is_flag=True,
    help="Then deploy the project onto the real nodes as on kind: build and import the image "
    "(make image), apply config/deviceclasses and the kind overlay, wait for the rollout.",
)
@click.option(
    "--kubernetes",
    metavar="MINOR",
    help="An older Kubernetes minor to run (1.34, 1.35 or 1.36; built by "
    "`lab/build.sh --kubernetes MINOR`, with --node for real nodes); default: $DRA_LAB_KUBERNETES, "
    "else the newest (lab/versions.env).",
)
@click.option("--foreground", is_flag=True, help="Stay attached; Ctrl-C tears the lab down.")
@click.option("--timeout", default=180.0, show_default=True, help="Seconds to wait for readiness.")
def up(
    name: str,
    run_dir: Path | None,
    nodes: int,
    real_nodes: int,
    upstream_controllers: bool,
    scheduler_config: Path | None,
    deploy: bool,
    kubernetes: str | None,
    foreground: bool,
    timeout: float,
) -> None:
    """Start a lab and wait until Pods can be scheduled on its Nodes."""
    if deploy and not real_nodes:
        raise click.UsageError("--deploy runs the operators as Pods, which needs real nodes: add --real-nodes 2")
    options = LabOptions(
        name=name,
        nodes=nodes,
        upstream_controllers=upstream_controllers,
        real_nodes=real_nodes,
        run_dir=run_dir,
        startup_timeout=timeout,
        scheduler_config=yaml.safe_load(scheduler_config.read_text()) if scheduler_config else None,
        bin_dir=paths.bin_dir(kubernetes) if kubernetes else None,
    )
    release = paths.release(kubernetes)
    build = f"lab/build.sh --kubernetes {release}" if release else "make lab-build"
    missing = paths.missing_binaries(options.resolved_bin_dir())
    if missing:
        raise click.ClickException(
            f"lab binaries missing in {options.resolved_bin_dir()}: {', '.join(missing)}. Run `{build}` first."
        )
    missing = paths.missing_real_node_binaries(options.resolved_bin_dir()) if real_nodes else []
    if missing:
        build = f"lab/build.sh --node --kubernetes {release}" if release else "make lab-build-node"
        raise click.ClickException(
            f"real-node binaries missing in {options.resolved_bin_dir()}: {', '.join(missing)}. Run `{build}` first."
        )
    if foreground:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: stop.set())
        lab_ = Lab(options, log=lambda m: click.echo(m, err=True))
        threading.Thread(target=_announce, args=(lab_, stop, deploy, options), daemon=True).start()
        sys.exit(run(lab_, stop))
    state = _up_detached(options, timeout)
    if deploy:
        _deploy(state, options)
    click.echo(f"export KUBECONFIG={state.kubeconfig}")


def _deploy(state: LabState, options: LabOptions) -> None:
    from .deploy import DeployError, Target
    from .deploy import deploy as deploy_onto

    try:
        deploy_onto(Target.of(state, options.resolved_bin_dir()), progress=lambda m: click.echo(m, err=True))
    except (DeployError, OSError, subprocess.CalledProcessError) as e:
        raise click.ClickException(
            f"deploying onto lab {options.name!r} failed (the lab keeps running; "
            f"`dra-operators lab down` stops it): {e}"
        ) from None


def _announce(lab_: Lab, stop: threading.Event, deploy: bool, options: LabOptions) -> None:
    while not stop.is_set():
        state = LabState.load(lab_.run_dir)
        if state and state.ready:
            if deploy:
                try:
                    _deploy(state, options)
                except click.ClickException as e:
                    e.show()
                    stop.set()
                    return
            click.echo(f"export KUBECONFIG={state.kubeconfig}")
            click.echo("lab: Ctrl-C to stop", err=True)
            return
        time.sleep(0.3)


def _up_detached(options: LabOptions, timeout: float) -> LabState:
    run_dir = options.resolved_run_dir()
    existing = LabState.load(run_dir)
    if existing and existing.supervisor_pid and process.alive(existing.supervisor_pid):
        raise click.ClickException(
            f"lab {options.name!r} is already running (pid {existing.supervisor_pid}); "
            "`dra-operators lab down` first, or use --name"
        )
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "lab.json").unlink(missing_ok=True)
    log = run_dir / "logs" / "supervisor.log"
    log.write_text("")
    supervisor = process.spawn(
        [sys.executable, "-m", "operators.lab.supervisor", "--options", options_to_json(options)],
        log,
        env=dict(os.environ),
        tie_to_parent=False,
    )
    shown = 0
    deadline = time.monotonic() + timeout + 30
    try:
        while True:
            lines = log.read_text(errors="replace").splitlines()
            for line in lines[shown:]:
                click.echo(line, err=True)
            shown = len(lines)
            state = LabState.load(run_dir)
            if state and state.ready:
                break
            if supervisor.poll() is not None:
                raise click.ClickException(f"the lab did not start; see {log} and {run_dir / 'logs'}")
            if time.monotonic() > deadline:
                process.terminate(supervisor.pid)
                raise click.ClickException(f"the lab was not ready within {timeout:.0f}s; see {run_dir / 'logs'}")
            time.sleep(0.3)
    except KeyboardInterrupt:
        process.terminate(supervisor.pid, timeout=30)
        raise
    return state


@lab.command("down")
@name_option
@run_dir_option
def down(name: str, run_dir: Path | None) -> None:
    """Stop a lab and every process it started."""
    state = _state_or_exit(name, run_dir)
    was_running = [p for p in [state.supervisor_pid, *state.pids.values()] if p and process.alive(p)]
    if state.supervisor_pid and process.alive(state.supervisor_pid):
        process.terminate(state.supervisor_pid, timeout=30)
    for pid in state.pids.values():  # anything the supervisor could not stop
        if process.alive(pid):
            process.terminate(pid)
    left = [str(p) for p in [state.supervisor_pid, *state.pids.values()] if p and process.alive(p)]
    # Containers, shims, mounts and bridges of real nodes (done already unless the supervisor died).
    problems = [
        f"{raw['name']}: {problem}"
        for raw in state.real_nodes
        for problem in realnode.cleanup(realnode.RealNodeInfo(**raw), paths.bin_dir() / "runc")
    ]
    if left or problems:
        raise click.ClickException(
            "; ".join(([f"processes still running: {' '.join(left)}"] if left else []) + problems)
        )
    if was_running:
        click.echo(f"lab {name!r} stopped", err=True)
    else:  # a stale state: say so, the lab the user means may live in another --run-dir
        click.echo(f"lab {name!r} was not running (state in {state.run_dir}); cleaned up what it left", err=True)


@lab.command("status")
@name_option
@run_dir_option
def status(name: str, run_dir: Path | None) -> None:
    """Show each component's process and the API server's readiness."""
    state = _state_or_exit(name, run_dir)
    healthy = True
    for component, pid in sorted(state.pids.items()):
        up_ = process.alive(pid)
        healthy &= up_
        click.echo(f"{component:<26} pid {pid:<8} {'running' if up_ else 'NOT RUNNING'}")
    if not state.pids:
        healthy = False
        click.echo("no component running")
    kubectl = paths.bin_dir() / "kubectl"
    ready = (
        subprocess.run(
            [str(kubectl), f"--kubeconfig={state.kubeconfig}", "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        if kubectl.exists()
        else None
    )
    readyz = ready.stdout.strip() if ready and ready.returncode == 0 else "unreachable"
    healthy &= readyz == "ok"
    click.echo(f"{'apiserver /readyz':<26} {readyz}  ({state.server})")
    if state.toxiproxy_api and state.ports.get("apiserver_proxy"):
        try:
            proxy = netfault.NetProxy(state.ports["toxiproxy"], state.ports["apiserver_proxy"]).state()
            click.echo(f"{'apiserver via toxiproxy':<26} https://{netfault.describe(proxy)}")
        except netfault.NetFaultError as e:
            healthy = False
            click.echo(f"{'apiserver via toxiproxy':<26} unreachable ({e})")
    click.echo(f"{'DRA controllers':<26} {'upstream' if state.upstream_controllers else 'off (ours run instead)'}")
    for raw in state.real_nodes:
        info = realnode.RealNodeInfo(**raw)
        files = info.files()
        node_ready = "unknown"
        if kubectl.exists():
            got = subprocess.run(
                [
                    str(kubectl),
                    f"--kubeconfig={state.kubeconfig}",
                    "get",
                    "node",
                    info.name,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            node_ready = {"True": "Ready", "False": "NotReady"}.get(got.stdout.strip(), "unknown")
        healthy &= node_ready == "Ready"
        click.echo(
            f"{'node ' + info.name:<26} {node_ready}  kubelet {info.node_ip}:{info.kubelet_port}, pods {info.subnet} "
            f"on {info.bridge}"
        )
        click.echo(f"{'':<26} root {files.root}  (plugins_registry, plugins, cdi, pods, containerd.sock)")
    click.echo(f"export KUBECONFIG={state.kubeconfig}")
    if not healthy:
        sys.exit(1)


@lab.command("env")
@name_option
@run_dir_option
@click.option(
    "--via-proxy",
    is_flag=True,
    help="The kubeconfig whose server is toxiproxy in front of kube-apiserver: clients "
    "using it suffer `lab net` faults.",
)
@click.option(
    "--identity",
    type=click.Choice(list(IDENTITIES)),
    default="admin",
    show_default=True,
    help="Whose client certificate the kubeconfig holds.",
)
def env(name: str, run_dir: Path | None, via_proxy: bool, identity: str) -> None:
    """Print the shell line that points kubectl and the operators at the lab."""
    state = _state_or_exit(name, run_dir)
    if not via_proxy and identity == "admin":
        click.echo(f"export KUBECONFIG={state.kubeconfig}")
        return
    suffix = "via-proxy.kubeconfig" if via_proxy else "kubeconfig"
    if via_proxy and not state.proxy_server:
        raise click.ClickException("this lab has no proxy (started by an older dra-operators)")
    click.echo(f"export KUBECONFIG={Path(state.run_dir) / f'{identity}.{suffix}'}")


# -- faults -------------------------------------------------------------------------------------


def _ask(name: str, run_dir: Path | None, body: dict, timeout: float = 300.0):
    """Have the process that owns the lab do it (see operators/lab/control.py for why)."""
    state = _state_or_exit(name, run_dir)
    try:
        return control.request(Path(state.run_dir), body, timeout=timeout)
    except (control.ControlError, OSError) as e:
        raise click.ClickException(str(e)) from e


@lab.command("restart")
@click.argument("component", metavar=f"[{'|'.join(COMPONENTS)}|kubelet-<node>|containerd-<node>]")
@name_option
@run_dir_option
@click.option(
    "--downtime",
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Keep the component down this long before starting it again.",
)
@click.option("--kill", is_flag=True, help="SIGKILL instead of SIGTERM (a crash: no graceful shutdown).")
def restart(component: str, name: str, run_dir: Path | None, downtime: float, kill: bool) -> None:
    """Restart one component on the same ports with the same data; return when it is ready.
    A real node's kubelet or containerd is ``kubelet-lab-real-0``, ``containerd-lab-real-0``.

    etcd keeps its data directory. The lab's owning process does the restart, so the new
    process dies with the lab like the others."""
    result = _ask(name, run_dir, {"op": "restart", "component": component, "downtime": downtime, "kill": kill})
    click.echo(
        f"lab: {component} restarted in {result['seconds']}s (pid {result['old_pid']} -> {result['pid']})", err=True
    )


@lab.command("compact")
@name_option
@run_dir_option
@click.option(
    "--keep-apiserver",
    is_flag=True,
    help="Only compact etcd; kube-apiserver's watch cache then still serves old resourceVersions "
    "(see docs/development/fault-injection.md).",
)
def compact(name: str, run_dir: Path | None, keep_apiserver: bool) -> None:
    """Compact etcd at its current revision and restart kube-apiserver: every watch resuming
    from an older resourceVersion gets 410 Gone and must relist. Prints the revision."""
    revision = _ask(name, run_dir, {"op": "compact", "restart_apiserver": not keep_apiserver})
    click.echo(revision)


@lab.group("net")
def net() -> None:
    """Network faults between clients using `lab env --via-proxy` and kube-apiserver (toxiproxy).

    Faults with --for undo themselves after that many seconds, even after this command exits."""


def _net(ctx_name: str, run_dir: Path | None, verb: str, **args) -> None:
    result = _ask(ctx_name, run_dir, {"op": "net", "verb": verb, **args}, timeout=60)
    line = netfault.describe(result["proxy"])
    if result.get("pending"):
        line += f" (timed: {', '.join(result['pending'])})"
    click.echo(line)


for_option = click.option(
    "--for",
    "seconds",
    type=float,
    metavar="SECONDS",
    help="Undo after this many seconds (default: until `lab net heal`).",
)


@net.command("cut")
@name_option
@run_dir_option
def net_cut(name: str, run_dir: Path | None) -> None:
    """Close every open connection through the proxy; new ones work at once."""
    _net(name, run_dir, "cut")


@net.command("refuse")
@name_option
@run_dir_option
@for_option
def net_refuse(name: str, run_dir: Path | None, seconds: float | None) -> None:
    """Refuse new connections (open ones are closed)."""
    _net(name, run_dir, "refuse", seconds=seconds)


@net.command("black-hole")
@name_option
@run_dir_option
@for_option
def net_black_hole(name: str, run_dir: Path | None, seconds: float | None) -> None:
    """Accept connections but forward nothing either way; on heal they are closed."""
    _net(name, run_dir, "black-hole", seconds=seconds)


@net.command("latency")
@click.argument("ms", type=int)
@click.option("--jitter", default=0, show_default=True, metavar="MS")
@name_option
@run_dir_option
@for_option
def net_latency(ms: int, jitter: int, name: str, run_dir: Path | None, seconds: float | None) -> None:
    """Hold every answer MS milliseconds (± --jitter) before passing it on."""
    _net(name, run_dir, "latency", ms=ms, jitter=jitter, seconds=seconds)


@net.command("heal")
@name_option
@run_dir_option
def net_heal(name: str, run_dir: Path | None) -> None:
    """Undo every network fault."""
    _net(name, run_dir, "heal")


@net.command("status")
@name_option
@run_dir_option
def net_status(name: str, run_dir: Path | None) -> None:
    """The proxy's address and its faults."""
    _net(name, run_dir, "status")
