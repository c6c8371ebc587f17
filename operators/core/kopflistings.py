"""Tells informers when kopf has finished a (re)listing, even an empty one.

kopf marks the end of every listing (its LIST, or the API server's streamed initial events) with
an internal ``Bookmark.LISTED`` that it keeps to itself: handlers only see the listed objects, as
events of type None. A relisting that finds nothing (every object was deleted while the watch was
away) therefore reaches no handler, and an informer would never learn that its cached objects
are gone. This wraps kopf's ``infinite_watch`` (looked up on its module at each watcher start,
so the wrapper applies to every watch started after ``install``) and calls the listeners of the
resource when the bookmark passes. kopf is pinned (requirements.lock); the unit test
``test_core_kopflistings`` fails if the private names move.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, AsyncIterator, Callable

from kopf._cogs.clients import watching

Listener = Callable[[], None]

_listeners: dict[tuple[str, str], list[Listener]] = defaultdict(list)
_original = watching.infinite_watch


async def _infinite_watch(*, settings: Any, resource: Any, namespace: Any, **kwargs: Any) -> AsyncIterator[Any]:
    # aclosing: when this generator is closed (kopf's watcher cancelled while it held an event),
    # kopf's own is closed with it, at once, not later by the garbage collector after the API
    # session is gone.
    async with contextlib.aclosing(_original(settings=settings, resource=resource, namespace=namespace,
                                             **kwargs)) as events:
        async for event in events:
            if event is watching.Bookmark.LISTED:
                for listener in list(_listeners.get((resource.group, resource.plural), ())):
                    listener()
            yield event


def install() -> None:
    watching.infinite_watch = _infinite_watch


def listen(group: str, plural: str, listener: Listener) -> Callable[[], None]:
    """Call ``listener`` after each listing of ``group``/``plural``; returns the undo."""
    install()
    _listeners[group, plural].append(listener)
    return lambda: _listeners[group, plural].remove(listener)
