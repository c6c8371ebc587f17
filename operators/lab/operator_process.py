"""One of our operators run as users run it, ``python -m operators.cli run NAME...``, against a
lab: JSON logs appended to one file, metrics and liveness on free loopback ports. The tests, the
soak and the bench start their operators through this."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from . import process
from .cluster import free_ports


def rss_kib(pid: int, field: str = "VmRSS") -> int | None:
    """VmRSS of a live process (``field``: another line of /proc/<pid>/status, such as VmHWM,
    its peak), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class OperatorProcess:
    def __init__(
        self,
        names: list[str],
        kubeconfig: Path,
        log: Path,
        env: dict[str, str] | None = None,
        python: list[str] | None = None,
    ):
        """``log``: the file every start appends to (a ``--- start N`` line first). ``python``:
        the interpreter and its options (default: this one)."""
        self.names = names
        self.kubeconfig = kubeconfig
        self.log = log
        self.extra_env = env or {}
        self.python = python or [sys.executable]
        self.proc: subprocess.Popen | None = None
        self.metrics_port = 0
        self.liveness_port = 0
        self.starts = 0
        self.started_at = 0.0

    @property
    def label(self) -> str:
        return "-".join(self.names)

    def start(self, timeout: float = 30.0, wait_live: bool = True) -> None:
        """Start it (new ports each time) and wait until its liveness endpoint answers."""
        self.metrics_port, self.liveness_port = free_ports(2)
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "DRA_METRICS_PORT": str(self.metrics_port),
            "DRA_LOG_FORMAT": "json",
            **self.extra_env,
        }
        with open(self.log, "a") as log:
            log.write(f"--- start {self.starts}\n")
        self.started_at = time.monotonic()
        self.proc = process.spawn(
            [
                *self.python,
                "-m",
                "operators.cli",
                "run",
                *self.names,
                "--liveness",
                f"http://127.0.0.1:{self.liveness_port}/healthz",
            ],
            self.log,
            env=env,
        )
        self.starts += 1
        if not wait_live:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"operator {self.label} exited with {self.proc.returncode}:\n{self.tail()}")
            if self.live():
                return
            time.sleep(0.2)
        raise RuntimeError(f"operator {self.label} not live after {timeout:.0f}s:\n{self.tail()}")

    def live(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.liveness_port}/healthz", timeout=5):
                return True
        except OSError:
            return False

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    @property
    def rss_mib(self) -> float | None:
        kib = rss_kib(self.proc.pid) if self.proc else None
        return round(kib / 1024, 1) if kib is not None else None

    @property
    def peak_rss_mib(self) -> float | None:
        """The most RSS it has had (VmHWM)."""
        kib = rss_kib(self.proc.pid, "VmHWM") if self.proc else None
        return round(kib / 1024, 1) if kib is not None else None

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
        """The log's error lines (``is_error_line``)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [line for line in text.splitlines() if is_error_line(line)]


def is_transient_retry(line: str) -> bool:
    """kopf's own request attempts, which it retries (a keep-alive connection the API server
    closed, a 5xx under load): not an error of the operator."""
    return '"logger": "kopf.' in line and "Request attempt #" in line


def is_error_line(line: str) -> bool:
    """An error- or critical-level line, or a traceback, that is not a transient retry."""
    return (
        '"level": "error"' in line or '"level": "critical"' in line or "Traceback" in line
    ) and not is_transient_retry(line)
