import pytest

from operators.core.ratelimit import TokenBucket

from .fakeclock import Clock


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
