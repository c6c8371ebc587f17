"""The lint's findings as text (one block per finding) or JSON/YAML."""

from __future__ import annotations

from typing import Any

from .rules import ERROR, Finding


def merge(own: list[Finding], server: list[Finding]) -> list[Finding]:
    """The rules' findings, then the server's on fields no rule spoke about (the rules' messages
    carry the fix; the server's repeat the same problem in its words)."""
    seen = {(f.file, f.line, f.field) for f in own}
    return own + [f for f in server if (f.file, f.line, f.field) not in seen]


def render(findings: list[Finding], files: int, documents: int, read_errors: list[tuple[str, str]], mode: str) -> str:
    lines = [f"{file}: {problem}" for file, problem in read_errors]
    for f in findings:
        lines.append(f"{f.file}:{f.line}: {f.severity}: {f.object}: {f.field or '(object)'}: {f.message} [{f.rule}]")
        lines.append(f"    fix: {f.fix}")
    errors = sum(f.severity == ERROR for f in findings) + len(read_errors)
    warnings = sum(f.severity != ERROR for f in findings)
    lines.append(f"{documents} object(s) in {files} file(s) checked ({mode}): {errors} error(s), {warnings} warning(s)")
    return "\n".join(lines)


def to_json(findings: list[Finding], read_errors: list[tuple[str, str]], mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "findings": [f.to_json() for f in findings],
        "unreadable": [{"file": file, "problem": p} for file, p in read_errors],
    }
