"""client-go's reflector for one informer: WATCH from the start-up LIST's resourceVersion with
bookmarks, resume from the last resourceVersion heard, relist after 410 Gone.

- The watch starts where the informer's LIST ended (``Informer.prime``): nothing is listed
  twice and nothing between the two is missed. An informer that filters lines is primed by its
  reflector instead (``run(listing_first=True)``): the snapshot as streamed initial events, and
  the same request goes on as the watch, as client-go's watch-list reflector does. A snapshot
  of 150,000 Pods took minutes to arrive, and a new watch from its resourceVersion then met 410
  Gone (the API server keeps a few minutes of a busy resource's events) and listed it all
  again (bench/RESULTS.md, issue 32).
- Each watch asks the server to end it after a random 5 to 10 minutes (client-go's
  ``minWatchTimeout`` times one plus a random fraction, so that many clients do not reconnect
  at once); the next one resumes from the newest resourceVersion heard: an event's, or a
  BOOKMARK's (the API server sends them about once a minute, so a quiet watch still advances).
- 410 Gone (the answer, or an ERROR event in the stream: etcd compacted past our
  resourceVersion) means a relist: with the API server's streamed initial events where served
  (``sendInitialEvents``, KEP-3157: the snapshot arrives as events ending with a BOOKMARK
  annotated ``k8s.io/initial-events-end``, and the same request then goes on as the watch),
  else a paged LIST. Either way the informer applies client-go's ``Replace`` semantics.
- Any other failure (the connection breaks, 5xx, 429, a timeout) waits a moment and resumes
  from the same resourceVersion; client-go's reflector never gives up either.
- ``Informer.keep_line`` drops the raw lines of objects the informer never keeps (Pods without
  claims) before they are decoded; their resourceVersion still counts as heard.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .. import heap
from ..api.kube import ApiError, ConnectionLost, Kube
from ..api.resources import Resource
from ..logging import get_logger

if TYPE_CHECKING:  # the informer primes with list_streamed: a module cycle at run time
    from .informer import Informer

log = get_logger(__name__)

MIN_WATCH_TIMEOUT = 300  # client-go's reflector: minWatchTimeout = 5 minutes
READ_MARGIN = 30.0  # a watch silent this long past its timeout is a dead connection
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# Only object events may be dropped unparsed; their line starts with the type (metav1.WatchEvent's order).
OBJECT_EVENTS = (b'{"type":"ADDED"', b'{"type":"MODIFIED"', b'{"type":"DELETED"')
# The object's own metadata comes first in its JSON: its first name, namespace and resourceVersion.
_RESOURCE_VERSION = re.compile(rb'"resourceVersion":"(\d+)"')
_NAME = re.compile(rb'"metadata":\{"name":"([^"]*)"')
_NAMESPACE = re.compile(rb'"namespace":"([^"]*)"')


def backoff() -> Iterator[float]:
    """0.5, 1, 1, then 2 s for ever: back within 2 s of an API server that returns (the chaos
    tests' bound), and never given up."""
    return itertools.chain((0.5, 1.0, 1.0), itertools.repeat(2.0))


class Gone(Exception):
    """410: the resourceVersion to resume from is compacted away; only a relist helps."""


class Reflector:
    def __init__(self, kube: Kube, informer: Informer, *, watch_list: bool = False):
        """``watch_list``: relist with streamed initial events (the server offers them)."""
        self.kube = kube
        self.informer = informer
        self.watch_list = watch_list
        self.watching = False
        self.version: str | None = None  # where the next watch starts; None: relist first
        self.started = False  # ``run`` has begun once (a later call is the supervisor's restart)
        self.synced = asyncio.Event()  # the informer holds a complete snapshot (``run``)
        self.refused: ApiError | None = None  # what ended the first listing (``wait_synced``)
        self.log = log.bind(resource=informer.resource.plural)

    def _params(self, version: str | None, timeout: int) -> list[tuple[str, Any]]:
        params: list[tuple[str, Any]] = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", timeout),
            ("fieldSelector", self.informer.field_selector),
            ("labelSelector", self.informer.label_selector),
        ]
        if version is None:  # a relist through the watch: the snapshot first
            params += [("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan")]
        else:
            params.append(("resourceVersion", version))
        return params

    async def run(self, *, listing_first: bool = False) -> None:
        """Until cancelled. The informer must have been primed (its LIST gives the start), unless
        ``listing_first``: then the first request lists (streamed initial events where served,
        else a LIST) and ``synced`` is set once the snapshot is complete. Called again after a
        failure, it resumes from the last version it saw."""
        if not self.started:
            self.started = True
            if listing_first:
                self.version = None
            else:
                self.version = self.informer.list_version
                self.synced.set()
        elif self.version is None:
            # Restarted by the supervisor in the middle of a listing: that listing concludes nothing.
            self.informer.abort_relist()
        # Else restarted: go on from where the last watch got to (the start's version may be
        # compacted away by now, and a relist of every Pod is what the restart must not cost).
        delays = backoff()
        while True:
            try:
                if self.version is None:
                    await self._relist()
                else:
                    await self._watch(listing=False)
                delays = backoff()
            except Gone:
                self.log.info("watch resourceVersion expired (410 Gone), relisting")
                self._restart_listing()
            except (ApiError, ConnectionLost) as e:
                self.watching = False
                if isinstance(e, ApiError) and not self.synced.is_set() and _refused(e):
                    self.refused = e  # as a LIST would: the start-up fails with the API's answer
                    self.synced.set()
                    raise
                if isinstance(e, ApiError) and e.status == 410:
                    self._restart_listing()
                    continue
                if isinstance(e, ApiError) and self.version is None and self.watch_list and e.status in (400, 422):
                    self.log.info("streamed initial events refused, relisting with LIST", error=str(e))
                    self.watch_list = False
                    self._restart_listing()
                    continue
                if self.version is None:
                    self.informer.abort_relist()
                delay = next(delays)
                self.log.info("watch failed, retrying", error=str(e), retry_in=delay)
                await asyncio.sleep(delay)

    async def wait_synced(self) -> None:
        """Until the first listing is complete; raises what refused it (403, 404 ...)."""
        await self.synced.wait()
        if self.refused is not None:
            raise self.refused

    def _restart_listing(self) -> None:
        self.watching = False
        self.informer.abort_relist()
        self.version = None

    async def _relist(self) -> None:
        """client-go's ``Replace``; afterwards ``version`` is where the watch goes on."""
        informer = self.informer
        informer.begin_relist(first=not self.synced.is_set())
        if self.watch_list:
            await self._watch(listing=True)
            return
        items, version = await informer.list_again()
        for obj in items:
            informer.listed(obj)
        self._listed(version)

    def _listed(self, version: str) -> None:
        """The snapshot is complete: ``Replace``'s deletions, and the watch goes on from it."""
        self.informer.end_relist()
        self.version = version
        if not self.synced.is_set():
            self.informer.primed_at(version)
            self.synced.set()

    async def _watch(self, *, listing: bool) -> None:
        """One watch request until the server ends it. ``version`` follows every event and
        BOOKMARK, so whatever breaks the request, the next one resumes where this one got to; a
        streamed relist sets it only at its end (until then a break starts the relist over)."""
        timeout = int(MIN_WATCH_TIMEOUT * (1 + random.random()))  # noqa: S311 - jitter, not a secret
        informer = self.informer
        async with self.kube.stream(
            informer.resource.path(),
            self._params(None if listing else self.version, timeout),
            read_timeout=timeout + READ_MARGIN,
        ) as lines:
            self.watching = True
            version = self.version
            async for line in lines:
                if line.startswith(OBJECT_EVENTS) and not informer.wants(line):
                    seen = _line_version(line)
                    version = str(seen) if seen else version
                    informer.skipped(seen)
                    if listing:
                        informer.listed_key(_line_key(line))
                    else:
                        self.version = version
                    continue
                event = _decode(line)
                kind, obj = event.get("type"), event.get("object") or {}
                meta = obj.get("metadata") or {}
                if kind == "ERROR":
                    _raise(obj)
                if kind == "BOOKMARK":
                    version = meta.get("resourceVersion") or version
                    informer.on_bookmark(_int(version))
                    if listing and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                        self._listed(version or "")
                        listing = False
                    if not listing:
                        self.version = version
                    continue
                if kind not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                version = meta.get("resourceVersion") or version
                if listing and kind == "ADDED":
                    informer.listed(obj)
                    continue
                informer.on_event(event)
                if not listing:
                    self.version = version
        self.watching = False


