"""An in-memory cache of API objects (plain dicts) with secondary indexes.

Fed by watch events and by the controller's own writes, like client-go's informer store plus
its mutation cache: an object is only replaced by one with a newer resourceVersion, so an
object just created or updated by the controller is visible before its watch event arrives,
and a late, older watch event cannot roll it back.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Iterable

Obj = dict[str, Any]
IndexFunc = Callable[[Obj], Iterable[str]]


def key_of(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def _rv(obj: Obj) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:  # resourceVersion is opaque in principle; etcd's are integers
        return 0


class Store:
    def __init__(self, indexers: dict[str, IndexFunc] | None = None):
        self._objects: dict[str, Obj] = {}
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

    def by_index(self, index: str, value: str) -> list[Obj]:
        return [self._objects[k] for k in sorted(self._indexes[index].get(value, ()))]

    def upsert(self, obj: Obj) -> bool:
        """Store ``obj`` unless a newer version is already stored; return whether it was."""
        key = key_of(obj)
        old = self._objects.get(key)
        if old is not None and old["metadata"].get("uid") == obj["metadata"].get("uid") and _rv(old) > _rv(obj):
            return False
        self._unindex(key)
        self._objects[key] = obj
        for name, func in self._indexers.items():
            values = sorted(set(func(obj)))
            self._keys[name][key] = values
            for value in values:
                self._indexes[name][value].add(key)
        return True

    def delete(self, obj_or_key: Obj | str) -> Obj | None:
        key = obj_or_key if isinstance(obj_or_key, str) else key_of(obj_or_key)
        self._unindex(key)
        return self._objects.pop(key, None)

    def _unindex(self, key: str) -> None:
        for name in self._indexers:
            for value in self._keys[name].pop(key, ()):
                keys = self._indexes[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]
