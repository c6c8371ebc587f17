"""``dra-operators``: the suite's command line."""

from __future__ import annotations

import importlib
import sys

import click

from .core.settings import Settings, SettingsError

OPERATORS = (
    "claims",
    "nodeagent",
    "binding",
    "taints",
    "poolstatus",
)

# Commands whose modules are imported only when they run (``module:attribute``): the lab's
# pulls in most of the suite, and an operator's process should not carry it.
LAZY_COMMANDS = {
    "lab": "operators.lab.cli:lab",
    # The kubectl plugin's commands (operators/kubectl.py), the same flags here and there.
    "explain": "operators.kubectl:explain",
    "devices": "operators.kubectl:devices",
    "preview": "operators.kubectl:preview",
    "lint": "operators.kubectl:lint",
}


class LazyGroup(click.Group):
    """click's documented pattern for lazily loaded subcommands."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, _, attribute = LAZY_COMMANDS[name].partition(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup)
@click.version_option(package_name="dra-operators")
def main() -> None:
    """Kubernetes Dynamic Resource Allocation operators, and the lab to run them on."""


@main.command("run")
@click.argument("names", nargs=-1, required=True, type=click.Choice(OPERATORS))
@click.option(
    "--liveness",
    default="http://0.0.0.0:8081/healthz",
    show_default=True,
    help="kopf liveness endpoint URL ('' to disable).",
)
def run(names: tuple[str, ...], liveness: str) -> None:
    """Run one or more operators in this process (cluster-wide), with the suite's logging."""
    import warnings

    # structlog imports rich (about 16 MiB) for its console renderer when rich is installed (the
    # kubectl plugin's tables use it); an operator's process logs JSON or plain lines and never
    # renders with it. None in sys.modules is the import system's own "not importable".
    sys.modules.setdefault("rich", None)  # type: ignore[arg-type]
    from .core.logging import configure_logging, debug_logger_names

    # Settings first: a value that cannot work ends the process before anything heavy is loaded.
    try:
        settings = Settings.from_env()
    except SettingsError as e:
        raise click.ClickException(str(e)) from None

    # Before the operators load: allocations made from here on can be traced, and the cyclic
    # collector stays out of the start-up (about a quarter of the claims operator's start-up CPU
    # at a quarter of the scale envelope, bench/RESULTS.md) until ``heap.started``.
    from .core import heap, memprofile

    heap.hold_until_started()

    memprofile.start(settings.tracemalloc)

    import kopf

    # kopf leaves its authenticator un-awaited when a start-up handler fails: noise, not news.
    warnings.filterwarnings("ignore", message="coroutine 'authenticator' was never awaited", category=RuntimeWarning)
    configure_logging(settings.log_level, settings.log_format, debug_logger_names(settings.log_debug_loggers))
    check_kubeconfig(settings.kubeconfig)
    memo = kopf.Memo()
    for name in names:
        # Registers the operator's kopf handlers: only its ``operator`` module does.
        module = importlib.import_module(f"operators.{name}.operator")
        # An operator that cannot work (no NVML, no NODE_NAME) says why and exits non-zero.
        if preflight := getattr(module, "preflight", None):
            try:
                preflight(settings, memo)
            except Exception as e:  # any preflight failure ends the process
                raise click.ClickException(f"{name}: {e}") from e
    try:
        kopf.run(clusterwide=True, standalone=True, liveness_endpoint=liveness or None, memo=memo)
    except Exception as e:
        # A start-up handler that failed for good (kopf's ActivityError): its message says what
        # is wrong and what to do; kopf's traceback would only bury it.
        if not (reasons := start_failures(e)):
            raise
        raise click.ClickException("; ".join(reasons)) from None


def check_kubeconfig(kubeconfig: str | None) -> None:
    """Load the kubeconfig once before kopf starts: a missing or broken one ends the process with
    what to fix (kopf would retry its start-up handler every minute, for ever)."""
    import asyncio
    import os

    from .core.api.diagnose import kubeconfig_problem
    from .core.api.kube import Kube

    async def load() -> None:
        kube = await Kube.connect(kubeconfig)
        await kube.close()

    try:
        asyncio.run(load())
    except Exception as e:  # noqa: BLE001 - whatever the loader raises, the message says what to fix
        missing = [p for p in (kubeconfig or "").split(os.pathsep) if p and not os.path.exists(p)]
        raise click.ClickException(kubeconfig_problem(kubeconfig, e, missing)) from None


def start_failures(error: BaseException) -> list[str]:
    """The messages of the start-up handlers behind kopf's ActivityError (none for any other error)."""
    outcomes = getattr(error, "outcomes", None)
    if not isinstance(outcomes, dict):
        return []
    return [str(outcome.exception) for outcome in outcomes.values() if getattr(outcome, "exception", None) is not None]


@main.command("demo")
@click.option("--nodes", default=2, show_default=True, help="kwok Nodes of the lab (ignored with KUBECONFIG).")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between table refreshes.")
@click.option(
    "--yes",
    is_flag=True,
    help="With KUBECONFIG: go ahead without asking (what the demo will create and run is printed first).",
)
@click.option(
    "--kcm-dra-controllers-off",
    is_flag=True,
    help="With KUBECONFIG: the cluster's kube-controller-manager runs without resourceclaim-controller and "
    "device-taint-eviction-controller, so the demo runs the claims and taints operators too.",
)
def demo(nodes: int, interval: float, yes: bool, kcm_dra_controllers_off: bool) -> None:
    """The whole suite at work (make run): lab, operators, node agents, examples, live table.
    With KUBECONFIG set: that cluster, after saying what it will do there and asking (or --yes);
    on exit it removes what it created."""
    from .demo import run_demo

    run_demo(nodes, interval, yes=yes, kcm_controllers_off=kcm_dra_controllers_off)


@main.command("settings")
def show_settings() -> None:
    """List every setting: name, environment variable, default, meaning."""
    for _name, env, default, help_ in Settings.describe():
        click.echo(f"{env:<24} {str(default):<8} {help_}")


@main.command(
    "taints", add_help_option=False, context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def taints(args: tuple[str, ...]) -> None:
    """The taints operator's tools: `taints preview FILE|NAME` (read-only)."""
    # Imported on use, like the other commands' modules.
    from .taints.cli import taints as commands

    commands.main(list(args), prog_name="dra-operators taints")


if __name__ == "__main__":
    main()
