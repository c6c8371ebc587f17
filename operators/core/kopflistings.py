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
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, AsyncIterator, Callable

from kopf._cogs.clients import watching

from .logging import get_logger

Listener = Callable[[], None]
Consumer = Callable[[dict], None]

log = get_logger(__name__)
_listeners: dict[tuple[str, str], list[Listener]] = defaultdict(list)
_consumers: dict[tuple[str, str], list[Consumer]] = defaultdict(list)
_original = watching.infinite_watch


async def _infinite_watch(*, settings: Any, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
    # aclosing: when this generator is closed (kopf's watcher cancelled while it held an event),
    # kopf's own is closed with it, at once, not later by the garbage collector after the API
    # session is gone.
    async with contextlib.aclosing(_original(settings=settings, resource=resource, namespace=namespace,
                                             **kwargs)) as events:
        key = (resource.group, resource.plural)
        async for event in events:
            if event is watching.Bookmark.LISTED:
                for listener in list(_listeners.get(key, ())):
                    listener()
            elif (consumers := _consumers.get(key)) and event.get("type") != "BOOKMARK":
                for consumer in list(consumers):
                    try:
                        consumer(event)
                    except Exception as e:  # noqa: BLE001 - one bad event must not end the watch
                        log.error("event handler failed", resource=resource.plural,
                                  error=f"{type(e).__name__}: {e}", exc_info=e)
                continue
            yield event


def install() -> None:
    watching.infinite_watch = _infinite_watch


def listen(group: str, plural: str, listener: Listener) -> Callable[[], None]:
    """Call ``listener`` after each listing of ``group``/``plural``; returns the undo."""
    install()
    _listeners[group, plural].append(listener)
    return lambda: _listeners[group, plural].remove(listener)


def consume(group: str, plural: str, consumer: Consumer) -> Callable[[], None]:
    """Hand every event of ``group``/``plural`` to ``consumer`` instead of kopf; returns the undo."""
    install()
    _consumers[group, plural].append(consumer)
    return lambda: _consumers[group, plural].remove(consumer)
