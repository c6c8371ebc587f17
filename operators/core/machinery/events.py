"""Kubernetes Events posted the way client-go's recorder does: core/v1 Events with the
controller's component name. Repeats for the same object and reason within ten minutes update
one Event (count, last timestamp, latest message) instead of piling up: a message often names
something random, such as a generated claim name, that would defeat exact-match folding.

What a repeat needs (the Event's name and count) is remembered for those ten minutes only, and
for at most ``MAX_RECENT`` keys, least recently used first out (client-go's correlator keeps an
LRU of 4096, ``maxLruCacheEntries`` in tools/record/events_cache.go): an Event nobody repeats
costs nothing ten minutes later, however many objects came and went."""

from __future__ import annotations

import asyncio
import collections
import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

from ..api.kube import ApiError, Kube
from ..api.resources import EVENTS
from ..logging import get_logger

log = get_logger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
_REPEAT_WINDOW = 600.0  # seconds in which a repeat updates the count instead of posting anew
# client-go's broadcaster queues up to 1000 events (maxQueuedEvents) and drops new ones beyond.
MAX_QUEUED = 1000
MAX_RECENT = 4096  # client-go's maxLruCacheEntries


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def object_reference(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    ref = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": meta["name"],
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return {k: v for k, v in ref.items() if v}


def build_event(involved: dict[str, Any], event_type: str, reason: str, message: str, component: str) -> dict[str, Any]:
    ref = object_reference(involved)
    now = _now()
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{ref['name']}.{uuid.uuid4().hex[:16]}", "namespace": ref.get("namespace", "default")},
        "involvedObject": ref,
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    def __init__(
        self, kube: Kube, component: str, distinct_messages: bool = False, clock: Callable[[], float] = time.monotonic
    ):
        """``distinct_messages``: fold repeats only when the message is the same too, as
        client-go does, for reasons whose messages are fixed texts that must all stay visible."""
        self.kube = kube
        self.component = component
        self.distinct_messages = distinct_messages
        self._clock = clock
        # key -> (when last posted, namespace, name, count); least recently posted first.
        self._recent: collections.OrderedDict[tuple, tuple[float, str, str, int]] = collections.OrderedDict()
        self._queue: collections.deque[tuple[dict[str, Any], str, str, str]] = collections.deque()
        self._sender: asyncio.Task | None = None
        self.dropped = 0

    def post(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Queue an Event and return at once, as client-go's recorder does: a sync that emits
        one does not wait for its request (one sender posts them in order; at most
        ``MAX_QUEUED`` wait, newer ones are dropped with a warning)."""
        if len(self._queue) >= MAX_QUEUED:
            self.dropped += 1
            log.warning(
                "event queue full, dropping event",
                reason=reason,
                object=involved["metadata"].get("name"),
                dropped=self.dropped,
            )
            return
        self._queue.append((involved, event_type, reason, message))
        if self._sender is None or self._sender.done():
            # A short-lived task that ends when the queue is empty; event() never raises.
            self._sender = asyncio.get_running_loop().create_task(self._send(), name="events")

    async def _send(self) -> None:
        while self._queue:
            await self.event(*self._queue.popleft())

    async def flush(self) -> None:
        """Wait until every posted Event has been sent (or given up on)."""
        while self._sender is not None and not self._sender.done():
            await asyncio.shield(self._sender)

    async def event(self, involved: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Post an Event; failures are logged, never raised (an Event is never worth a retry)."""
        meta = involved["metadata"]
        key = (meta.get("uid"), event_type, reason) + ((message,) if self.distinct_messages else ())
        now = self._clock()
        self._forget_old(now)
        try:
            recent = self._recent.get(key)
            if recent and now - recent[0] < _REPEAT_WINDOW:
                _, namespace, name, count = recent
                await self.kube.patch(
                    EVENTS, name, {"count": count + 1, "lastTimestamp": _now(), "message": message}, namespace
                )
                self._recent[key] = (now, namespace, name, count + 1)
                self._recent.move_to_end(key)
                return
            body = build_event(involved, event_type, reason, message, self.component)
            await self.kube.create(EVENTS, body)
            self._recent[key] = (now, body["metadata"]["namespace"], body["metadata"]["name"], 1)
            self._recent.move_to_end(key)
            while len(self._recent) > MAX_RECENT:
                self._recent.popitem(last=False)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - an Event never fails the sync that posts it
            self._recent.pop(key, None)
            # An Event into a namespace being deleted is refused with a 403: expected while a
            # namespace's Pods are evicted or released, so not a warning (client-go's
            # recordEvent logs it at V(5), as it does AlreadyExists).
            expected = isinstance(e, ApiError) and (e.namespace_terminating or e.already_exists)
            (log.debug if expected else log.warning)(
                "could not post event", reason=reason, object=meta.get("name"), error=f"{type(e).__name__}: {e}"
            )

    def _forget_old(self, now: float) -> None:
        """Drop what can no longer be repeated (oldest first: the order is by last post)."""
        while self._recent and now - next(iter(self._recent.values()))[0] >= _REPEAT_WINDOW:
            self._recent.popitem(last=False)

    @property
    def remembered(self) -> int:
        """How many (object, reason) keys a repeat would still fold into an existing Event."""
        self._forget_old(self._clock())
        return len(self._recent)
