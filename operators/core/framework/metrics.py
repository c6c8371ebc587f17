"""Prometheus metrics: one registry per operator process, served on a port."""

from __future__ import annotations

import socket
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from .. import memprofile
from ..api import apihealth

_served: dict[tuple[str, int], CollectorRegistry] = {}


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
        if served is not registry:
            served.register(registry)  # a registry is a collector of its own metrics
        return
    registry.register(apihealth.PROCESS)  # the process' view of the API server, once per port

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True  # a request's thread never holds the process
        address_family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    httpd = make_server(address, port, memprofile.wsgi(make_wsgi_app(registry)), Server, handler_class=_Quiet)
    threading.Thread(target=httpd.serve_forever, name=f"metrics-{port}", daemon=True).start()
    _served[(address, port)] = registry


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