def _refused(error: ApiError) -> bool:
    """An answer that trying again will not change (401, 403, 404 ...); 400 and 422 (no
    streamed initial events), 410, 429 and 5xx are handled or retried."""
    return error.status < 500 and error.status not in (400, 410, 422, 429)


def _decode(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as e:
        raise ConnectionLost("WATCH", "", e) from e  # a torn line: the connection broke mid-event
    return event if isinstance(event, dict) else {}


def _raise(status: dict[str, Any]) -> None:
    code = status.get("code") or 500
    if code == 410:
        raise Gone()
    raise ApiError(int(code), status, "WATCH")


def _line_version(line: bytes) -> int:
    match = _RESOURCE_VERSION.search(line)
    return int(match.group(1)) if match else 0


def _line_key(line: bytes) -> str:
    name = _NAME.search(line)
    namespace = _NAMESPACE.search(line)
    if name is None:
        return ""
    return (f"{namespace.group(1).decode()}/" if namespace else "") + name.group(1).decode()


def _int(version: str | None) -> int:
    try:
        return int(version or 0)
    except ValueError:
        return 0


async def list_streamed(
    kube: Kube,
    resource: Resource,
    namespace: str | None = None,
    *,
    keep: Callable[[dict[str, Any]], bool],
    keep_line: Callable[[bytes], bool],
    field_selector: str | None = None,
    label_selector: str | None = None,
    read_timeout: float = 60.0,
    trim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """A list as the API server's streamed initial events (``sendInitialEvents``, KEP-3157) with
    the reflector's line filter: an object whose raw line ``keep_line`` refuses is never parsed
    (a LIST's pages must be decoded whole, and most of a large cluster's Pods use no claim: that
    decoding was most of ``kubectl dra devices`` at scale). Returns what ``keep`` accepts and the
    resourceVersion of the snapshot. A server without streamed initial events (400, 422), or a
    stream that fails (429, 5xx, a broken or silent connection), gets the paged LIST instead,
    which is retried: a start-up must not fail on what a retried LIST rides out. ``trim``: what
    is collected of each kept object, as it comes (``Kube.list_with_version``). The cyclic
    collector is paused meanwhile (``heap.bulk``)."""
    params = [
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("sendInitialEvents", "true"),
        ("resourceVersionMatch", "NotOlderThan"),
        ("timeoutSeconds", MIN_WATCH_TIMEOUT),
        ("fieldSelector", field_selector),
        ("labelSelector", label_selector),
    ]
    try:
        with heap.bulk():
            return await _snapshot(kube, resource.path(namespace), params, keep, keep_line, read_timeout, trim)
    except ApiError as e:
        # Refused (400, 422: no streamed initial events) or a failure the paged LIST retries
        # (429, 5xx); anything else (403, 404) the LIST would meet as well.
        if e.status not in (400, 422, 429) and e.status < 500:
            raise
    except (ConnectionLost, Gone):
        pass  # broken, silent, ended early or expired: the paged LIST, retried as every request is
    return await kube.list_with_version(
        resource, namespace, field_selector=field_selector, label_selector=label_selector, keep=keep, trim=trim
    )


async def _snapshot(
    kube: Kube,
    path: str,
    params: list[tuple[str, Any]],
    keep: Callable[[dict[str, Any]], bool],
    keep_line: Callable[[bytes], bool],
    read_timeout: float,
    trim: Callable[[dict[str, Any]], dict[str, Any]] | None,
) -> tuple[list[dict[str, Any]], str]:
    """``list_streamed``'s stream: the objects ``keep`` accepts until the end of the snapshot."""
    items: list[dict[str, Any]] = []
    async with kube.stream(path, params, read_timeout=read_timeout) as lines:
        async for line in lines:
            if line.startswith(OBJECT_EVENTS) and not keep_line(line):
                continue
            event = _decode(line)
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                _raise(obj)
            meta = obj.get("metadata") or {}
            if kind == "BOOKMARK" and (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                return items, meta.get("resourceVersion") or ""
            if kind == "ADDED" and keep(obj):
                items.append(obj if trim is None else trim(obj))
    raise ConnectionLost("WATCH", path, EOFError("the stream ended before its snapshot"))
