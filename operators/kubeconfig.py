"""The namespace a kubeconfig context selects, as kubectl picks it (``-n`` wins, then the
context's namespace, then ``default``)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml


def _files(kubeconfig: str | None) -> list[Path]:
    if kubeconfig:
        return [Path(kubeconfig)]
    if os.environ.get("KUBECONFIG"):
        return [Path(p) for p in os.environ["KUBECONFIG"].split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of ``context`` (or the current context) in the kubeconfig files, merged
    as kubectl merges them (the first file to set a value wins)."""
    current, contexts = context, {}
    for path in _files(kubeconfig):
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        current = current or data.get("current-context")
        for entry in data.get("contexts") or []:
            contexts.setdefault(entry.get("name"), entry.get("context") or {})
    return (contexts.get(current) or {}).get("namespace") or "default"
