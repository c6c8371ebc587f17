"""operators/lab/monitoring.py: what make monitoring-check evaluates and how it configures Prometheus."""

import json

import pytest
import yaml

from operators.lab import monitoring
from tests.paths import ROOT

FIXTURES = ROOT / "tests" / "monitoring" / "fixtures"


def test_rule_groups_are_the_spec_of_the_prometheus_rule():
    doc = yaml.safe_load((FIXTURES / "prometheusrule.yaml").read_text())
    groups = monitoring.rule_groups(doc)
    assert groups == {"groups": doc["spec"]["groups"]}
    expressions = monitoring.rule_expressions(groups, "rules")
    assert [(e.kind, e.name) for e in expressions][:2] == [
        ("record", "dra:resource_claims:sum_by_allocated"),
        ("alert", "FixtureNodeAgentDown"),
    ]
    assert monitoring.alert_names(groups)[0] == "FixtureNodeAgentDown"
    with pytest.raises(ValueError, match="not a PrometheusRule"):
        monitoring.rule_groups({"kind": "ConfigMap"})


def test_durations():
    assert monitoring.parse_duration("1h30m") == 5400
    assert monitoring.parse_duration("250ms") == 0.25
    with pytest.raises(ValueError):
        monitoring.parse_duration("5 minutes")
    assert monitoring.format_duration(10) == "10s"
    assert monitoring.format_duration(0.5) == "500ms"


def test_shortened_caps_for_and_sets_the_interval_without_touching_the_input():
    groups = {
        "groups": [
            {
                "name": "g",
                "interval": "1m",
                "rules": [
                    {"alert": "A", "expr": "x > 0", "for": "15m", "keep_firing_for": "5m"},
                    {"alert": "B", "expr": "y > 0", "for": "5s"},
                    {"record": "r", "expr": "sum(x)"},
                ],
            }
        ]
    }
    out = monitoring.shortened(groups, interval=2, max_for=10)
    assert out["groups"][0]["interval"] == "2s"
    assert [r.get("for") for r in out["groups"][0]["rules"]] == ["10s", "5s", None]
    assert out["groups"][0]["rules"][0]["keep_firing_for"] == "10s"
    assert groups["groups"][0]["rules"][0]["for"] == "15m"


def test_substitute_grafana_variables():
    variables = {"pod": ".*", "node": ".*", "window": "5m"}
    assert (
        monitoring.substitute('rate(x{pod="$pod", node=~"${node}"}[$__rate_interval])', variables)
        == 'rate(x{pod=~".*", node=~".*"}[1m])'
    )
    assert monitoring.substitute('x{pod!="$pod"}', variables) == 'x{pod!~".*"}'
    assert monitoring.substitute('x{pod=~"${pod:regex}"}', variables) == 'x{pod=~".*"}'
    assert monitoring.substitute("increase(x[$window]) / $__range_s", variables) == "increase(x[5m]) / 300"
    assert monitoring.substitute("x[$unknown]", variables) == "x[$unknown]"


def test_dashboard_expressions_walk_rows_and_substitute():
    dashboard = json.loads((FIXTURES / "dashboards" / "fixture.json").read_text())
    expressions = monitoring.dashboard_expressions(dashboard, "fixture.json")
    names = [e.name for e in expressions]
    assert "DRA fixture / Devices published [B]" in names
    assert len(expressions) == 6
    assert all("$" not in e.expr for e in expressions), [e.expr for e in expressions]
    assert expressions[0].expr == 'sum(up{namespace="dra-operators", pod=~".*"})'
    assert expressions[0].original != expressions[0].expr


def test_template_variables():
    dashboard = {
        "templating": {
            "list": [
                {"name": "ds", "type": "datasource"},
                {"name": "i", "type": "interval", "query": "1m,5m", "current": {"value": "5m"}},
                {"name": "j", "type": "interval", "query": "2m,10m"},
                {"name": "c", "type": "constant", "query": "dra-operators"},
                {"name": "q", "type": "query"},
            ]
        }
    }
    assert monitoring.template_variables(dashboard) == {
        "ds": ".*",
        "i": "5m",
        "j": "2m",
        "c": "dra-operators",
        "q": ".*",
    }


def test_selectors_of_a_parsed_expression():
    # As Prometheus' /api/v1/parse_query answers for
    # sum(rate(a{x="1"}[5m])) / on() group_left b{y=~"z\"q"} > 0 + absent(a{x="1"})
    ast = {
        "type": "binaryExpr",
        "op": ">",
        "lhs": {
            "type": "binaryExpr",
            "lhs": {
                "type": "aggregation",
                "expr": {
                    "type": "call",
                    "func": {"name": "rate"},
                    "args": [
                        {
                            "type": "matrixSelector",
                            "matchers": [
                                {"name": "x", "type": "=", "value": "1"},
                                {"name": "__name__", "type": "=", "value": "a"},
                            ],
                        }
                    ],
                },
            },
            "rhs": {
                "type": "vectorSelector",
                "matchers": [
                    {"name": "y", "type": "=~", "value": 'z"q'},
                    {"name": "__name__", "type": "=", "value": "b"},
                ],
            },
        },
        "rhs": {
            "type": "call",
            "func": {"name": "absent"},
            "args": [
                {
                    "type": "vectorSelector",
                    "matchers": [
                        {"name": "x", "type": "=", "value": "1"},
                        {"name": "__name__", "type": "=", "value": "a"},
                    ],
                }
            ],
        },
    }
    assert monitoring.selectors(ast) == ['{x="1",__name__="a"}', '{y=~"z\\"q",__name__="b"}']


def test_prometheus_config_labels_targets_as_the_prometheus_operator_does():
    targets = [
        monitoring.Target("claims", "dra-claims-0", "127.0.0.1:1"),
        monitoring.Target("nodeagent", "dra-nodeagent-lab-node-0", "127.0.0.1:2"),
        monitoring.Target("nodeagent", "dra-nodeagent-lab-node-1", "127.0.0.1:3"),
    ]
    config = monitoring.prometheus_config(targets, scrape_interval=2, rule_file="rules.yaml")
    assert config["global"]["scrape_interval"] == "2s"
    assert config["rule_files"] == ["rules.yaml"]
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"dra-operators/dra-claims", "dra-operators/dra-nodeagent"}
    agents = jobs["dra-operators/dra-nodeagent"]["static_configs"]
    assert [s["targets"] for s in agents] == [["127.0.0.1:2"], ["127.0.0.1:3"]]
    assert agents[0]["labels"] == {
        "namespace": "dra-operators",
        "pod": "dra-nodeagent-lab-node-0",
        "container": "nodeagent",
        "endpoint": "metrics",
    }
