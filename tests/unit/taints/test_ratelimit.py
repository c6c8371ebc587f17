import pytest

from operators.taints.ratelimit import EvictionLimiter
from tests.unit.fakeclock import Clock


def test_limiter_takes_the_longest_of_global_and_rule_limits():
    clock = Clock()
    limiter = EvictionLimiter(global_rate=10, clock=clock)
    assert limiter.reserve({"rule-a": 1}) == 0
    assert limiter.reserve({"rule-a": 1}) == pytest.approx(1.0)  # the rule's 1/s decides
    assert limiter.reserve({"rule-b": 100}) == pytest.approx(0.2)  # the global 10/s decides
    unlimited = EvictionLimiter(clock=clock)
    assert [unlimited.reserve({}) for _ in range(3)] == [0, 0, 0]


def test_changed_rule_rate_starts_a_new_bucket():
    clock = Clock()
    limiter = EvictionLimiter(clock=clock)
    limiter.reserve({"r": 1})
    assert limiter.reserve({"r": 1}) == pytest.approx(1.0)
    assert limiter.reserve({"r": 1000}) == 0
