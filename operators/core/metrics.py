"""Prometheus metrics: one registry per operator process, served on a port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server


def serve(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` (port 0 or below: not served)."""
    if port > 0:
        start_http_server(port, addr=address, registry=registry)
