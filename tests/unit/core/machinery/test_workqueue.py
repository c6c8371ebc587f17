import asyncio
import itertools

from operators.core.machinery.workqueue import Backoff, WorkQueue


async def test_dedup_and_reprocess_when_added_during_processing():
    seen: list[str] = []
    gate = asyncio.Event()

    async def sync(key: str) -> None:
        seen.append(key)
        if len(seen) == 1:
            await gate.wait()

    queue = WorkQueue("t", sync, workers=4)
    queue.add("a")
    queue.add("a")  # deduplicated while queued
    queue.start()
    await asyncio.sleep(0.05)
    queue.add("a")  # arrives while "a" is processing: processed once more afterwards, not in parallel
    queue.add("a")
    await asyncio.sleep(0.05)
    assert seen == ["a"]
    gate.set()
    await queue.wait_idle()
    await queue.stop()
    assert seen == ["a", "a"]


async def test_failures_retry_with_backoff_then_forget():
    attempts: list[float] = []

    async def sync(key: str) -> None:
        attempts.append(asyncio.get_running_loop().time())
        if len(attempts) < 4:
            raise RuntimeError("transient")

    queue = WorkQueue("t", sync, workers=1, backoff=Backoff(base=0.02, cap=1.0))
    queue.start()
    queue.add("k")
    for _ in range(100):
        await asyncio.sleep(0.02)
        if len(attempts) == 4 and not len(queue):
            break
    await queue.stop()
    assert len(attempts) == 4
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.015 and gaps[1] >= 0.035 and gaps[2] >= 0.075  # 20, 40, 80 ms
    assert queue.failures("k") == 0


def test_backoff_is_exponential_and_capped():
    backoff = Backoff(base=0.005, cap=1000)
    assert [backoff.delay(n) for n in (1, 2, 3)] == [0.005, 0.01, 0.02]
    assert backoff.delay(40) == 1000


async def test_stop_ends_the_timer_even_when_cancelled_as_it_wakes():
    """A cancellation that comes with the timer's wake-up must end it: with asyncio.wait_for on
    3.11 it was returned as the wake-up instead, the timer slept on, and stop() never returned
    (a CI run hung in the event loop's teardown). Every interleaving of the wake-up's steps and
    the cancel, counted in loop iterations, not seconds."""

    async def sync(key: str) -> None:
        pass

    for steps in range(8):
        queue = WorkQueue("t", sync, workers=1)
        queue.start()
        queue.add_after("later", 3600)
        await asyncio.sleep(0)  # the timer now waits for its wake-up
        queue.add_after("sooner", 1800)  # wakes it
        for _ in range(steps):
            await asyncio.sleep(0)
        stopping = asyncio.ensure_future(queue.stop())
        for _ in range(20):
            await asyncio.sleep(0)
        assert stopping.done(), f"stop() still waits for the timer, cancelled {steps} loop steps after its wake-up"
