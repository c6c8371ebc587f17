"""The README stays short, its links lead somewhere, and its kind walkthrough keeps the shape
that tests/integration/test_lab_deploy.py runs (the commands from the example on, and the lines
`kubectl logs basic` prints)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.readme import kind_walkthrough

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_at_most_250_lines():
    assert len(README.splitlines()) <= 250


def test_every_relative_link_of_the_readme_exists():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    relative = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert relative
    missing = [t for t in relative if not (ROOT / t).exists()]
    assert not missing, missing


def test_the_kind_walkthrough_has_the_commands_and_lines_the_deploy_test_reads():
    commands, shown = kind_walkthrough(README)
    assert commands[0] == "kubectl apply -f config/examples/basic-template/"
    assert commands[-1] == "kubectl logs basic"
    assert [s.split("=")[0] for s in shown] == [
        "DRA_DEVICE_GPU_0",
        "DRA_DEVICE_GPU_0_ADMIN_ACCESS",
        "DRA_DEVICE_GPU_0_CLAIM",
        "DRA_DEVICE_GPU_0_RESOURCE_CLAIM",
    ]
