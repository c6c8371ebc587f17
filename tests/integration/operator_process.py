"""Operators under test run as real processes (``dra-operators run ...``), as users run them."""

from __future__ import annotations

from pathlib import Path

from operators.lab import operator_process


class OperatorProcess(operator_process.OperatorProcess):
    """Logs to ``<log_dir>/<names>.log``."""

    def __init__(self, names: list[str], kubeconfig: Path, log_dir: Path, env: dict[str, str] | None = None):
        super().__init__(names, kubeconfig, log_dir / f"{'-'.join(names)}.log", env)
