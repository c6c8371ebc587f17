"""Prometheus metrics: one registry per operator process, served on a port."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Iterator
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import PROCESS_COLLECTOR, CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .. import memprofile
from ..api import apihealth

_served: dict[tuple[str, int], _Joined] = {}


def merge_families(families: Iterable[Metric]) -> list[Metric]:
    """One family per name: the samples of same-named families (client-go's workqueue_* of two
    operators in one process) joined, since a scraper may reject a family named twice."""
    merged: dict[str, Metric] = {}
    for family in families:
        first = merged.get(family.name)
        if first is None:
            merged[family.name] = family
        else:  # a new family: a collector may hand out the same object on every scrape
            joined = Metric(first.name, first.documentation, first.type, first.unit)
            joined.samples = [*first.samples, *family.samples]
            merged[family.name] = joined
    return list(merged.values())


class _Joined(Collector):
    """The registries served on one port, and the process-wide collectors, as one."""

    def __init__(self, *collectors: Collector):
        self.collectors = list(collectors)

    def collect(self) -> Iterator[Metric]:
        yield from merge_families(f for c in list(self.collectors) for f in c.collect())


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # the base class's name
        """No access log (as prometheus_client's own server)."""


def serve(registry: CollectorRegistry, port: int, address: str = "0.0.0.0") -> None:  # noqa: S104 - in a pod: Prometheus scrapes the pod IP
    """Serve ``/metrics`` (port 0 or below: not served), and ``/debug/tracemalloc`` when tracing
    (``core.memprofile``). Several operators in one process (``dra-operators run claims taints``)
    share the port: a later registry joins the first. Serves as prometheus_client's
    ``start_http_server`` does (a daemon thread, a thread per request), with the extra path."""
    if port <= 0:
        return
    served = _served.get((address, port))
    if served is not None:
        if registry not in served.collectors:
            served.collectors.append(registry)  # a registry is a collector of its own metrics
        return
    # Once per port: the process' view of the API server, and prometheus_client's process_*
    # (process_resident_memory_bytes, process_cpu_seconds_total: RSS and CPU on Linux).
    served = _Joined(registry, apihealth.PROCESS, PROCESS_COLLECTOR)
    exposed = CollectorRegistry()
    exposed.register(served)

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True  # a request's thread never holds the process
        address_family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    httpd = make_server(address, port, memprofile.wsgi(make_wsgi_app(exposed)), Server, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, name=f"metrics-{port}", daemon=True).start()
    _served[(address, port)] = served


def samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """The samples named ``name`` whose labels include ``labels``, from a Prometheus text
    exposition (an operator's ``/metrics``), parsed by prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    ]
