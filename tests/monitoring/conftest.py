"""Fixtures of the monitoring check (``make monitoring-check``; docs/development/monitoring-check.md).

The sources are the alert rules, their promtool unit tests and the dashboards of
``kustomize/components/monitoring`` (``DRA_MONITORING_SOURCES`` names another directory, such as
``tests/monitoring/fixtures``, the small stand-ins these tests were first run on). The binaries
come from ``lab/build.sh --monitoring``. Without either the tests skip, or fail under
``make monitoring-check`` (which builds the binaries and sets ``DRA_MONITORING_CHECK``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from operators.lab import monitoring, paths, prometheus
from tests.paths import ROOT

COMPONENT = ROOT / "kustomize" / "components" / "monitoring"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass(frozen=True)
class Sources:
    directory: Path

    @property
    def prometheus_rule(self) -> Path:
        return self.directory / "prometheusrule.yaml"

    @property
    def rules_test(self) -> Path:
        return self.directory / "rules-test.yaml"

    @property
    def dashboards(self) -> list[Path]:
        return sorted((self.directory / "dashboards").glob("*.json"))

    def groups(self) -> dict:
        return monitoring.rule_groups(yaml.safe_load(self.prometheus_rule.read_text()))

    def expressions(self) -> list[monitoring.Expression]:
        found = monitoring.rule_expressions(self.groups(), self.prometheus_rule.name)
        for path in self.dashboards:
            found += monitoring.dashboard_expressions(json.loads(path.read_text()), f"dashboards/{path.name}")
        return found


@pytest.fixture(scope="session")
def sources() -> Sources:
    directory = Path(os.environ.get("DRA_MONITORING_SOURCES") or COMPONENT)
    if not directory.is_absolute():
        directory = ROOT / directory
    if not (directory / "prometheusrule.yaml").is_file():
        _missing(f"{directory}/prometheusrule.yaml is missing (DRA_MONITORING_SOURCES={FIXTURES} for the fixtures)")
    return Sources(directory)


def _missing(message: str) -> None:
    """Under make monitoring-check a failure; in a plain pytest run (which collects tests/) a skip."""
    if os.environ.get("DRA_MONITORING_CHECK"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def binaries() -> Path:
    directory = paths.bin_dir()
    missing = prometheus.missing_binaries(directory)
    if missing:
        _missing(f"{', '.join(missing)} missing in {directory}: run `lab/build.sh --monitoring`")
    return directory


@pytest.fixture(scope="session")
def rule_dir(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rules.yaml (the PrometheusRule's spec) beside a copy of rules-test.yaml, as promtool reads them."""
    directory = tmp_path_factory.mktemp("rules")
    (directory / "rules.yaml").write_text(yaml.safe_dump(sources.groups(), sort_keys=False))
    if sources.rules_test.is_file():
        shutil.copy(sources.rules_test, directory / "rules-test.yaml")
    return directory
