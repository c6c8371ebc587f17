"""An in-memory cache of API objects (plain dicts) with secondary indexes.

Fed by watch events and by the controller's own writes, like client-go's informer store plus
its mutation cache, with the guarantees an informer gives:

- an object is only replaced by a newer resourceVersion of itself, so an object just written by
  the controller is visible before its watch event arrives and a late, older event cannot roll
  it back;
- deletes are matched by UID: a late DELETED of the old ``web-0`` does not remove the new one;
- a deleted UID is remembered for a while (a tombstone): a write's result, a late event or a
  relist that still carries it cannot bring it back. UIDs are never reused, so this is exact.
  A tombstone lasts ``TOMBSTONE_TTL`` (and at most ``TOMBSTONES`` are kept): what can still carry
  the UID is an answer to a request sent before the delete was seen, and no request lives that
  long; kept for ever, they filled every store to its count for hours (issue 26);
- a write's result that is already gone (deletionTimestamp and no finalizer left: the API server
  deleted it as it answered) counts as a delete, not an update.

Every stored key carries a stamp from a counter that grows with each store, so that a relist can
tell which objects it has not heard of since it began (see ``informer``).
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from .uidcache import UidCache

Obj = dict[str, Any]
IndexFunc = Callable[[Obj], Iterable[str]]

TOMBSTONES = 10_000  # deleted UIDs remembered per store at most; far more than a relist gap deletes
# Seconds a tombstone lasts: ten times a request's timeout (core/api/kube.py, 60 s) and longer than a
# relist check's GETs or LIST (informer) take, the slowest way an old copy of a deleted object
# can still arrive.
TOMBSTONE_TTL = 600.0


def key_of(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def uid_of(obj: Obj) -> str:
    return obj["metadata"].get("uid") or ""


def resource_version(obj: Obj) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:  # resourceVersion is opaque in principle; etcd's are integers
        return 0


def is_gone(obj: Obj) -> bool:
    """Deleted by the API server already: a deletionTimestamp and no finalizer to wait for."""
    meta = obj["metadata"]
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


class Store:
    def __init__(
        self,
        indexers: dict[str, IndexFunc] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``transform``: what is kept of each object stored (client-go's ``SetTransform``);
        ``clock``: what the tombstones' age is measured by."""
        self._transform = transform
        self._objects: dict[str, Obj] = {}
        self._stamps: dict[str, int] = {}
        self._counter = itertools.count(1)
        self._deleted = UidCache(TOMBSTONES, ttl=TOMBSTONE_TTL, clock=clock)
        self._indexers = dict(indexers or {})
        self._indexes: dict[str, dict[str, set[str]]] = {n: defaultdict(set) for n in self._indexers}
        self._keys: dict[str, dict[str, list[str]]] = {n: {} for n in self._indexers}

    def get(self, key: str) -> Obj | None:
        return self._objects.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)

    def values(self) -> list[Obj]:
        return list(self._objects.values())

    def keys(self) -> list[str]:
        return list(self._objects)

    def by_index(self, index: str, value: str) -> list[Obj]:
        return [self._objects[k] for k in sorted(self._indexes[index].get(value, ()))]

    def was_deleted(self, uid: str) -> bool:
        return bool(uid) and uid in self._deleted

    @property
    def tombstones(self) -> int:
        """How many deleted UIDs are remembered now."""
        return len(self._deleted)

    def next_stamp(self) -> int:
        """A stamp greater than any given so far (taken when a relist begins)."""
        return next(self._counter)

    def stamp(self, key: str) -> int:
        return self._stamps.get(key, 0)

    def trim(self, obj: Obj) -> Obj:
        """What is stored of ``obj``: ``transform``'s result, or ``obj`` itself without its
        managedFields. No decision reads those, often the largest part of an object; an update
        sent without them keeps the server's (its field manager takes the live ones)."""
        if self._transform is not None:
            return self._transform(obj)
        obj["metadata"].pop("managedFields", None)
        return obj

    def upsert(self, obj: Obj) -> bool:
        """Store ``obj`` unless it is deleted or a newer version is stored; return whether it was."""
        uid = uid_of(obj)
        if self.was_deleted(uid):
            return False
        if is_gone(obj):
            self.delete(obj)
            return False
        key = key_of(obj)
        old = self._objects.get(key)
        if old is not None and uid_of(old) == uid and resource_version(old) > resource_version(obj):
            return False
        obj = self.trim(obj)
        self._unindex(key)
        self._objects[key] = obj
        self._stamps[key] = next(self._counter)
        for name, func in self._indexers.items():
            values = sorted(set(func(obj)))
            self._keys[name][key] = values
            for value in values:
                self._indexes[name][value].add(key)
        return True

    def delete(self, obj_or_key: Obj | str) -> Obj | None:
        """The object was deleted in the API: remove it (given an object with a UID, only if the
        stored one has that UID) and remember its UID. Returns what was removed."""
        if isinstance(obj_or_key, str):
            old = self._objects.get(obj_or_key)
            if old is None:
                return None
            obj_or_key = old
        key, uid = key_of(obj_or_key), uid_of(obj_or_key)
        if uid:
            self._deleted.add(uid)
        old = self._objects.get(key)
        if old is None or (uid and uid_of(old) and uid_of(old) != uid):
            return None
        return self.discard(key)

    def discard(self, key: str) -> Obj | None:
        """Forget the object without saying it was deleted (it just stopped being of interest)."""
        self._unindex(key)
        self._stamps.pop(key, None)
        return self._objects.pop(key, None)

    def _unindex(self, key: str) -> None:
        for name in self._indexers:
            for value in self._keys[name].pop(key, ()):
                keys = self._indexes[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]
