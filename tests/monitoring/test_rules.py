"""promtool on the alert rules: they load (check rules) and their unit tests pass (test rules)."""

from pathlib import Path

from operators.lab.prometheus import promtool

from .conftest import Sources


def test_promtool_check_rules(binaries: Path, rule_dir: Path):
    result = promtool(binaries, "check", "rules", "rules.yaml", cwd=rule_dir)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules(binaries: Path, rule_dir: Path, sources: Sources):
    assert sources.rules_test.is_file(), f"{sources.rules_test} is missing: the alert rules have no unit tests"
    result = promtool(binaries, "test", "rules", "rules-test.yaml", cwd=rule_dir)
    assert result.returncode == 0, result.stdout + result.stderr
