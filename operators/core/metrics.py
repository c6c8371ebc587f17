"""Prometheus metrics: one registry per operator process, served on a port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server

from . import apihealth

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
    registry.register(apihealth.PROCESS)  # the process' view of the API server, once per port
    start_http_server(port, addr=address, registry=registry)
    _served[(address, port)] = registry


def samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """The samples named ``name`` whose labels include ``labels``, from a Prometheus text
    exposition (an operator's ``/metrics``), parsed by prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return [(sample.labels, sample.value)
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())]
