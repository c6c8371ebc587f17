"""A bounded LRU of object UIDs (upstream controllers keep 500 deleted or evicted Pod UIDs).

With ``ttl``, a UID is also forgotten that many seconds after it was last added (checked
whenever the cache is used), as client-go's ``LRUExpireCache`` does: a cache that is only needed
for a while then costs what the last ``ttl`` seconds added, not its full size for ever after a
busy hour."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class UidCache:
    def __init__(self, size: int = 500, ttl: float | None = None, clock: Callable[[], float] = time.monotonic):
        self._size = size
        self._ttl = ttl
        self._clock = clock
        self._uids: OrderedDict[str, float] = OrderedDict()  # oldest first: when each was added

    def add(self, uid: str) -> None:
        self._uids[uid] = self._clock()
        self._uids.move_to_end(uid)
        while len(self._uids) > self._size:
            self._uids.popitem(last=False)
        self._expire()

    def __contains__(self, uid: object) -> bool:
        self._expire()
        return uid in self._uids

    def __len__(self) -> int:
        self._expire()
        return len(self._uids)

    def _expire(self) -> None:
        if self._ttl is None or not self._uids:
            return
        oldest = self._clock() - self._ttl
        while self._uids and next(iter(self._uids.values())) <= oldest:
            self._uids.popitem(last=False)
