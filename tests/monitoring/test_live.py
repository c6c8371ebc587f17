"""The monitoring check against a live lab (tests/monitoring/live.py says what runs): every
expression of every alert rule and dashboard panel parses and returns data through Prometheus'
HTTP API, and the alerts of a stopped node agent and of a failing preparer fire.

The report (every expression with its outcome, the alerts that fired, the timings) is printed and
written to build/monitoring-check.md.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.labs import client_of, running_lab
from tests.paths import ROOT

from .conftest import Sources
from .live import FABRIC_DRIVER, STOPPED_NODE, Results, Scenario

# Seconds to wait for every expression to return data, and for each alert to fire.
EVALUATION_TIMEOUT = 150.0
ALERT_TIMEOUT = 120.0
REPORT = ROOT / "build" / "monitoring-check.md"

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def results(sources: Sources, binaries: Path, tmp_path_factory: pytest.TempPathFactory) -> Results:
    expressions = sources.expressions()
    out = Results()
    work = tmp_path_factory.mktemp("monitoring")
    started = time.monotonic()
    with running_lab("-monitoring", work / "lab", nodes=2) as lab:
        out.timings["lab started"] = time.monotonic() - started
        async with client_of(lab) as kube:
            scenario = Scenario(lab, kube, binaries, work, sources.groups())
            try:
                scenario.start_processes()
                scenario.start_prometheus()
                await scenario.workload()
                out.timings["workload applied"] = time.monotonic() - started
                out.outcomes = await scenario.evaluate_all(expressions, EVALUATION_TIMEOUT)
                out.targets_down = scenario.targets_down()
                out.timings["expressions evaluated"] = time.monotonic() - started
                stopped = scenario.agents[STOPPED_NODE]
                pod, address = f"dra-nodeagent-{STOPPED_NODE}", f"127.0.0.1:{stopped.metrics_port}"
                before = scenario.firing()
                stopped.stop()
                try:
                    out.agent_down_alerts = await scenario.wait_alerts(
                        # The alert for this: no other alert (a device health alert that
                        # happens to fire meanwhile) may stand in for it.
                        lambda a, expr: (
                            a["labels"].get("alertname") == "DRANodeAgentDown"
                            and (a["labels"].get("pod") == pod or a["labels"].get("instance") == address)
                        ),
                        ALERT_TIMEOUT,
                        before,
                    )
                except AssertionError as e:
                    out.agent_down_error = str(e).splitlines()[0]
                out.timings["node agent alert"] = time.monotonic() - started
                try:
                    out.preparer_alerts = await scenario.wait_alerts(
                        lambda a, expr: (
                            a["labels"].get("alertname") == "DRABindingPreparationsFailing"
                            and a["labels"].get("driver") == FABRIC_DRIVER
                        ),
                        ALERT_TIMEOUT,
                    )
                except AssertionError as e:
                    out.preparer_error = str(e).splitlines()[0]
                out.timings["preparer alert"] = time.monotonic() - started
            finally:
                await scenario.stop()
    out.timings["total"] = time.monotonic() - started
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(out.report())
    print("\n" + out.report())
    return out


def test_every_target_was_up(results: Results):
    assert not results.targets_down


def test_every_expression_parses_and_evaluates(results: Results):
    failed = [f"{o.expression.label}: {o.error}\n  {o.expression.expr}" for o in results.outcomes if o.error]
    assert not failed, "\n".join(failed)


def test_every_expression_returns_data(results: Results):
    """A dashboard panel or recording rule returns series; an alert, which returns nothing while
    all is well, has series for each of its selectors (so a misspelt metric or label is caught)."""
    empty = [
        f"{o.expression.label}: {'no data from ' + ', '.join(o.empty_selectors) if o.empty_selectors else 'no series'}"
        f"\n  {o.expression.expr}"
        for o in results.outcomes
        if not o.error and not o.has_data
    ]
    assert not empty, "\n".join(empty)


def test_a_stopped_node_agent_fires_an_alert(results: Results):
    assert results.agent_down_alerts, results.agent_down_error


def test_a_failing_preparer_fires_an_alert(results: Results):
    assert results.preparer_alerts, results.preparer_error
