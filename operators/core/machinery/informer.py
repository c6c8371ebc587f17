"""A watched resource's cache with client-go's informer guarantees, fed by kopf's watch events.

kopf delivers ADDED/MODIFIED/DELETED events, and, whenever it (re)lists, one event of type None
for every object that exists: at its start, after a 410 Gone (etcd compacted past the watch's
resourceVersion) and after a listing that broke. It never says which objects vanished while it
was not watching. client-go's reflector does (``Replace`` reports them as
``DeletedFinalStateUnknown``); without that a Pod deleted in such a gap stays "alive" in the cache,
its claim stays reserved and its device leaks until a restart.

How we get the same guarantee under kopf (the design section of the README says more):

1. ``prime`` is the one LIST at start-up, before any worker runs.
2. The first type-None event, or the end of a listing (even an empty one: ``kopflistings``),
   opens a relist *epoch*: the store's stamp counter is read, and
   every object kopf lists, or that is stored for any other reason after that moment, is known
   to exist. The epoch lasts as long as the listing, the objects ``keep`` drops and the watch
   lines nobody parses included, and closes ``settle`` seconds after its end (or after the last
   listed object). Had the plain Pods' lines not counted, a listing of many of them after the
   Pods with claims closed the epoch early, and its end opened another in which every cached Pod
   was a suspect: a GET each, or one more LIST of all Pods, at every start of a big cluster.
3. Objects stored before the epoch and not heard of since are *suspects*. Each is checked with
   the API server (a GET each, or one LIST when there are many): gone, or replaced by another
   object of the same name (another UID), is reported to the controller as a deletion.

The check asks the API server, so it is exact whatever the timing: a suspect that kopf had
simply not delivered yet is found alive and kept. Kubernetes never reuses a UID, so the store's
tombstones keep a deleted object from coming back through a late event.

The informer also notices a watch that has gone quiet while the resource changed (see
``check_stale``): liveness then fails and Kubernetes restarts the operator.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable

from ..api.kube import ApiError, ConnectionLost, Kube
from ..logging import get_logger
from ..api.resources import Resource
from .store import Obj, Store, key_of, resource_version, uid_of

log = get_logger(__name__)

Handler = Callable[[Obj, bool], None]

MANY_SUSPECTS = 50       # above this, one LIST is cheaper than a GET each
_VERIFY_DELAYS = (1, 2, 5, 10, 30)


class Informer:
    def __init__(self, kube: Kube, resource: Resource, store: Store, handler: Handler, *,
                 field_selector: str | None = None, label_selector: str | None = None,
                 settle: float = 2.0, silence: float = 600.0, kind: str | None = None,
                 keep: Callable[[Obj], bool] | None = None, keep_line: Callable[[bytes], bool] | None = None):
        """``handler(obj, deleted)`` is the controller's event handler; it updates ``store``.
        ``kind`` is set on listed objects (a LIST's items carry none; Events need it).
        ``keep``: objects it refuses are dropped before they cost anything (no handler, no
        cache entry) unless already stored (then the handler sees them change or go).
        ``keep_line``: the same test on a raw watch line, True for every line whose object
        ``keep`` could accept (it may say True more often, never less); the other lines are not
        even parsed (``kopflistings``)."""
        self.kube = kube
        self.resource = resource
        self.store = store
        self.handler = handler
        self.field_selector, self.label_selector = field_selector, label_selector
        self.settle = settle
        self.silence = silence
        self.kind = kind
        self.keep = keep
        self.keep_line = keep_line
        self.primed = False
        self.relists = 0
        self.deletions_found = 0
        self.lines_skipped = 0                 # watch lines dropped unparsed (keep_line)
        self.bookmarks = 0                     # BOOKMARK events heard
        self.last_event_at = time.monotonic()
        self.last_rv = 0                       # newest resourceVersion heard of
        self.stale_reason = ""                 # set when the watch is known to be stuck
        self._epoch: tuple[int, set[str]] | None = None   # (first stamp, keys listed)
        self._settle_timer: asyncio.TimerHandle | None = None
        self._settle_until = 0.0               # loop time the epoch may close at
        self._listing = False                  # between a listing's first object and its end
        self._verifying: set[asyncio.Task] = set()
        self._pending_probe: tuple[int, float] | None = None
        self._stopped = False
        self.log = log.bind(resource=resource.plural)

    def stop(self) -> None:
        """At shutdown, before the API client closes: no new relist check, running ones cancelled
        (kopf may still relist while it stops its watches)."""
        self._stopped = True
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        self._epoch = None
        for task in list(self._verifying):
            task.cancel()

    # -- start -------------------------------------------------------------------------------

    async def prime(self) -> int:
        """The start-up LIST; every object ``keep`` accepts goes to the handler (the others are
        dropped page by page: start-up costs the kept objects, not the cluster). Returns how
        many were kept."""
        items, version = await self.kube.list_with_version(
            self.resource, field_selector=self.field_selector, label_selector=self.label_selector, keep=self.keep)
        for obj in items:
            self._deliver(self._with_kind(obj), False)
        self.last_rv = max(self.last_rv, _int(version))
        self.last_event_at = time.monotonic()
        self.primed = True
        return len(items)

    # -- events from kopf --------------------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        obj = event["object"]
        kind = event.get("type")
        self.last_event_at = time.monotonic()
        self.last_rv = max(self.last_rv, resource_version(obj))
        self.stale_reason = ""
        wanted = self.keep is None or self.keep(obj) or key_of(obj) in self.store
        if kind is None and self.primed:
            self._listing = True
            self._listed(key_of(obj) if wanted else None)
        if wanted:
            self._deliver(obj, kind == "DELETED")

    # ``kopflistings.Lines``: raw watch lines, before kopf parses them.
    def wants(self, line: bytes) -> bool:
        return self.keep_line is None or self.keep_line(line)

    def skipped(self, resource_version: int) -> None:
        """A line nobody wanted: the watch is alive and has reached this resourceVersion (what
        the stale-watch check compares with the API server's)."""
        self.lines_skipped += 1
        self.reached(resource_version)
        if self._listing:  # a listed object nobody wants: the listing goes on
            self._listed(None)

    def on_bookmark(self, resource_version: int) -> None:
        """A BOOKMARK of the watch (``kopflistings.listen_bookmarks``)."""
        self.bookmarks += 1
        self.reached(resource_version)

    def reached(self, resource_version: int) -> None:
        """The watch has seen every change up to ``resource_version`` (a skipped line, or a
        BOOKMARK: ``kopflistings.listen_bookmarks``)."""
        self.last_event_at = time.monotonic()
        self.last_rv = max(self.last_rv, resource_version)
        self.stale_reason = ""

    def _deliver(self, obj: Obj, deleted: bool) -> None:
        if self.keep is not None and not self.keep(obj) and key_of(obj) not in self.store:
            return
        self.handler(obj, deleted)

    def on_listed(self) -> None:
        """kopf finished a listing (``kopflistings``): an empty one delivers no object at all, so
        this opens the relist epoch too; the listed objects' own events may still follow (kopf
        hands them to per-object workers), which the settle time and the GET check allow for."""
        self._listing = False
        if self.primed:
            self._listed(None)

    def _listed(self, key: str | None) -> None:
        if self._stopped:
            return
        if self._epoch is None:
            self._epoch = (self.store.next_stamp(), set())
            self.relists += 1
            self.log.info("watch relisted, checking for objects deleted while not watching")
        if key is not None:
            self._epoch[1].add(key)
        # One timer per epoch, not one per listed object (a listing may be 150,000 lines).
        loop = asyncio.get_running_loop()
        self._settle_until = loop.time() + self.settle
        if self._settle_timer is None:
            self._settle_timer = loop.call_at(self._settle_until, self._close_epoch)

    def _close_epoch(self) -> None:
        self._settle_timer = None
        loop = asyncio.get_running_loop()
        if loop.time() < self._settle_until and not self._stopped:  # listed more meanwhile
            self._settle_timer = loop.call_at(self._settle_until, self._close_epoch)
            return
        if self._epoch is None:
            return
        start, listed = self._epoch
        self._epoch = None
        suspects = {key: uid_of(obj) for key in self.store.keys()
                    if key not in listed and self.store.stamp(key) < start
                    and (obj := self.store.get(key)) is not None}
        if not suspects:
            return
        task = asyncio.get_running_loop().create_task(self._verify(start, suspects),
                                                      name=f"informer-verify-{self.resource.plural}")
        self._verifying.add(task)
        task.add_done_callback(self._verified)

    def _verified(self, task: asyncio.Task) -> None:
        self._verifying.discard(task)
        if not task.cancelled() and task.exception() is not None and not self._stopped:
            error = task.exception()
            # Nothing else awaits this task: a bug must be loud, not "never retrieved".
            self.log.error("relist check failed", error=f"{type(error).__name__}: {error}", exc_info=error)

    # -- verification ------------------------------------------------------------------------

    async def _verify(self, start: int, suspects: dict[str, str]) -> None:
        """Ask the API server about every suspect until it answers (a relist happens when the
        connection is back, but the suspects of this one must not be forgotten meanwhile)."""
        for attempt in range(10_000):
            try:
                live = await (self._list_suspects(suspects) if len(suspects) > MANY_SUSPECTS
                              else self._get_suspects(suspects))
                break
            except (ApiError, ConnectionLost) as e:
                delay = _VERIFY_DELAYS[min(attempt, len(_VERIFY_DELAYS) - 1)]
                self.log.warning("cannot check objects after a relist, will retry", error=str(e),
                                 suspects=len(suspects), retry_in=delay)
                await asyncio.sleep(delay)
        gone = 0
        for key, uid in suspects.items():
            cached = self.store.get(key)
            if cached is None or uid_of(cached) != uid or self.store.stamp(key) >= start:
                continue  # an event told us about it meanwhile
            found = live.get(key)
            if found is not None and uid_of(found) == uid:
                self._deliver(self._with_kind(found), False)
                continue
            gone += 1
            self._deliver(cached, True)  # client-go: DeletedFinalStateUnknown
            if found is not None:
                self._deliver(self._with_kind(found), False)
        self.deletions_found += gone
        self.log.info("relist checked", suspects=len(suspects), deleted_while_not_watching=gone)

    async def _get_suspects(self, suspects: dict[str, str]) -> dict[str, Obj]:
        limit = asyncio.Semaphore(10)

        async def one(key: str) -> tuple[str, Obj | None]:
            namespace, _, name = key.rpartition("/")
            async with limit:
                return key, await self.kube.get_or_none(self.resource, name, namespace or None)

        found = await asyncio.gather(*(one(k) for k in suspects))
        return {key: obj for key, obj in found if obj is not None}

    async def _list_suspects(self, suspects: dict[str, str]) -> dict[str, Obj]:
        items, _ = await self.kube.list_with_version(
            self.resource, field_selector=self.field_selector, label_selector=self.label_selector,
            keep=lambda obj: key_of(obj) in suspects)
        return {key_of(obj): obj for obj in items}

    def _with_kind(self, obj: Obj) -> Obj:
        if self.kind and not obj.get("kind"):
            obj["kind"] = self.kind
            obj.setdefault("apiVersion", self.resource.group_version)
        return obj

    # -- liveness ----------------------------------------------------------------------------

    async def check_stale(self) -> str:
        """Called now and then by the watchdog. After ``silence`` seconds without an event, ask
        the API server for changes after the newest resourceVersion we heard of (a one-second
        watch); if it shows one and our watch still has not delivered it a round later, the watch
        is stuck. Returns the reason, or "" while all is well."""
        if self._pending_probe is not None:
            target, asked_at = self._pending_probe
            if self.last_rv >= target:
                self._pending_probe = None
            elif time.monotonic() - asked_at >= self.silence / 4:
                self.stale_reason = (f"watch of {self.resource.plural} silent for "
                                     f"{time.monotonic() - self.last_event_at:.0f}s although the resource "
                                     f"changed (resourceVersion {target} not delivered)")
                return self.stale_reason
            return ""
        if time.monotonic() - self.last_event_at < self.silence or not self.last_rv:
            return ""
        newer = await self._changes_since(self.last_rv)
        if newer and newer > self.last_rv:
            self._pending_probe = (newer, time.monotonic())
        return ""

    async def _changes_since(self, version: int) -> int:
        try:
            text = await self.kube.request("GET", self.resource.path(), params=[
                ("watch", "true"), ("resourceVersion", str(version)), ("timeoutSeconds", "1"),
                ("fieldSelector", self.field_selector), ("labelSelector", self.label_selector)],
                raw=True, retry=False, timeout=10)
        except ApiError as e:
            if e.status == 410:
                return 0  # compacted: nothing to compare with; the next event will tell
            raise
        newest = 0
        for line in text.splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("type") == "ERROR":
                return 0  # 410 inside the stream: compacted, as above
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                newest = max(newest, resource_version(event["object"]))
        return newest


def _int(version: str) -> int:
    try:
        return int(version)
    except (TypeError, ValueError):
        return 0
