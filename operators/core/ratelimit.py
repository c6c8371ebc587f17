"""A token bucket with reservations (golang.org/x/time/rate's ``Reserve``).

A caller takes its token at once and learns how long to wait for it, so nobody sleeps while
holding a worker, and a caller may also ignore the wait when a longer one applies anyway. The
work queue's overall retry limit and the taints operator's eviction limits both use it.
"""

from __future__ import annotations

import time
from typing import Callable


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    def __init__(self, rate: float, burst: int = 1, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._last = clock()

    def reserve(self) -> float:
        """Take a token; return the seconds until it may be used (0: now)."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
