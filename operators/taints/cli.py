"""``dra-operators taints ...``: the taints operator's read-only tools."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click
import yaml

from ..core.api.kube import Kube
from ..core.dra.metatime import utcnow
from ..core.logging import configure_logging
from ..core.settings import Settings
from . import decisions as d
from .preview import compute, load, prepare_rule, render


@click.group("taints")
def taints() -> None:
    """Tools of the taints operator (they only read the cluster)."""


def rule_from_file(path: str) -> d.Obj:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        documents = list(yaml.safe_load_all(text))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise click.ClickException(
            f"{path}: not a readable YAML file ({' '.join(str(e).split())}); give a file with one DeviceTaintRule"
        ) from None
    rules = [doc for doc in documents if isinstance(doc, dict) and doc.get("kind") == "DeviceTaintRule"]
    if len(rules) != 1:
        raise click.ClickException(f"{path}: expected exactly one DeviceTaintRule, found {len(rules)}")
    return rules[0]


@taints.command("preview")
@click.argument("rule")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table", show_default=True)
def preview(rule: str, output: str) -> None:
    """Print the Pods that the DeviceTaintRule RULE would evict, and when, without changing
    anything. RULE is a YAML file with a DeviceTaintRule (not created yet; '-' reads stdin) or
    the name of an existing rule. Effects other than NoExecute are previewed as NoExecute."""
    # The rule's problems are part of the output; the controller's own log lines would repeat them.
    configure_logging("ERROR", "console")
    from_file = rule == "-" or Path(rule).is_file()
    body = rule_from_file(rule) if from_file else None

    async def run() -> str:
        kube = await Kube.connect(Settings.from_env().kubeconfig)
        try:
            now = utcnow()
            controller, found = await load(kube, prepare_rule(body, now) if body else None, None if body else rule)
            result = compute(controller, found, now)
            return json.dumps(result.to_json(now), indent=2) if output == "json" else render(result, now)
        finally:
            await kube.close()

    try:
        click.echo(asyncio.run(run()))
    except LookupError as e:
        raise click.ClickException(str(e)) from None
