"""kopf configured to stay quiet on objects the suite does not own.

Only ``on.event`` handlers are used on Pods, ResourceClaims and ResourceSlices, so kopf adds no
finalizer and no ``last-handled-configuration`` annotation and patches no status; its own
Event posting is switched off (the operators post Events with upstream's reasons themselves).
"""

from __future__ import annotations

import itertools
from typing import Iterator

import kopf


class _Endless:
    """0.5, 1, 1, then 2 s for ever; each request of kopf iterates it afresh (kopf takes any
    iterable as ``error_backoffs``; one without a length has no last attempt)."""

    def __iter__(self) -> Iterator[float]:
        return itertools.chain((0.5, 1, 1), itertools.repeat(2))


ENDLESS_BACKOFFS = _Endless()


def quiet(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False
    settings.peering.standalone = True  # HA is a Lease (leader election), not kopf peering
    # No watching of CustomResourceDefinitions for new resources: the operators watch built-in
    # kinds only, and their RBAC grants nothing on CRDs.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    # Where the API server offers no streamed initial events, kopf LISTs before each watch (at
    # start and after every 410): in one request unless told a page size, which held every Pod of
    # the cluster at once. client-go's pager's page size (tools/pager DefaultPageSize).
    settings.watching.chunk_size = 500
    # kopf retries a failed watch connection with growing pauses (up to 21 s by default), so
    # after a network cut or an API-server restart it could stay blind for that long after the
    # API is back. Short, capped pauses: back within 2 s of the API server; the informers'
    # relist check then finds what changed meanwhile.
    # And never given up: once kopf escalates (5xx, 429 or no answer after its last pause) the
    # watch's task ends for good and the operator is blind until restarted, so an API outage
    # longer than the pauses (36 s) killed the watches. client-go's reflector retries forever.
    settings.networking.error_backoffs = ENDLESS_BACKOFFS
    # Handler errors are retried by the operators' own work queues, never by kopf.
    settings.batching.error_delays = [1, 2, 5, 10, 30]
