"""The README's kind walkthrough as the tests read it: one parser for the unit test that keeps
its shape (tests/unit/test_readme.py) and the lab test that runs it (test_lab_deploy.py)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def kind_walkthrough(text: str | None = None) -> tuple[list[str], list[str]]:
    """The commands of the "Run on kind" block from the example on, and the lines it shows
    `kubectl logs basic` printing."""
    text = README.read_text() if text is None else text
    match = re.search(r"## Run on kind[^\n]*\n.*?```\n(.*?)```", text, re.S)
    assert match, "README.md has no code block under '## Run on kind'"
    commands, shown = [], []
    for line in match.group(1).splitlines():
        if line.startswith("#   DRA_"):
            shown.append(line[4:].strip())
        elif line.startswith("kubectl") and (commands or "config/examples" in line):
            commands.append(line.split("#")[0].strip())
    return commands, shown
