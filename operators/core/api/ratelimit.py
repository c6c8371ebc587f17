"""A token bucket with reservations (golang.org/x/time/rate's ``Reserve``).

A caller takes its token at once and learns how long to wait for it, so nobody sleeps while
holding a worker, and a caller may also ignore the wait when a longer one applies anyway. The
work queue's overall retry limit and the taints operator's eviction limits both use it.

The API client's limit (DRA_API_QPS) waits with ``take``, as client-go's request waits with
``rate.Limiter.Wait``: a wait longer than the caller allows takes no token and fails at once
(``Wait`` with a context deadline), so the debt stays bounded; a wait that is cancelled gives its
token back (``Reservation.Cancel``), so abandoned requests do not delay the ones still waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import overload


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    def __init__(self, rate: float, burst: int = 1, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self._clock = rate, burst, clock
        self._tokens = float(burst)
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
        self._last = now

    @overload
    def reserve(self, max_wait: None = None) -> float: ...
    @overload
    def reserve(self, max_wait: float | None) -> float | None: ...
    def reserve(self, max_wait: float | None = None) -> float | None:
        """Take a token; return the seconds until it may be used (0: now). With ``max_wait``,
        a token that would come later than that is not taken: None."""
        self._refill()
        wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.rate
        if max_wait is not None and wait > max_wait:
            return None
        self._tokens -= 1
        return wait

    def cancel(self) -> None:
        """Give back a reserved token that will not be used."""
        self._refill()
        self._tokens = min(float(self.burst), self._tokens + 1)

    async def take(self, max_wait: float | None = None) -> bool:
        """Wait for a token; False (nothing taken) when that would take longer than ``max_wait``.
        Cancelled while waiting: the token goes back."""
        wait = self.reserve(max_wait)
        if wait is None:
            return False
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:
                self.cancel()
                raise
        return True
