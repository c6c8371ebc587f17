"""Eviction rate limits: a global one and one per DeviceTaintRule, in evictions per second.

Token buckets with reservations (``core.ratelimit``): a Pod that is due takes its token at once
and learns how long to wait for it, so a worker never sleeps on a limit and a limited rule never
holds up Pods of other rules. The burst is one eviction: a limit of 20/s spreads 200 evictions
over 10 s instead of letting a first batch through at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..core.api.ratelimit import TokenBucket


class EvictionLimiter:
    """The global bucket (rate 0: unlimited) and one bucket per rule UID with its own rate."""

    def __init__(self, global_rate: float = 0.0, clock: Callable[[], float] = time.monotonic):
        self._clock = clock
        self._global = TokenBucket(global_rate, clock=clock) if global_rate > 0 else None
        self._rules: dict[str, TokenBucket] = {}

    def reserve(self, rule_rates: dict[str, float]) -> float:
        """Reserve one eviction against the global limit and each rule's limit (rule UID ->
        evictions per second); return the seconds to wait, the longest of them."""
        waits = [self._global.reserve()] if self._global else []
        for uid, rate in rule_rates.items():
            bucket = self._rules.get(uid)
            if bucket is None or bucket.rate != rate:
                bucket = self._rules[uid] = TokenBucket(rate, clock=self._clock)
            waits.append(bucket.reserve())
        return max(waits, default=0.0)

    def forget_rule(self, uid: str) -> None:
        self._rules.pop(uid, None)
