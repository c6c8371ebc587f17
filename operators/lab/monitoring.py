"""What ``make monitoring-check`` evaluates, and how its Prometheus is configured (pure: no I/O).

The alert rules (a ``monitoring.coreos.com/v1`` PrometheusRule whose ``spec`` is plain Prometheus
rule groups) and the Grafana dashboards of ``kustomize/components/monitoring`` are turned into
PromQL expressions a Prometheus can evaluate: Grafana's variables are substituted the way Grafana
would before sending a query (``$__rate_interval`` a fixed window, a label variable "all values").
The live check shortens every alert's ``for`` so that it fires within its run; promtool's unit
tests (``rules-test.yaml``) check the real durations.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

# Grafana's interval variables, as a 2 s scrape interval makes them (Grafana's $__rate_interval is
# at least four scrape intervals; a minute leaves rate() enough samples early in the run).
INTERVAL_VARIABLES = {"__rate_interval": "1m", "__interval": "30s", "__range": "5m", "__range_s": "300"}
# A label variable selects every value, as Grafana's "All" with ".*" does.
ALL_VALUES = ".*"
# Prometheus' duration units, in seconds (model.ParseDuration).
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


@dataclass(frozen=True)
class Expression:
    """One PromQL expression to evaluate: ``kind`` alert, record or panel; ``name`` the alert,
    the recorded series, or ``dashboard / panel``; ``expr`` ready for Prometheus, ``original``
    as written (differs for dashboards)."""

    source: str
    kind: str
    name: str
    expr: str
    original: str

    @property
    def label(self) -> str:
        return f"{self.source}: {self.kind} {self.name}"


# -- rules ----------------------------------------------------------------------------------------


def rule_groups(prometheus_rule: Mapping[str, Any]) -> dict[str, Any]:
    """The rule file Prometheus and promtool read: the PrometheusRule's ``spec`` (``groups``)."""
    if prometheus_rule.get("kind") != "PrometheusRule":
        raise ValueError(f"not a PrometheusRule: kind {prometheus_rule.get('kind')!r}")
    spec = prometheus_rule.get("spec") or {}
    if not isinstance(spec.get("groups"), list):
        raise ValueError("the PrometheusRule has no spec.groups")
    return {"groups": copy.deepcopy(spec["groups"])}


def rule_expressions(groups: Mapping[str, Any], source: str) -> list[Expression]:
    found = []
    for group in groups.get("groups") or []:
        for rule in group.get("rules") or []:
            kind, name = ("alert", rule["alert"]) if "alert" in rule else ("record", rule.get("record", "?"))
            expr = str(rule.get("expr", "")).strip()
            found.append(Expression(source, kind, str(name), expr, expr))
    return found


def alert_names(groups: Mapping[str, Any]) -> list[str]:
    return [r["alert"] for g in groups.get("groups") or [] for r in g.get("rules") or [] if "alert" in r]


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration such as ``1h30m`` or ``90s``."""
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|[smhdwy])", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms" if seconds < 1 else f"{round(seconds)}s"


def shortened(groups: Mapping[str, Any], interval: float, max_for: float) -> dict[str, Any]:
    """The rule groups for the live check: evaluated every ``interval`` seconds, each ``for`` and
    ``keep_firing_for`` at most ``max_for`` seconds. Expressions stay as written."""
    out = copy.deepcopy(dict(groups))
    for group in out.get("groups") or []:
        group["interval"] = format_duration(interval)
        for rule in group.get("rules") or []:
            for key in ("for", "keep_firing_for"):
                if key in rule and parse_duration(str(rule[key])) > max_for:
                    rule[key] = format_duration(max_for)
    return out


# -- dashboards -----------------------------------------------------------------------------------


def _panels(panels: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every panel, the ones inside (collapsed) rows too."""
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])


