"""``kubectl-dra``: the kubectl plugin (``kubectl dra explain|devices|preview|lint``), with kubectl's
usual flags. kubectl finds any ``kubectl-<name>`` executable on PATH and runs it with the
arguments after ``dra``; flags given before ``dra`` are kubectl's own and are not passed on, so
they go after the subcommand: ``kubectl dra explain pod/NAME -n NS --kubeconfig FILE``.

The same subcommands serve ``dra-operators`` (operators/cli.py).
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import click
import yaml

OUTPUTS = ("table", "wide", "json", "yaml")


def kubectl_options(func: Callable) -> Callable:
    """--kubeconfig, --context, -n/--namespace, -A/--all-namespaces, -o/--output."""
    for option in reversed(
        (
            click.option(
                "--kubeconfig",
                envvar=None,
                default=None,
                help="Path to the kubeconfig file (default: KUBECONFIG, ~/.kube/config).",
            ),
            click.option("--context", default=None, help="The kubeconfig context to use."),
            click.option("-n", "--namespace", default=None, help="Namespace (default: the context's, else 'default')."),
            click.option("-A", "--all-namespaces", is_flag=True, help="All namespaces."),
            click.option(
                "-o",
                "--output",
                type=click.Choice(OUTPUTS),
                default="table",
                show_default=True,
                help="table, wide (more columns and detail), json or yaml.",
            ),
        )
    ):
        func = option(func)
    return func


def dump(data: Any, output: str) -> str:
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False).rstrip()
    return json.dumps(data, indent=2, default=str)


def run_with_kube(kubeconfig: str | None, context: str | None, work: Callable[[Any], Awaitable[Any]]) -> Any:
    from .core.api.kube import Kube

    async def run() -> Any:
        kube = await Kube.connect(kubeconfig, context)
        try:
            return await work(kube)
        finally:
            await kube.close()

    try:
        return asyncio.run(run())
    except KeyboardInterrupt:
        return None
    except click.ClickException:
        raise
    except Exception as e:  # noqa: BLE001 - one line, as kubectl reports a failed request
        from .core.api.diagnose import kubeconfig_problem
        from .core.api.kubeconfig import KubeconfigError

        if isinstance(e, KubeconfigError):
            raise click.ClickException(kubeconfig_problem(kubeconfig or "~/.kube/config", e, [])) from None
        raise click.ClickException(f"{type(e).__name__}: {e}") from None


def resolve_namespace(kubeconfig: str | None, context: str | None, namespace: str | None) -> str:
    from .core.api.kubeconfig import context_namespace

    return namespace or context_namespace(kubeconfig, context)


# -- explain -----------------------------------------------------------------------------------

POD_KINDS = ("pod", "pods", "po")
CLAIM_KINDS = ("resourceclaim", "resourceclaims", "claim", "claims", "rc")


def parse_target(target: str) -> tuple[str, str]:
    kind, sep, name = target.partition("/")
    if not sep:
        return "pod", target
    kind = kind.lower().split(".")[0]
    if kind in POD_KINDS:
        return "pod", name
    if kind in CLAIM_KINDS:
        return "claim", name
    raise click.BadParameter(f"{target!r}: explain takes pod/NAME, resourceclaim/NAME or a Pod's NAME")


@click.command("explain")
@click.argument("targets", nargs=-1)
@kubectl_options
def explain(
    targets: tuple[str, ...],
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    output: str,
) -> None:
    """Why a Pod is pending and which devices its claims got: every claim's story and, for a
    claim not allocated, each request checked against every device as kube-scheduler checks it.

    TARGETS: pod/NAME (or NAME), resourceclaim/NAME; none: every Pending Pod with claims in
    the namespace (-A: in all namespaces). Exit code 0 when every target is allocatable or
    allocated, 1 when one is not.
    """
    from .explain import fetch, render, story

    parsed = [parse_target(t) for t in targets]
    ns = None if all_namespaces and not parsed else resolve_namespace(kubeconfig, context, namespace)

    async def work(kube) -> list[dict]:
        world = await fetch.world(kube, ns, parsed)
        reports = []
        if not parsed:
            for pod in sorted(world.pods, key=lambda p: (p["metadata"]["namespace"], p["metadata"]["name"])):
                if (pod.get("spec") or {}).get("resourceClaims") and (pod.get("status") or {}).get("phase") in (
                    None,
                    "Pending",
                ):
                    reports.append(story.explain_pod(world, pod))
            return reports
        for kind, name in parsed:
            if kind == "pod":
                found = world.find("pods", ns, name)
                if found is None:
                    raise click.ClickException(f'pods "{name}" not found in namespace {ns}')
                reports.append(story.explain_pod(world, found))
            else:
                claim = world.find("claims", ns, name)
                if claim is None:
                    raise click.ClickException(f'resourceclaims.resource.k8s.io "{name}" not found in namespace {ns}')
                reports.append(story.explain_claim(world, claim))
        return reports

    reports = run_with_kube(kubeconfig, context, work)
    if reports is None:
        return
    if output in ("json", "yaml"):
        click.echo(dump(reports[0] if len(parsed) == 1 else {"items": reports}, output))
    else:
        texts = [
            render.render_pod(r, output == "wide") if "pod" in r else render.render_claim(r, output == "wide")
            for r in reports
        ]
        click.echo("\n\n".join(texts) if texts else "No Pending Pod with ResourceClaims.")
    outcomes = [_outcome(r) for r in reports]
    if False in outcomes:
        sys.exit(1)
    if None in outcomes:
        sys.exit(2)  # a feature explain does not model decides: neither yes nor no


def _outcome(report: dict) -> bool | None:
    """True: allocatable (or not pending); False: not; None: unknown (not modelled)."""
    if "pod" in report:
        return report["verdict"]["allocatable"]
    story = report["claim"]
    if story["state"] != "pending":
        return True
    return (story.get("verdict") or {"allocatable": False})["allocatable"]


# -- devices -----------------------------------------------------------------------------------


@click.command("devices")
@kubectl_options
@click.option("--watch", "-w", is_flag=True, help="Refresh in place every --interval seconds until Ctrl-C.")
@click.option("--interval", default=2.0, show_default=True)
def devices(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    output: str,
    watch: bool,
    interval: float,
) -> None:
    """Which Pod holds which device on which node, with claim state (binding while the
    scheduler waits for binding conditions), and the free devices per node. All namespaces
    unless -n is given; across all, only the Pods of namespaces with ResourceClaims or templates
    are read (no other Pod can hold a device). -o wide adds device attributes (model, uuid)."""
    from . import devices as table

    ns = None if all_namespaces or not namespace else namespace
    wide = output == "wide"

    async def once(kube) -> tuple[list, dict]:
        pods, claims, slices = await table.fetch(kube, ns)
        return table.build_rows(pods, claims, slices, ns), table.free_capacity(slices, claims)

    if not watch:
        rows, free = run_with_kube(kubeconfig, context, once)
        if output in ("json", "yaml"):
            click.echo(dump(table.to_json(rows, free), output))
        else:
            click.echo(table.render(rows, free, wide))
        return

    async def live(kube) -> None:
        from rich.console import Console
        from rich.live import Live

        gc.enable()  # a long-running view: cycles must not pile up
        console = Console()
        rows, free = await once(kube)
        with Live(
            table.rich_table(rows, free, wide), console=console, auto_refresh=False, screen=False, transient=False
        ) as view:
            while True:
                await asyncio.sleep(interval)
                rows, free = await once(kube)
                view.update(table.rich_table(rows, free, wide), refresh=True)

    run_with_kube(kubeconfig, context, live)


# -- preview -----------------------------------------------------------------------------------


@click.command("preview")
@click.argument("rule")
@kubectl_options
def preview(
    rule: str, kubeconfig: str | None, context: str | None, namespace: str | None, all_namespaces: bool, output: str
) -> None:
    """The Pods the DeviceTaintRule RULE would evict, and when, without changing anything.
    RULE: a YAML file with a DeviceTaintRule ('-' reads stdin) or an existing rule's name.
    (-n/-A are accepted for kubectl's sake: rules are cluster-scoped and the preview covers
    every namespace.)"""
    from .core.dra.metatime import utcnow
    from .core.logging import configure_logging
    from .taints.cli import rule_from_file
    from .taints.preview import compute, load, prepare_rule, render

    configure_logging("ERROR", "console")
    from pathlib import Path

    body = rule_from_file(rule) if rule == "-" or Path(rule).is_file() else None

    async def work(kube) -> str:
        now = utcnow()
        try:
            controller, found = await load(kube, prepare_rule(body, now) if body else None, None if body else rule)
        except LookupError as e:
            raise click.ClickException(str(e)) from None
        result = compute(controller, found, now)
        return dump(result.to_json(now), output) if output in ("json", "yaml") else render(result, now)

    text = run_with_kube(kubeconfig, context, work)
    if text is not None:
        click.echo(text)


# -- lint --------------------------------------------------------------------------------------


@click.command("lint")
@click.argument("files", nargs=-1, required=True)
@kubectl_options
@click.option("--offline", is_flag=True, help="Do not ask a cluster: only the rules that need no cluster.")
def lint(
    files: tuple[str, ...],
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    output: str,
    offline: bool,
) -> None:
    """Check DRA YAML before applying it: API versions and field layouts, unqualified attributes
    in CEL and constraints, sharedCounters beside devices, claim templates in Pod specs or
    missing, selectors that match no published device, then the API server's own server-side
    apply dry run. FILES: files or directories ('-' reads stdin). Exit code 1 on any error.
    Without a reachable cluster (or with --offline) only the offline rules run."""
    from .core.logging import configure_logging
    from .lint import run

    configure_logging("ERROR", "console")
    paths = list(files)
    result, unreachable = None, ""
    if not offline:
        started = False

        async def work(kube):
            nonlocal started, unreachable
            started = True
            try:
                await kube.request("GET", "/version", retry=False, timeout=10)
            except Exception as e:  # noqa: BLE001 - any failure to reach the server: offline rules
                unreachable = f"{type(e).__name__}: {e}"
                return None
            return await run.against(kube, paths, resolve_namespace(kubeconfig, context, namespace))

        try:
            result = run_with_kube(kubeconfig, context, work)
        except click.ClickException as e:
            if started:
                raise  # the cluster answered and the lint failed: say so, do not guess offline
            unreachable = e.message
    if result is None:
        if unreachable:
            click.echo(f"no cluster ({unreachable}): offline rules only", err=True)
        result = run.offline(paths, namespace or "default")
    from .lint.report import render, to_json

    if output in ("json", "yaml"):
        click.echo(dump(to_json(result.findings, result.loaded.errors, result.mode), output))
    else:
        click.echo(
            render(result.findings, result.files, len(result.loaded.documents), result.loaded.errors, result.mode)
        )
    if result.failed:
        sys.exit(1)


@click.group("kubectl-dra", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dra-operators")
def main() -> None:
    """Dynamic Resource Allocation from kubectl: explain, devices, preview, lint."""
    # A command runs once and exits: the cyclic collector only slows it (about 40% of the CPU of
    # `devices` at a quarter of the scale envelope, bench/RESULTS.md). `--watch` turns it back on.
    gc.disable()


main.add_command(explain)
main.add_command(devices)
main.add_command(preview)
main.add_command(lint)

if __name__ == "__main__":
    main()
