"""A kube-apiserver that answers ``GET /metrics`` and nothing else: for operators that read
their feature gates first and refuse to start before asking anything more."""

from __future__ import annotations


class MetricsOnlyApiServer:
    host = "https://api.example:6443"

    def __init__(self, metrics: str):
        self.metrics = metrics

    async def request(self, method: str, path: str, **_):
        assert (method, path) == ("GET", "/metrics")
        return self.metrics
