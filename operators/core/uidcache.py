"""A bounded LRU of object UIDs (upstream controllers keep 500 deleted or evicted Pod UIDs)."""

from __future__ import annotations

from collections import OrderedDict


class UidCache:
    def __init__(self, size: int = 500):
        self._size = size
        self._uids: OrderedDict[str, None] = OrderedDict()

    def add(self, uid: str) -> None:
        self._uids[uid] = None
        self._uids.move_to_end(uid)
        while len(self._uids) > self._size:
            self._uids.popitem(last=False)

    def __contains__(self, uid: object) -> bool:
        return uid in self._uids
