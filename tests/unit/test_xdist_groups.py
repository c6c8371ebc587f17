"""`make test` splits the session over two xdist workers by group (tests/conftest.py): the unit
tests and the modules with labs of their own in one, the shared lab's tests in the other, so that
a module's fixtures (a deployed image, a comparison run against upstream) are built once. When the
groups are lost, nothing fails: tests are spread one by one, those fixtures are built in both
workers and `make test` takes minutes longer (it did with pytest 9.2: pytest-dev/pytest-xdist#1386).
This runs two unit modules as `make test` does and checks that one worker ran them all."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
    workers = re.findall(r"^\[(gw\d)\] .* PASSED ", result.stdout, re.M)
    assert len(workers) > 2 and len(set(workers)) == 1, result.stdout[-3000:]
