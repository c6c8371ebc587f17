"""Taps kopf's watch streams for the informers: the end of every (re)listing, even an empty one,
and the events themselves.

kopf marks the end of every listing (its LIST, or the API server's streamed initial events) with
an internal ``Bookmark.LISTED`` that it keeps to itself: handlers only see the listed objects, as
events of type None. A relisting that finds nothing (every object was deleted while the watch was
away) therefore reaches no handler, and an informer would never learn that its cached objects
are gone. This wraps kopf's ``infinite_watch`` (looked up on its module at each watcher start,
so the wrapper applies to every watch started after ``install``) and calls the listeners of the
resource when the bookmark passes. kopf is pinned (requirements.lock); the unit test
``test_core_kopflistings`` fails if the private names move.

Events of a resource that has consumers (``consume``: the informers) are handed to them right in
the watch stream and never reach kopf's per-object machinery (a worker task, a memory and a
body view per object, handler lookup), which was most of the CPU per event and kept a memory
entry for every Pod of the cluster (bench/RESULTS.md, profile). Every ``on.event`` handler of the
suite only fed its informer, so nothing else is lost. Order is the stream's order, as before;
BOOKMARK events still go to kopf (they carry no object).

A consumer may also say which raw watch lines it wants (``consume(..., lines=...)``): when every
consumer of a resource does, a line none of them wants is dropped before kopf parses it (kopf's
``api.iter_jsonlines``, wrapped the same way, learns the resource from a context variable set by
the watch). The Pod informers of claims and taints want only lines that mention
``resourceClaims`` or ``extendedResourceClaimStatus``: the JSON of other Pods' events (every Pod of
the cluster, most of a busy cluster's watch traffic) is never decoded. A dropped line's
resourceVersion is still reported (``skipped``), so the informer's stale-watch check knows the
watch is alive.

A BOOKMARK's resourceVersion (the end of the streamed initial events, then the API server's
periodic bookmarks) is reported too (``listen_bookmarks``), as client-go's reflector records it:
the watch has seen everything up to there. Without it, an object deleted between the start-up
LIST and the watch's own listing looked like an event the watch never delivered.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections import defaultdict
from typing import Any, AsyncIterator, Callable, Protocol

from kopf._cogs.clients import api, watching

from ..logging import get_logger

Listener = Callable[[], None]
Consumer = Callable[[dict], None]


class Lines(Protocol):
    def wants(self, line: bytes) -> bool: ...
    def skipped(self, resource_version: int) -> None: ...


log = get_logger(__name__)
_listeners: dict[tuple[str, str], list[Listener]] = defaultdict(list)
_consumers: dict[tuple[str, str], list[Consumer]] = defaultdict(list)
_lines: dict[tuple[str, str], list[Lines | None]] = defaultdict(list)  # one per consumer
_bookmarks: dict[tuple[str, str], list[Callable[[int], None]]] = defaultdict(list)
_original = watching.infinite_watch
_original_lines = api.iter_jsonlines
_watching: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar("kopflistings_watching",
                                                                                   default=None)
# Only object events may be dropped; their line starts with the type (metav1.WatchEvent's order).
_OBJECT_EVENTS = (b'{"type":"ADDED"', b'{"type":"MODIFIED"', b'{"type":"DELETED"')
_RESOURCE_VERSION = re.compile(rb'"resourceVersion":"(\d+)"')  # the object's: metadata comes first


async def _infinite_watch(*, settings: Any, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
    # aclosing: when this generator is closed (kopf's watcher cancelled while it held an event),
    # kopf's own is closed with it, at once, not later by the garbage collector after the API
    # session is gone.
    key = (resource.group, resource.plural)
    _watching.set(key)  # for _iter_jsonlines below: this task runs this resource's watch only
    async with contextlib.aclosing(_original(settings=settings, resource=resource, namespace=namespace,
                                             **kwargs)) as events:
        async for event in events:
            if event is watching.Bookmark.LISTED:
                for listener in list(_listeners.get(key, ())):
                    listener()
            elif event.get("type") == "BOOKMARK":
                if hearers := _bookmarks.get(key):
                    version = _int(((event.get("object") or {}).get("metadata") or {}).get("resourceVersion"))
                    for hearer in list(hearers):
                        hearer(version)
            elif (consumers := _consumers.get(key)):
                for consumer in list(consumers):
                    try:
                        consumer(event)
                    except Exception as e:  # noqa: BLE001 - one bad event must not end the watch
                        log.error("event handler failed", resource=resource.plural,
                                  error=f"{type(e).__name__}: {e}", exc_info=e)
                continue
            yield event


async def _iter_jsonlines(content: Any, *args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
    key = _watching.get()
    wanted = list(_lines.get(key, ())) if key is not None else []
    if not wanted or any(lines is None for lines in wanted):
        async for line in _original_lines(content, *args, **kwargs):
            yield line
        return
    async for line in _original_lines(content, *args, **kwargs):
        if not line.startswith(_OBJECT_EVENTS) or any(lines.wants(line) for lines in wanted):
            yield line
            continue
        match = _RESOURCE_VERSION.search(line)
        version = int(match.group(1)) if match else 0
        for lines in wanted:
            lines.skipped(version)


def install() -> None:
    watching.infinite_watch = _infinite_watch
    api.iter_jsonlines = _iter_jsonlines


def listen(group: str, plural: str, listener: Listener) -> Callable[[], None]:
    """Call ``listener`` after each listing of ``group``/``plural``; returns the undo."""
    install()
    _listeners[group, plural].append(listener)
    return lambda: _listeners[group, plural].remove(listener)


def listen_bookmarks(group: str, plural: str, hearer: Callable[[int], None]) -> Callable[[], None]:
    """Call ``hearer(resourceVersion)`` for each BOOKMARK of ``group``/``plural``; returns the undo."""
    install()
    _bookmarks[group, plural].append(hearer)
    return lambda: _bookmarks[group, plural].remove(hearer)


def _int(version: Any) -> int:
    try:
        return int(version)
    except (TypeError, ValueError):
        return 0


def consume(group: str, plural: str, consumer: Consumer, lines: Lines | None = None) -> Callable[[], None]:
    """Hand every event of ``group``/``plural`` to ``consumer`` instead of kopf; returns the undo.
    ``lines``: which raw watch lines the consumer wants (None: all)."""
    install()
    _consumers[group, plural].append(consumer)
    _lines[group, plural].append(lines)

    def undo() -> None:
        _consumers[group, plural].remove(consumer)
        _lines[group, plural].remove(lines)

    return undo
