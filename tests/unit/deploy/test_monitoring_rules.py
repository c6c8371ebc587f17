"""The alerts and the dashboard of kustomize/components/monitoring: they parse, every alert has
its annotations and a runbook in docs/monitoring.md and is unit-tested firing and not firing in
rules-test.yaml (promtool runs those: make monitoring-check), and every metric they query is one
the operators export (operators/docsgen.py's table, the one docs/reference/metrics.md shows)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import unicodedata
from functools import cache

import pytest
import yaml

from operators import docsgen
from tests.paths import ROOT

COMPONENT = ROOT / "kustomize" / "components" / "monitoring"
RULE = COMPONENT / "prometheusrule.yaml"
RULE_TESTS = COMPONENT / "rules-test.yaml"
DASHBOARD = COMPONENT / "dashboards" / "dra-operators.json"
RUNBOOKS = ROOT / "docs" / "monitoring.md"

# Series of our families, as PromQL names them: histograms by their _bucket, _sum and _count.
_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
# A metric name right before its label selector (every query here selects by job).
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
# The prefixes of our families (and client-go's, prometheus_client's): a name with one of them
# anywhere in a query, selector or not, must be a family that is exported.
_OURS = re.compile(
    r"\b((?:dra_|workqueue_|process_|leader_election_|dynamic_resource_allocation_|device_taint_|"
    r"resourcepoolstatusrequest_)[a-zA-Z0-9_]*)"
)


def _rule() -> dict:
    return yaml.safe_load(RULE.read_text())


def _alerts() -> list[dict]:
    return [rule for group in _rule()["spec"]["groups"] for rule in group["rules"] if "alert" in rule]


@cache
def _exported() -> dict[str, str]:
    """Every series name the operators export, with its family's type; and ``up``."""
    names = {"up": "gauge"}
    for _operator, name, kind, _help, _labels in docsgen.metric_families():
        names[name] = kind
        if kind == "histogram":
            names.update({name + suffix: kind for suffix in _HISTOGRAM_SUFFIXES})
    return names


def _dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def _panels(panels: list[dict]) -> list[dict]:
    """Every panel, those nested in collapsed rows too."""
    found = []
    for panel in panels:
        found.append(panel)
        found += _panels(panel.get("panels") or [])
    return found


def _dashboard_queries() -> list[str]:
    return [t["expr"] for p in _panels(_dashboard()["panels"]) for t in p.get("targets") or []]


def _metric_names(expr: str) -> set[str]:
    return set(_SELECTOR.findall(expr)) | set(_OURS.findall(expr))


def test_the_prometheusrule_is_plain_rule_groups_beside_the_podmonitors():
    rule = _rule()
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["namespace"] == "dra-operators"
    assert rule["metadata"]["labels"]["app.kubernetes.io/part-of"] == "dra-operators"
    assert set(rule["spec"]) == {"groups"}  # written out as it is for promtool
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(names) == len(set(names))
    for group in rule["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"}
        for r in group["rules"]:
            assert set(r) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert "prometheusrule.yaml" in kustomization["resources"]


def test_every_alert_has_a_severity_and_its_three_annotations():
    alerts = _alerts()
    assert len({a["alert"] for a in alerts}) == len(alerts)
    for alert in alerts:
        assert alert["labels"]["severity"] in ("critical", "warning"), alert["alert"]
        assert {"summary", "description", "runbook_url"} <= set(alert["annotations"]), alert["alert"]
        assert re.fullmatch(r"\d+m", alert["for"]), alert["alert"]  # no alert fires on one bad scrape


def _slugify(heading: str) -> str:
    """Python-Markdown's default heading id (markdown.extensions.toc.slugify, as mkdocs uses it)."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _headings(markdown: str) -> set[str]:
    """The anchors mkdocs gives the page's headings (outside fenced code)."""
    anchors, fenced = set(), False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif line.startswith("#") and not fenced:
            anchors.add(_slugify(line.lstrip("#").strip()))
    return anchors


def test_every_runbook_url_names_a_section_of_the_monitoring_page():
    anchors = _headings(RUNBOOKS.read_text())
    for alert in _alerts():
        page, _, anchor = alert["annotations"]["runbook_url"].partition("#")
        assert page == "docs/monitoring.md", alert["alert"]
        assert anchor == alert["alert"].lower(), alert["alert"]  # the section is named after the alert
        assert anchor in anchors, f"docs/monitoring.md has no section for {alert['alert']}"


