"""Prometheus and promtool (``lab/build.sh --monitoring``) for ``make monitoring-check``: a
Prometheus on loopback with a configuration of our own, and the parts of its HTTP API the check
reads (query, parse_query, alerts, targets)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from . import process
from .cluster import free_ports

BINARIES = ("prometheus", "promtool")


class QueryError(Exception):
    """Prometheus refused or failed a query; the message is its ``error``."""


def missing_binaries(binaries: Path) -> list[str]:
    return [b for b in BINARIES if not (binaries / b).is_file()]


def promtool(binaries: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binaries / "promtool"), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


class Prometheus:
    """One Prometheus process: ``start()`` writes ``config`` to ``directory``/prometheus.yml and
    waits until /-/ready answers; ``stop()`` ends it. Its TSDB and log stay in ``directory``."""

    def __init__(self, binaries: Path, directory: Path):
        self.binary = binaries / "prometheus"
        self.directory = directory
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "prometheus.log"

    def start(self, config: dict[str, Any], timeout: float = 60.0) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        [self.port] = free_ports(1)
        self.proc = process.spawn(
            [
                str(self.binary),
                f"--config.file={self.directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            self.log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout:.0f}s:\n{self.tail()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            process.terminate(self.proc.pid, timeout=15)
            self.proc.wait()

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def api(self, path: str, **params: str) -> Any:
        """``data`` of a /api/v1 answer; an error answer (4xx/5xx with status "error") raises QueryError."""
        body = urllib.parse.urlencode(params).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/{path}", data=body or None)
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                answer = json.load(r)
        except urllib.error.HTTPError as e:
            try:
                answer = json.load(e)
            except ValueError:
                raise QueryError(f"HTTP {e.code} from /api/v1/{path}") from None
        if answer.get("status") != "success":
            raise QueryError(f"{answer.get('errorType', 'error')}: {answer.get('error', answer)}")
        return answer.get("data")

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result as a list (a scalar or string is one element)."""
        data = self.api("query", query=expr)
        result = data.get("result")
        if data.get("resultType") in ("scalar", "string"):
            return [{"value": result}]
        return list(result or [])

    def parse(self, expr: str) -> Any:
        """The expression's syntax tree (/api/v1/parse_query)."""
        return self.api("parse_query", query=expr)

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts").get("alerts") or [])

    def targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets").get("activeTargets") or [])
