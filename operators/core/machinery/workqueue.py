"""A deduplicating, rate-limited work queue with a fixed number of async workers.

Same contract as client-go's workqueue, which upstream controllers rely on:
- a key is queued at most once; a key re-added while a worker processes it is processed again
  afterwards, never by two workers at once;
- a failing key is retried with per-key exponential backoff (5 ms doubling up to 1000 s,
  ``DefaultControllerRateLimiter``), and the backoff is forgotten after a success;
- retries also pass an overall token bucket (10/s, burst 100) so a broken dependency cannot
  make the controller hammer the API server.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..api.kube import ConnectionLost, NotLeader
from ..api.ratelimit import TokenBucket
from ..logging import get_logger

if TYPE_CHECKING:
    from .supervisor import Supervisor

log = get_logger(__name__)


@dataclass(frozen=True)
class Backoff:
    base: float = 0.005
    cap: float = 1000.0
    qps: float = 10.0
    burst: int = 100

    def delay(self, failures: int) -> float:
        return min(self.cap, self.base * (2 ** max(0, failures - 1)))


class WorkQueue:
    def __init__(
        self, name: str, sync: Callable[[str], Awaitable[None]], workers: int = 10, backoff: Backoff = Backoff()
    ):
        self.name = name
        # Checked before every sync: False (not or no longer surely the leader) puts the key back.
        self.gate: Callable[[], bool] = lambda: True
        self._sync = sync
        self._workers = workers
        self._backoff = backoff
        self._bucket = TokenBucket(backoff.qps, backoff.burst)
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()  # waiting in _queue
        self._processing: set[str] = set()
        self._dirty: set[str] = set()  # re-added while processing
        self._failures: dict[str, int] = {}
        self._delayed: list[tuple[float, int, str]] = []
        self._counter = itertools.count()
        self._wakeup = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    # -- producer side -----------------------------------------------------------------------

    def add(self, key: str) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        heapq.heappush(self._delayed, (time.monotonic() + delay, next(self._counter), key))
        self._wakeup.set()

    def add_rate_limited(self, key: str) -> None:
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        self.add_after(key, max(self._backoff.delay(failures), self._bucket.reserve()))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def __len__(self) -> int:
        return len(self._queued) + len(self._delayed)

    # -- consumer side -----------------------------------------------------------------------

    def start(self, supervisor: Supervisor | None = None) -> None:
        """Start the workers and the delay timer, under ``supervisor`` when given (a worker or
        timer that fails is restarted; one that cannot run ends the process)."""
        names = [f"{self.name}-worker-{i}" for i in range(self._workers)] + [f"{self.name}-timer"]
        bodies = [functools.partial(self._worker, i) for i in range(self._workers)] + [self._timer]
        if supervisor is not None:
            self._tasks = [
                supervisor.spawn(name, body, queue=self.name) for name, body in zip(names, bodies, strict=True)
            ]
        else:
            self._tasks = [asyncio.create_task(body(), name=name) for name, body in zip(names, bodies, strict=True)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def wait_idle(self) -> None:
        """Until nothing is queued, delayed or processing (for tests and shutdown)."""
        while not (self._queue.empty() and not self._processing and not self._delayed):
            await asyncio.sleep(0.05)

    async def _timer(self) -> None:
        while True:
            now = time.monotonic()
            while self._delayed and self._delayed[0][0] <= now:
                _, _, key = heapq.heappop(self._delayed)
                self.add(key)
            timeout = self._delayed[0][0] - now if self._delayed else None
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass

    async def _worker(self, index: int) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            try:
                if not self.gate():
                    self._dirty.add(key)  # back in the queue once this round ends
                    await asyncio.sleep(1.0)  # a closed gate must not become a busy loop
                    continue
                await self._sync(key)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # every failure is retried, never fatal
                failures = self._failures.get(key, 0) + 1
                log.warning(
                    "sync failed, will retry",
                    queue=self.name,
                    key=key,
                    error=str(e),
                    failures=failures,
                    exc_info=not isinstance(e, (RetryableError, ConnectionLost, NotLeader)),
                )
                self.add_rate_limited(key)
            else:
                self.forget(key)
            finally:
                self._processing.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.add(key)


class RetryableError(Exception):
    """An expected, transient failure: retried without a stack trace in the log."""