def template_variables(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """The value each of the dashboard's variables gets: an interval variable its current value
    (else its first option, else a minute), a datasource variable nothing that matters (it never
    appears in an expression), any other one "all values" (``.*``)."""
    values: dict[str, str] = {}
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        name = variable.get("name")
        if not name:
            continue
        if variable.get("type") == "interval":
            current = (variable.get("current") or {}).get("value")
            options = [o.get("value") for o in variable.get("options") or [] if o.get("value")]
            queried = [q for q in str(variable.get("query", "")).split(",") if q.strip()]
            values[name] = str(current or (options or queried or ["1m"])[0]).strip()
        elif variable.get("type") == "constant":
            values[name] = str(variable.get("query", ""))
        else:
            values[name] = ALL_VALUES
    return values


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """Grafana's substitution for Prometheus: a label matcher on a variable that selects all values
    becomes a regular-expression match (``l="$v"`` -> ``l=~".*"``, ``l!="$v"`` -> ``l!~".*"``);
    every other ``$v``, ``${v}`` or ``${v:format}`` its value. Unknown variables stay (and fail to
    parse, which is the report)."""
    values = {**INTERVAL_VARIABLES, **variables}
    ref = r"\$(?:\{(?P<braced>\w+)(?::\w+)?\}|(?P<plain>\w+))"

    def matcher(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain")
        if values.get(name) != ALL_VALUES:
            return m.group(0)
        op = "!~" if m.group("op").startswith("!") else "=~"
        return f'{op}"{ALL_VALUES}"'

    expr = re.sub(r'(?P<op>!=|!~|=~|=)\s*"' + ref + '"', matcher, expr)

    def plain(m: re.Match[str]) -> str:
        name = m.group("braced") or m.group("plain")
        return values.get(name, m.group(0))

    return re.sub(ref, plain, expr)


def dashboard_expressions(dashboard: Mapping[str, Any], source: str) -> list[Expression]:
    variables = template_variables(dashboard)
    title = dashboard.get("title") or source
    found = []
    for panel in _panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            original = str(target.get("expr") or "").strip()
            if not original:
                continue
            name = f"{title} / {panel.get('title') or panel.get('id', '?')}"
            if target.get("refId"):
                name += f" [{target['refId']}]"
            found.append(Expression(source, "panel", name, substitute(original, variables), original))
    return found


# -- selectors of a parsed expression (Prometheus' /api/v1/parse_query) -------------------------


def selectors(ast: Any) -> list[str]:
    """Each vector or range selector of an expression as parsed by Prometheus
    (web/api/v1/translate_ast.go, translateAST), as a selector of its own (``{__name__="x",l="v"}``)
    that returns series only when the metric, with those labels, exists. An alert's expression
    returns nothing while all is well; its selectors must return data."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") in ("vectorSelector", "matrixSelector"):
            matchers = []
            for m in node.get("matchers") or []:
                value = str(m["value"]).replace("\\", "\\\\").replace('"', '\\"')
                matchers.append(f'{m["name"]}{m["type"]}"{value}"')
            selector = "{" + ",".join(matchers) + "}"
            if selector not in found:
                found.append(selector)
            return
        for key, value in node.items():
            if key != "func":
                walk(value)

    walk(ast)
    return found


# -- Prometheus' configuration --------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One operator process to scrape, labelled as the Prometheus Operator labels a PodMonitor's
    target (job ``<namespace>/<PodMonitor>``, namespace, pod, container, endpoint), so that rules
    written for kustomize/components/monitoring select it here too."""

    operator: str  # claims, taints, binding, poolstatus, nodeagent
    pod: str
    address: str  # host:port

    @property
    def job(self) -> str:
        return f"dra-operators/dra-{self.operator}"

    def labels(self) -> dict[str, str]:
        return {"namespace": "dra-operators", "pod": self.pod, "container": self.operator, "endpoint": "metrics"}


def prometheus_config(targets: Iterable[Target], scrape_interval: float, rule_file: str) -> dict[str, Any]:
    jobs: dict[str, list[Target]] = {}
    for target in targets:
        jobs.setdefault(target.job, []).append(target)
    interval = format_duration(scrape_interval)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [rule_file],
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [{"targets": [t.address], "labels": t.labels()} for t in members],
            }
            for job, members in sorted(jobs.items())
        ],
    }
