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
