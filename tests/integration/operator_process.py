"""Operators under test run as real processes (``dra-operators run ...``), as users run them."""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from pathlib import Path

from operators.lab import process
from operators.lab.cluster import free_ports


class OperatorProcess:
    def __init__(self, names: list[str], kubeconfig: Path, log_dir: Path, env: dict[str, str] | None = None):
        self.names = names
        self.kubeconfig = kubeconfig
        self.log = log_dir / f"{'-'.join(names)}.log"
        self.extra_env = env or {}
        self.proc = None
        self.metrics_port = 0
        self.liveness_port = 0
        self.starts = 0

    def start(self, timeout: float = 30.0) -> None:
        self.metrics_port, self.liveness_port = free_ports(2)
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "DRA_METRICS_PORT": str(self.metrics_port),
               "DRA_LOG_FORMAT": "json", **self.extra_env}
        with open(self.log, "a") as log:
            log.write(f"--- start {self.starts}\n")
        self.proc = process.spawn(
            [sys.executable, "-m", "operators.cli", "run", *self.names,
             "--liveness", f"http://127.0.0.1:{self.liveness_port}/healthz"], self.log, env=env)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator {self.names} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"operator {self.names} not live after {timeout}s:\n{self.tail()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def kill(self) -> None:
        """SIGKILL: no cleanup handlers run, as when a node dies."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            process.terminate(self.proc.pid, timeout=15)
            self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def errors(self) -> list[str]:
        """Log lines at error level or with a traceback, except kopf's own request attempts that
        it retries (a keep-alive connection the API server closed is not an error of the operator)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [line for line in text.splitlines()
                if ('"level": "error"' in line or "Traceback" in line)
                and not ('"logger": "kopf.' in line and "Request attempt #" in line)]
