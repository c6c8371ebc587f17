"""A watched resource's cache with client-go's informer guarantees, fed by its reflector
(``watch.Reflector``: LIST, then WATCH from the list's resourceVersion, relist after 410 Gone).

A relist is client-go's ``Replace``: every object the new listing holds is delivered, and every
cached object the listing does not hold is reported deleted (``DeletedFinalStateUnknown``):
without that, a Pod deleted while the watch was away stays "alive" in the cache, its claim stays
reserved and its device leaks until a restart. The cache is also written by the controller's own
requests (a claim it just created is cached before its event comes), so "cached" means cached
before the relist began: the store's stamps tell which objects were stored after that moment,
and those are known to exist. This is exact without any timer: the listing is a snapshot taken
after the relist began.

The informer also notices a watch that has gone quiet while the resource changed (see
``check_stale``): liveness then fails and Kubernetes restarts the operator.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import GaugeMetricFamily

from .. import heap
from ..api.kube import ApiError, Kube
from ..api.resources import Resource
from ..logging import get_logger
from .store import Obj, Store, key_of, resource_version, uid_of

log = get_logger(__name__)

Handler = Callable[[Obj, bool], None]


class Informer:
    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        store: Store,
        handler: Handler,
        *,
        field_selector: str | None = None,
        label_selector: str | None = None,
        silence: float = 600.0,
        kind: str | None = None,
        keep: Callable[[Obj], bool] | None = None,
        keep_line: Callable[[bytes], bool] | None = None,
    ):
        """``handler(obj, deleted)`` is the controller's event handler; it updates ``store``.
        ``kind`` is set on listed objects (a LIST's items carry none; Events need it).
        ``keep``: objects it refuses are dropped before they cost anything (no handler, no
        cache entry) unless already stored (then the handler sees them change or go).
        ``keep_line``: the same test on a raw watch line, True for every line whose object
        ``keep`` could accept (it may say True more often, never less); the reflector does not
        even parse the other lines."""
        self.kube = kube
        self.resource = resource
        self.store = store
        self.handler = handler
        self.field_selector, self.label_selector = field_selector, label_selector
        self.silence = silence
        self.kind = kind
        self.keep = keep
        self.keep_line = keep_line
        self.primed = False
        self.list_version = ""  # the start-up LIST's resourceVersion: where the watch starts
        self.relists = 0
        self.deletions_found = 0
        self.lines_skipped = 0  # watch lines dropped unparsed (keep_line)
        self.bookmarks = 0  # BOOKMARK events heard
        self.last_event_at = time.monotonic()
        self.last_rv = 0  # newest resourceVersion heard of
        self.stale_reason = ""  # set when the watch is known to be stuck
        self._relist: tuple[int, set[str], bool] | None = None  # (first stamp, keys listed, start-up)
        self._pending_probe: tuple[int, float] | None = None
        self.log = log.bind(resource=resource.plural)

    def stop(self) -> None:
        """At shutdown: a relist in progress is abandoned."""
        self._relist = None

    # -- start -------------------------------------------------------------------------------

    async def prime(self) -> int:
        """The start-up LIST; every object ``keep`` accepts goes to the handler (the others are
        dropped page by page: start-up costs the kept objects, not the cluster). Each kept
        object is trimmed as it comes (what the store keeps of it): holding every whole object
        until the end was most of the claims operator's memory at the envelope. Returns how
        many were kept. (An informer with a ``keep_line`` on a server with streamed initial
        events is primed by its reflector instead, whose lines refused are never parsed:
        ``Reflector.run(listing_first=True)``.)"""
        items, version = await self.kube.list_with_version(
            self.resource,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            keep=self.keep,
            trim=self.store.trim,
        )
        with heap.bulk():  # the handlers cache (and slim) every object: no cycles made
            for obj in items:
                self._deliver(self._with_kind(obj), False)
        self.primed_at(version)
        return len(items)

    def primed_at(self, version: str) -> None:
        """The start-up snapshot is complete, at ``version``."""
        self.list_version = version
        self.reached(_int(version))
        self.primed = True

    # -- events from the reflector -----------------------------------------------------------

    def on_event(self, event: dict[str, Any]) -> None:
        """ADDED, MODIFIED or DELETED."""
        obj = event["object"]
        self.reached(resource_version(obj))
        self._deliver(obj, event.get("type") == "DELETED")

    def wants(self, line: bytes) -> bool:
        """Whether the raw watch line may hold an object ``keep`` accepts."""
        return self.keep_line is None or self.keep_line(line)

    def skipped(self, resource_version: int) -> None:
        """A line nobody wanted: the watch is alive and has reached this resourceVersion (what
        the stale-watch check compares with the API server's)."""
        self.lines_skipped += 1
        self.reached(resource_version)

    def on_bookmark(self, resource_version: int) -> None:
        self.bookmarks += 1
        self.reached(resource_version)

    def reached(self, resource_version: int) -> None:
        """The watch has seen every change up to ``resource_version``."""
        self.last_event_at = time.monotonic()
        self.last_rv = max(self.last_rv, resource_version)
        self.stale_reason = ""

    def _deliver(self, obj: Obj, deleted: bool) -> None:
        if self.keep is not None and not self.keep(obj) and key_of(obj) not in self.store:
            return
        self.handler(obj, deleted)

    # -- relist: client-go's Replace ---------------------------------------------------------

    def begin_relist(self, first: bool = False) -> None:
        """Before the relist's request is sent: what is stored from now on is known to exist.
        ``first``: the start-up snapshot (nothing cached yet), not counted as a relist."""
        self._relist = (self.store.next_stamp(), set(), first)
        if first:
            return
        self.relists += 1
        self.log.info("watch relisted, checking for objects deleted while not watching")

    def listed(self, obj: Obj) -> None:
        """An object of the relist's snapshot. Another object under the same name (another UID)
        means the cached one was deleted meanwhile."""
        self.reached(resource_version(obj))
        obj = self._with_kind(obj)
        key = key_of(obj)
        if self._relist is not None:
            self._relist[1].add(key)
        cached = self.store.get(key)
        if cached is not None and uid_of(cached) != uid_of(obj):
            self.deletions_found += 1
            self._deliver(cached, True)
        self._deliver(obj, False)

    def listed_key(self, key: str) -> None:
        """An object of the snapshot whose line was not parsed (``keep_line``)."""
        if self._relist is not None:
            self._relist[1].add(key)

    def end_relist(self) -> int:
        """The snapshot is complete: every object cached before the relist began and not in it
        is gone (``DeletedFinalStateUnknown``). Returns how many."""
        if self._relist is None:
            return 0
        start, listed, first = self._relist
        self._relist = None
        suspects = [
            obj
            for key in self.store.keys()
            if key not in listed and self.store.stamp(key) < start and (obj := self.store.get(key)) is not None
        ]
        for obj in suspects:
            self._deliver(obj, True)
        self.deletions_found += len(suspects)
        if not first:
            self.log.info("relist checked", suspects=len(suspects), deleted_while_not_watching=len(suspects))
        return len(suspects)

    def abort_relist(self) -> None:
        """The listing broke before its end: nothing can be concluded; the next relist starts over."""
        self._relist = None

    async def list_again(self) -> tuple[list[Obj], str]:
        """A consistent LIST with this informer's selectors: what ``keep`` accepts, and what is
        cached already (so that a change making it unwanted is seen), each trimmed as it comes
        (as in ``prime``). For relists and catch-ups."""
        keep = self.keep
        return await self.kube.list_with_version(
            self.resource,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
            keep=None if keep is None else (lambda obj: keep(obj) or key_of(obj) in self.store),
            trim=self.store.trim,
        )

    # -- catch-up: a fresh read for a replica that has just become leader --------------------

    async def catch_up(self) -> int:
        """A consistent LIST merged into the cache while the watch goes on: what the listing
        holds and the cache does not (or holds older) is delivered. Nothing is concluded from
        what the listing lacks (that is a relist's job, and the watch's): an object created
        after the listing began may already be cached. Safe beside the watch, because the store
        keeps the newer version and refuses a UID it saw deleted. Returns how many were new."""
        started = time.monotonic()
        items, _ = await self.list_again()
        new = 0
        for obj in items:
            cached = self.store.get(key_of(obj))
            if cached is not None and uid_of(cached) == uid_of(obj):
                if resource_version(cached) >= resource_version(obj):
                    continue
            elif cached is not None:
                self._deliver(cached, True)  # replaced under the same name meanwhile
            new += 1
            self._deliver(self._with_kind(obj), False)
        self.log.info("read afresh", listed=len(items), new=new, seconds=round(time.monotonic() - started, 2))
        return new

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
                self.stale_reason = (
                    f"watch of {self.resource.plural} silent for "
                    f"{time.monotonic() - self.last_event_at:.0f}s although the resource "
                    f"changed (resourceVersion {target} not delivered)"
                )
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
            text = await self.kube.request(
                "GET",
                self.resource.path(),
                params=[
                    ("watch", "true"),
                    ("resourceVersion", str(version)),
                    ("timeoutSeconds", "1"),
                    ("fieldSelector", self.field_selector),
                    ("labelSelector", self.label_selector),
                ],
                raw=True,
                retry=False,
                timeout=10,
            )
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


def watch_families(operator: str, informers: Iterable[Informer], now: float) -> list[GaugeMetricFamily]:
    """Per watched resource of ``operator``: seconds since its watch last heard anything (an event
    or a bookmark; the API server sends a bookmark about every minute on a quiet resource:
    ``defaultBookmarkFrequency``, k8s.io/apiserver pkg/storage/cacher/cacher.go), and
    whether the watchdog found it stuck (``check_stale``). Labelled by operator too: operators
    that share a process (and its metrics port) may watch the same resource."""
    silence = GaugeMetricFamily(
        "dra_operators_watch_silence_seconds",
        "Seconds since the watch of a resource last heard an event or bookmark",
        labels=["operator", "resource"],
    )
    stuck = GaugeMetricFamily(
        "dra_operators_watch_stuck",
        "1 while the watchdog finds the watch of a resource stuck (liveness fails), else 0",
        labels=["operator", "resource"],
    )
    for informer in informers:
        silence.add_metric([operator, informer.resource.plural], max(0.0, now - informer.last_event_at))
        stuck.add_metric([operator, informer.resource.plural], 1.0 if informer.stale_reason else 0.0)
    return [silence, stuck]
