"""Whether the API server answers: an outage (no answer, or 5xx/429) as this process sees it.

An outage is the API server's trouble, not ours: the operator keeps running, says so in
``/healthz``'s details and in its metrics, and carries on when the API server is back. Liveness
must not fail for it (a restart cannot make the API server answer, and the restart back-off would
then delay the recovery after the outage ends). ``Kube`` records every request's outcome here;
every client of the process shares ``PROCESS`` (one API server), which ``metrics.serve`` exports.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

OUTAGE_STATUSES = frozenset({429, 500, 502, 503, 504})


class ApiHealth:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self.down_since: float | None = None
        self.last_error = ""
        self.outages = 0

    def answered(self) -> None:
        self.down_since = None

    def failed(self, error: str) -> None:
        if self.down_since is None:
            self.down_since = self._clock()
            self.outages += 1
        self.last_error = error[:300]

    def details(self) -> dict[str, Any]:
        """For ``/healthz``: reported, never a failure."""
        if self.down_since is None:
            return {"available": True, "outages": self.outages}
        return {
            "available": False,
            "unavailable_seconds": round(self._clock() - self.down_since, 1),
            "error": self.last_error,
            "outages": self.outages,
        }

    def collect(self) -> Iterator[Any]:
        """A prometheus_client collector (register it in the operator's registry)."""
        down = GaugeMetricFamily(
            "dra_operators_api_unavailable_seconds",
            "Seconds since the API server last answered, while it does not (0: it answers)",
        )
        down.add_metric([], 0.0 if self.down_since is None else self._clock() - self.down_since)
        yield down
        count = CounterMetricFamily(
            "dra_operators_api_outages", "Times the API server stopped answering (no answer, 5xx or 429)"
        )
        count.add_metric([], self.outages)
        yield count


PROCESS = ApiHealth()
