"""`make test` splits the session over two xdist workers by group (tests/conftest.py): a module
of the shared lab's tests, the modules with labs of their own, a unit module; so that a module's
fixtures (a deployed image, a comparison run against upstream) are built once. When the groups
are lost, nothing fails: tests are spread one by one, those fixtures are built in both workers
and `make test` takes minutes longer (it did with pytest 9.2: pytest-dev/pytest-xdist#1386).
This runs two unit modules as `make test` does and checks that one worker ran each; and that the
session is ordered longest group first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import session_order

ROOT = Path(__file__).resolve().parents[2]


def test_a_group_runs_in_one_worker():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "--no-loadscope-reorder",
            "-v",
            "tests/unit/core/test_heap.py",
            "tests/unit/core/test_settings.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d)\] .* PASSED (tests/unit/core/test_\w+\.py)::", result.stdout, re.M)
    by_module: dict[str, set[str]] = {}
    for worker, module in ran:
        by_module.setdefault(module, set()).add(worker)
    assert len(ran) > 4 and len(by_module) == 2, result.stdout[-3000:]
    assert all(len(workers) == 1 for workers in by_module.values()), by_module


class FakeItem:
    def __init__(self, path: str):
        self.path = Path(path)


def test_the_longest_groups_go_first_and_the_unit_modules_last():
    items = [
        FakeItem(p)
        for p in (
            "tests/unit/test_a.py",
            "tests/integration/test_lint.py",
            "tests/integration/test_lint.py",
            "tests/integration/test_api_outage.py",
            "tests/integration/test_real_node.py",
            "tests/integration/test_lab_cli.py",
            "tests/integration/test_lab_cli.py",
            "tests/integration/test_lab_cli.py",
            "tests/unit/test_b.py",
        )
    ]
    order = session_order(items)  # type: ignore[arg-type]
    assert order == [
        "own-labs",
        "test_api_outage.py",  # one test, 90 s by the table
        "test_lab_cli.py",  # 3 x 10 s
        "test_lint.py",
        "unit/test_a.py",
        "unit/test_b.py",
    ]
