"""docs/reference/*.md are generated from the code (operators/docsgen.py, `make reference`):
each checked-in page must be what the code gives now, so a setting, metric, Event reason,
command, flag or lint rule added without its page fails here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from operators import docsgen
from operators.core.settings import Settings

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference"


@pytest.mark.parametrize("name", sorted(docsgen.PAGES))
def test_the_checked_in_page_is_what_the_code_generates(name):
    page = REFERENCE / name
    assert page.exists(), f"{page} is missing: run `make reference`"
    assert page.read_text() == docsgen.PAGES[name](), f"{page} differs from the code: run `make reference`"


def test_every_setting_is_on_its_page():
    text = docsgen.settings_page()
    for f in dataclasses.fields(Settings):
        assert f"`{f.metadata['env']}`" in text, f.name


def test_every_metric_family_has_a_name_and_help():
    families = docsgen.metric_families()
    assert {operator for operator, *_ in families} >= set(docsgen.OPERATOR_NAMES)
    for operator, name, kind, help_, _labels in families:
        assert name and kind and help_, (operator, name)


def test_the_event_reasons_include_the_known_ones():
    reasons = {reason for reason, *_ in docsgen.event_reasons()}
    # One of each way a reason is written: a literal, a decisions constant, a module constant,
    # a local chosen between literals, a rule problem.
    assert {
        "FailedResourceClaimCreation",
        "DeviceTaintManagerEviction",
        "CDISpecRestored",
        "DevicePreparationTimedOut",
        "InvalidAnnotation",
    } <= reasons


def test_every_lint_rule_says_what_it_catches():
    from operators.lint.rules import RULES

    for rule, function in RULES.items():
        assert (function.__doc__ or "").strip(), rule


def test_every_command_is_on_its_page():
    from operators.cli import main
    from operators.kubectl import main as kubectl

    text = docsgen.commands_page()
    ctx = main.make_context("dra-operators", [], resilient_parsing=True)
    for name in main.list_commands(ctx):
        assert f"## `dra-operators {name}`" in text, name
    for name in kubectl.commands:
        assert f"## `kubectl dra {name}`" in text, name


@pytest.mark.parametrize("operator", docsgen.OPERATOR_NAMES)
def test_each_operator_page_names_its_events_and_metrics(operator):
    page = (REFERENCE.parent / "operators" / f"{operator}.md").read_text()
    for reason, _kind, owner, _path in docsgen.event_reasons():
        if owner == operator:
            assert f"`{reason}`" in page, f"docs/operators/{operator}.md does not name the Event reason {reason}"
    for owner, name, *_ in docsgen.metric_families():
        if owner == operator:
            assert f"`{name}`" in page, f"docs/operators/{operator}.md does not name the metric {name}"


def test_every_variable_read_outside_settings_is_explained():
    found = docsgen.environment_variables()
    assert {"POD_NAMESPACE", "DRA_LAB_HOME"} <= set(found)
    unexplained = sorted(set(found) - set(docsgen.OTHER_VARIABLES))
    assert not unexplained, f"say what {unexplained} mean in docsgen.OTHER_VARIABLES, then run `make reference`"
