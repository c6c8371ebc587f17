import pytest

from operators.core.api.ratelimit import TokenBucket
from tests.unit.fakeclock import Clock


def test_bucket_reserves_one_token_per_interval():
    clock = Clock()
    bucket = TokenBucket(20, clock=clock)
    waits = [bucket.reserve() for _ in range(200)]
    assert waits[0] == 0
    assert waits[1] == pytest.approx(0.05)
    assert waits[-1] == pytest.approx(199 * 0.05)  # 200 evictions at 20/s: spread over 9.95 s
    clock.now += 20
    assert bucket.reserve() == 0  # refilled, but never above the burst of one


def test_bucket_lets_a_burst_through_then_spaces_the_rest():
    clock = Clock()
    bucket = TokenBucket(10, burst=100, clock=clock)  # the work queue's retry limit
    waits = [bucket.reserve() for _ in range(101)]
    assert waits[:100] == [0] * 100
    assert waits[100] == pytest.approx(0.1)
    clock.now += 0.1
    assert bucket.reserve() == pytest.approx(0.1)  # the refill paid the previous reservation


def test_a_wait_longer_than_allowed_takes_no_token():
    """The API client's limit: a request never queues for longer than it may wait, so the
    bucket's debt is bounded by what callers accept (rate.Limiter.Wait with a deadline)."""
    clock = Clock()
    bucket = TokenBucket(1, clock=clock)
    assert bucket.reserve(max_wait=5) == 0
    waits = [bucket.reserve(max_wait=5) for _ in range(100)]
    assert waits[:5] == [pytest.approx(w) for w in (1, 2, 3, 4, 5)]
    assert waits[5:] == [None] * 95  # refused, and nothing taken:
    clock.now += 6
    assert bucket.reserve(max_wait=5) == 0  # the debt was 5 tokens, not 100


def test_a_cancelled_reservation_gives_its_token_back():
    clock = Clock()
    bucket = TokenBucket(1, clock=clock)
    assert bucket.reserve() == 0
    assert bucket.reserve() == pytest.approx(1)
    bucket.cancel()  # that caller went away before its turn
    assert bucket.reserve() == pytest.approx(1)  # not 2: the next one gets the freed turn


async def test_take_waits_and_a_cancelled_take_gives_its_token_back():
    import asyncio

    bucket = TokenBucket(10)
    assert await bucket.take(max_wait=1)
    waiters = [asyncio.create_task(bucket.take(max_wait=60)) for _ in range(50)]  # 5 s of debt
    await asyncio.sleep(0)
    for waiter in waiters:
        waiter.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)
    assert bucket.reserve() <= 0.1  # the abandoned waits left no debt behind
    assert not await bucket.take(max_wait=0.01)
