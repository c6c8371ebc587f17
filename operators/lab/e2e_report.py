"""Upstream's DRA e2e suite, judged: ginkgo's JSON reports of a run with our controllers and one
with upstream's, read into results and compared into the table of ``docs/e2e.md``.

Pure functions only; ``operators.lab.e2e`` runs the suite and writes the files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# How a case ended, in ginkgo's words (types.SpecState): a timeout, an interrupt or a panic is a
# failure here.
PASSED, FAILED, SKIPPED, MISSING = "passed", "failed", "skipped", "not run"
_FAILURES = {"failed", "panicked", "timedout", "interrupted", "aborted"}

# The verdict of a case from its two results.
BOTH_PASS = "passes with both"  # noqa: S105 - a verdict, not a password
OURS_ONLY_FAILS = "fails only with ours"
UPSTREAM_ONLY_FAILS = "passes only with ours"
BOTH_FAIL = "fails with both"
BOTH_SKIP = "skipped"


@dataclass(frozen=True)
class Result:
    name: str
    state: str
    message: str = ""
    seconds: float = 0.0


def spec_name(spec: dict[str, Any]) -> str:
    """The case's full text as ginkgo prints it: its containers' texts, then its own."""
    return " ".join([*(spec.get("ContainerHierarchyTexts") or []), spec.get("LeafNodeText", "")]).strip()


def _first_line(text: str, limit: int = 200) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def read_report(data: Any) -> dict[str, Result]:
    """The cases (``It`` nodes) of a ginkgo JSON report (``--json-report``), by name. A case
    listed twice (ginkgo's parallel reports) keeps its last entry."""
    results: dict[str, Result] = {}
    for suite in data or []:
        for spec in suite.get("SpecReports") or []:
            if spec.get("LeafNodeType") != "It":
                continue
            state = spec.get("State", "")
            state = FAILED if state in _FAILURES else PASSED if state == "passed" else SKIPPED
            failure = spec.get("Failure") or {}
            message = _first_line(failure.get("Message", "")) if state != PASSED else ""
            name = spec_name(spec)
            results[name] = Result(name, state, message, round((spec.get("RunTime") or 0) / 1e9, 1))
    return results


def load_report(path: Path) -> dict[str, Result]:
    return read_report(json.loads(path.read_text()))


def verdict(ours: Result | None, upstream: Result | None) -> str:
    mine = ours.state if ours else MISSING
    theirs = upstream.state if upstream else MISSING
    if mine == PASSED and theirs == PASSED:
        return BOTH_PASS
    if mine == FAILED and theirs == FAILED:
        return BOTH_FAIL
    if mine == FAILED:
        return OURS_ONLY_FAILS
    if theirs == FAILED:
        return UPSTREAM_ONLY_FAILS
    if mine == PASSED or theirs == PASSED:  # skipped or not run on one side only
        return f"{mine} with ours, {theirs} with upstream's"
    return BOTH_SKIP


def summary(results: Iterable[Result]) -> dict[str, int]:
    counts = {PASSED: 0, FAILED: 0, SKIPPED: 0}
    for result in results:
        counts[result.state] += 1
    counts["run"] = counts[PASSED] + counts[FAILED]
    return counts


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(ours: dict[str, Result], upstream: dict[str, Result], causes: dict[str, str]) -> str:
    """A Markdown table, one row per case, failures first: name, ours, upstream's, verdict and
    why (``causes``: a reviewed cause by case name; otherwise the first line of the failure)."""
    order = {OURS_ONLY_FAILS: 0, BOTH_FAIL: 1, UPSTREAM_ONLY_FAILS: 2}
    names = sorted(set(ours) | set(upstream), key=lambda n: (order.get(verdict(ours.get(n), upstream.get(n)), 3), n))
    rows = ["| Case | Ours | Upstream's | Verdict | Why |", "|---|---|---|---|---|"]
    for name in names:
        mine, theirs = ours.get(name), upstream.get(name)
        why = (
            causes.get(name)
            or (mine.message if mine and mine.state != PASSED else "")
            or (theirs.message if theirs and theirs.state != PASSED else "")
        )
        rows.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    name,
                    mine.state if mine else MISSING,
                    theirs.state if theirs else MISSING,
                    verdict(mine, theirs),
                    why,
                )
            )
            + " |"
        )
    return "\n".join(rows) + "\n"


def pass_ratio(ours: dict[str, Result], upstream: dict[str, Result]) -> tuple[int, int]:
    """Of the cases that pass with upstream's controllers: how many pass with ours, of how many."""
    passing = [n for n, r in upstream.items() if r.state == PASSED]
    return sum(1 for n in passing if n in ours and ours[n].state == PASSED), len(passing)
