"""Each xdist group's seconds in the last `make test` (build/test-report.xml), longest first:
the figures for ``MODULE_SECONDS`` in tests/conftest.py, which orders the session by them."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

from tests.conftest import OWN_LABS

REPORT = Path(__file__).resolve().parents[1] / "build" / "test-report.xml"


def group_seconds(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):  # noqa: S314 - pytest's own report, not input
        # classname: tests.integration.test_x (a class adds .TestY); the module is the first test_*.
        parts = case.get("classname", "").split(".")
        module = next((p for p in parts if p.startswith("test_")), parts[-1]) + ".py"
        if "unit" in parts:
            group = "unit/" + module
        else:
            group = "own-labs" if module in OWN_LABS else module
        seconds[group] += float(case.get("time") or 0)
    return dict(sorted(seconds.items(), key=lambda kv: -kv[1]))


def main() -> int:
    report = Path(sys.argv[1]) if len(sys.argv) > 1 else REPORT
    if not report.exists():
        print(f"{report}: no report; run make test first", file=sys.stderr)
        return 1
    groups = group_seconds(report)
    units = sum(s for g, s in groups.items() if g.startswith("unit/"))
    for group, seconds in groups.items():
        if not group.startswith("unit/"):
            print(f"{seconds:8.0f}  {group}")
    print(f"{units:8.0f}  unit/* ({sum(g.startswith('unit/') for g in groups)} modules)")
    print(f"{sum(groups.values()):8.0f}  in all ({sum(groups.values()) / 2:.0f} a worker if shared evenly)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
