"""client-go's workqueue metrics of a WorkQueue: what is counted when, as client-go counts it
(k8s.io/client-go/util/workqueue/queue.go: an add of a key already waiting is no add)."""

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from operators.core.machinery.workqueue import LATENCY_BUCKETS, QueueMetrics, WorkQueue, in_progress


def _value(registry: CollectorRegistry, name: str, queue: str = "q") -> float:
    value = registry.get_sample_value(name, {"name": queue})
    assert value is not None, name
    return value


def test_in_progress_sums_and_takes_the_longest():
    assert in_progress([], 10.0) == (0.0, 0.0)
    assert in_progress([4.0, 7.0, 9.0], 10.0) == (6.0 + 3.0 + 1.0, 6.0)
    assert in_progress([11.0], 10.0) == (0.0, 0.0)  # a clock read just after "now": never negative


def test_the_buckets_are_client_gos():
    # ExponentialBuckets(10e-9, 10, 10)
    assert LATENCY_BUCKETS[0] == pytest.approx(1e-8) and LATENCY_BUCKETS[-1] == pytest.approx(10.0**1)
    assert len(LATENCY_BUCKETS) == 10


async def test_adds_depth_retries_and_durations():
    registry = CollectorRegistry()
    started, release = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def sync(key: str) -> None:
        calls.append(key)
        if key == "slow":
            started.set()
            await release.wait()
        if key == "bad" and calls.count("bad") == 1:
            raise RuntimeError("once")

    queue = WorkQueue("q", sync, workers=1)
    QueueMetrics(registry).watch(queue)
    assert _value(registry, "workqueue_adds_total") == 0  # a series from the start
    queue.add("slow")
    queue.add("slow")  # waiting already: no add
    queue.add("bad")
    assert _value(registry, "workqueue_adds_total") == 2
    assert _value(registry, "workqueue_depth") == 2

    queue.start()
    await started.wait()
    assert _value(registry, "workqueue_depth") == 1  # "bad" waits; "slow" is processing
    assert _value(registry, "workqueue_longest_running_processor_seconds") >= 0
    queue.add("slow")  # while processing: marked dirty, one add
    queue.add("slow")  # dirty already: no add
    assert _value(registry, "workqueue_adds_total") == 3
    release.set()
    await queue.wait_idle()
    await queue.stop()

    assert calls.count("slow") == 2 and calls.count("bad") == 2
    assert _value(registry, "workqueue_retries_total") == 1
    # slow (twice) and bad (twice) were processed: four works, each after its wait in the queue
    assert _value(registry, "workqueue_work_duration_seconds_count") == 4
    assert _value(registry, "workqueue_queue_duration_seconds_count") == 4
    # the retry of "bad" was added again by the delay timer: one more add
    assert _value(registry, "workqueue_adds_total") == 4
    assert _value(registry, "workqueue_depth") == 0
    assert _value(registry, "workqueue_unfinished_work_seconds") == 0


async def test_a_queue_without_metrics_counts_nothing_and_works():
    seen: list[str] = []

    async def sync(key: str) -> None:
        seen.append(key)

    queue = WorkQueue("plain", sync, workers=1)
    queue.add("a")
    queue.start()
    await queue.wait_idle()
    await queue.stop()
    assert seen == ["a"] and queue.metrics is None
