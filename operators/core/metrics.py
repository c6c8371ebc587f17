"""Prometheus metrics: one registry per operator process, served on a port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server

_served: dict[tuple[str, int], CollectorRegistry] = {}


def serve(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` (port 0 or below: not served). Several operators in one process
    (``dra-operators run claims taints``) share the port: a later registry joins the first."""
    if port <= 0:
        return
    served = _served.get((address, port))
    if served is not None:
        if served is not registry:
            served.register(registry)  # a registry is a collector of its own metrics
        return
    start_http_server(port, addr=address, registry=registry)
    _served[(address, port)] = registry
