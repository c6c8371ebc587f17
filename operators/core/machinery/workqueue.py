"""A deduplicating, rate-limited work queue with a fixed number of async workers.

Same contract as client-go's workqueue, which upstream controllers rely on:
- a key is queued at most once; a key re-added while a worker processes it is processed again
  afterwards, never by two workers at once;
- a failing key is retried with per-key exponential backoff (5 ms doubling up to 1000 s,
  ``DefaultControllerRateLimiter``), and the backoff is forgotten after a success;
- retries also pass an overall token bucket (10/s, burst 100) so a broken dependency cannot
  make the controller hammer the API server.

``QueueMetrics`` exports client-go's workqueue metrics (k8s.io/client-go/util/workqueue/metrics.go,
names, help and buckets from k8s.io/component-base/metrics/prometheus/workqueue/metrics.go) into
the registry it is given, for the queues it watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

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
        self.metrics: QueueMetrics | None = None
        self._added_at: dict[str, float] = {}  # waiting in _queue since (monotonic)
        self.started_at: dict[str, float] = {}  # processing since (monotonic)

    # -- producer side -----------------------------------------------------------------------

    def add(self, key: str) -> None:
        if key in self._processing:
            if key not in self._dirty and self.metrics is not None:
                self.metrics.adds.labels(self.name).inc()
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        if self.metrics is not None:
            self.metrics.adds.labels(self.name).inc()
        self._enqueue(key)

    def _enqueue(self, key: str) -> None:
        self._queued.add(key)
        self._added_at[key] = time.monotonic()
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
        if self.metrics is not None:
            self.metrics.retries.labels(self.name).inc()
        self.add_after(key, max(self._backoff.delay(failures), self._bucket.reserve()))

    def forget(self, key: str) -> None:
        self._failures.pop(key, None)

    def failures(self, key: str) -> int:
        return self._failures.get(key, 0)

    def __len__(self) -> int:
        return len(self._queued) + len(self._delayed)

    def depth(self) -> int:
        """Keys waiting for a worker (client-go's depth: not the delayed ones, not in progress)."""
        return len(self._queued)

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
            # Not asyncio.wait_for: on 3.11 it returns, instead of raising, a cancellation that
            # comes with the wake-up, and the queue's stop then waits for this loop forever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wakeup.wait()

    async def _worker(self, index: int) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._processing.add(key)
            started = time.monotonic()
            self.started_at[key] = started
            added = self._added_at.pop(key, None)
            if self.metrics is not None and added is not None:
                self.metrics.queue_duration.labels(self.name).observe(started - added)
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
                self.started_at.pop(key, None)
                if self.metrics is not None:
                    self.metrics.work_duration.labels(self.name).observe(time.monotonic() - started)
                if key in self._dirty:
                    self._dirty.discard(key)
                    if key not in self._queued:
                        self._enqueue(key)  # its add was counted when it was marked dirty


def in_progress(started_at: Iterable[float], now: float) -> tuple[float, float]:
    """(unfinished work seconds, longest running processor seconds) of the keys being processed
    since ``started_at``, as client-go's ``updateUnfinishedWork`` computes them."""
    ages = [max(0.0, now - t) for t in started_at]
    return sum(ages), max(ages, default=0.0)


# ExponentialBuckets(10e-9, 10, 10): 10 ns to 100 s.
LATENCY_BUCKETS = tuple(10e-9 * 10**i for i in range(10))


class QueueMetrics:
    """client-go's workqueue families, label ``name``, in ``registry`` (one per operator): the
    counters and histograms the queues update, and the gauges computed at scrape time."""

    def __init__(self, registry: CollectorRegistry):
        self.queues: list[WorkQueue] = []
        self.adds = Counter("workqueue_adds", "Total number of adds handled by workqueue", ["name"], registry=registry)
        self.retries = Counter(
            "workqueue_retries", "Total number of retries handled by workqueue", ["name"], registry=registry
        )
        self.queue_duration = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            ["name"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.work_duration = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            ["name"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        registry.register(_QueueGauges(self.queues))

    def watch(self, queue: WorkQueue) -> None:
        queue.metrics = self
        self.queues.append(queue)
        for family in (self.adds, self.retries):
            family.labels(queue.name)  # a series from the start: rate() sees the first add


class _QueueGauges(Collector):
    def __init__(self, queues: list[WorkQueue]):
        self._queues = queues

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=["name"])
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has done that is in progress and hasn't been observed by "
            "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
            "threads by observing the rate at which this increases.",
            labels=["name"],
        )
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            labels=["name"],
        )
        now = time.monotonic()
        for queue in self._queues:
            total, oldest = in_progress(list(queue.started_at.values()), now)
            depth.add_metric([queue.name], queue.depth())
            unfinished.add_metric([queue.name], total)
            longest.add_metric([queue.name], oldest)
        yield from (depth, unfinished, longest)


class RetryableError(Exception):
    """An expected, transient failure: retried without a stack trace in the log."""