def test_every_alert_is_tested_firing_and_not_firing():
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == ["rules.yaml"]  # the checker writes the rule's spec there
    fires, quiet = set(), set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test") or []:
            (fires if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {a["alert"] for a in _alerts()}
    assert fires == names, f"not tested firing: {names - fires}; unknown: {fires - names}"
    assert quiet == names, f"not tested quiet: {names - quiet}; unknown: {quiet - names}"


def test_the_expected_annotations_of_the_rule_tests_are_the_rules_own():
    """promtool compares annotations exactly: catch a summary changed in one file only, here."""
    alerts = {a["alert"]: a for a in _alerts()}
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test") or []:
            rule = alerts[check["alertname"]]
            for expected in check.get("exp_alerts") or []:
                labels = expected["exp_labels"]
                assert labels.get("severity") == rule["labels"]["severity"]
                rendered = {
                    key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
                    for key, text in rule["annotations"].items()
                }
                assert expected["exp_annotations"] == rendered, (case["name"], check["alertname"])


@pytest.mark.parametrize("source", ["alerts", "dashboard"])
def test_every_metric_queried_is_one_the_operators_export(source):
    queries = [a["expr"] for a in _alerts()] if source == "alerts" else _dashboard_queries()
    assert queries
    unknown = {name for expr in queries for name in _metric_names(expr) if name not in _exported()}
    assert not unknown, f"{source} query families nobody exports: {sorted(unknown)}"


def test_counters_are_queried_with_rate_and_histograms_by_their_buckets():
    for expr in [a["expr"] for a in _alerts()] + _dashboard_queries():
        for name in _metric_names(expr):
            kind = _exported().get(name)
            if kind == "counter":
                assert re.search(rf"(rate|increase)\({name}\{{", expr), (name, expr)
            if kind == "histogram":
                assert name.endswith(_HISTOGRAM_SUFFIXES), (name, expr)


def test_the_dashboard_is_importable():
    dashboard = _dashboard()
    assert dashboard["schemaVersion"] >= 36 and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    panels = _panels(dashboard["panels"])
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}" and target["expr"], panel["title"]


def test_the_dashboard_shows_what_the_issue_asks_for():
    queried = {name for expr in _dashboard_queries() for name in _metric_names(expr)}
    wanted = {
        "dra_nodeagent_devices",  # devices per pool: published, tainted, unhealthy
        "dra_operators_allocated_devices",  # allocated, and free = published - allocated
        "dynamic_resource_allocation_resourceclaim_creates_total",  # claim creation rate
        "dra_operators_claim_creation_latency_seconds_bucket",  # and latency
        "dra_operators_taints_evictions_total",  # evictions
        "dra_operators_binding_preparations_total",  # binding preparations
        "dra_nodeagent_node_prepare_claim_duration_seconds_bucket",  # node prepare latency
        "dra_nodeagent_health_events_total",  # health events
        "process_resident_memory_bytes",  # operator RSS
        "process_cpu_seconds_total",  # and CPU
    }
    assert wanted <= queried, sorted(wanted - queried)


def test_the_dashboard_json_exists_once_and_the_component_makes_its_configmap():
    [generator] = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())["configMapGenerator"]
    assert generator["files"] == ["dashboards/dra-operators.json"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(p.name for p in (COMPONENT / "dashboards").iterdir()) == ["dra-operators.json"]


def _promtool() -> str | None:
    built = ROOT / ".cache" / "lab" / "bin" / "promtool"  # lab/build.sh --monitoring
    return str(built) if built.exists() else shutil.which("promtool")


def test_promtool_checks_the_rules_runs_their_tests_and_parses_the_dashboards_queries(tmp_path):
    """make monitoring-check does this too (and evaluates every query on a live lab); here it is
    part of make test wherever promtool has been built."""
    promtool = _promtool()
    if promtool is None:
        pytest.skip("no promtool (.cache/lab/bin/promtool: lab/build.sh --monitoring, or on PATH)")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(_rule()["spec"], sort_keys=False))
    shutil.copy(RULE_TESTS, tmp_path / "rules-test.yaml")
    # Each dashboard query as a recording rule, to have promtool parse it: Grafana's variables
    # replaced as Grafana would (an interval, "All" namespaces).
    queries = [
        {"record": f"dashboard:query{i}", "expr": q.replace("$__rate_interval", "1m").replace("$namespace", ".*")}
        for i, q in enumerate(_dashboard_queries())
    ]
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": queries}]}))
    for args in (["check", "rules", "rules.yaml", "dashboard.yaml"], ["test", "rules", "rules-test.yaml"]):
        result = subprocess.run([promtool, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
