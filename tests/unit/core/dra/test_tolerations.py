"""A DeviceTaintRule's device selector: the one rule the taints operator (ruleMatchesDevice) and
the pool status controller (ruleMakesDeviceUnavailable) share."""

import pytest

from operators.core.dra.tolerations import device_selector_matches


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        (None, False),  # no selector: no device
        ({}, True),  # the empty one: every device
        ({"driver": "d"}, True),
        ({"driver": "d", "pool": "p", "device": "gpu-0"}, True),
        ({"driver": "other"}, False),
        ({"pool": "other"}, False),
        ({"device": "gpu-1"}, False),
        ({"driver": None, "pool": "p"}, True),  # an unset field matches anything
        ({"device": ""}, False),  # a set one must be equal, even empty
    ],
)
def test_device_selector_matches(selector, matches):
    assert device_selector_matches(selector, "d", "p", "gpu-0") is matches
