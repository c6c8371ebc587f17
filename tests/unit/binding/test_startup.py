"""The binding operator refuses to start where the scheduler would never wait for it."""

from types import SimpleNamespace

import kopf
import pytest

from operators.binding import operator
from operators.core.settings import Settings
from tests.unit.metrics_only import MetricsOnlyApiServer


@pytest.mark.parametrize(
    "metrics",
    [
        'kubernetes_feature_enabled{name="DRADeviceBindingConditions",stage="ALPHA"} 0\n',
        'kubernetes_feature_enabled{name="DynamicResourceAllocation",stage=""} 1\n',  # a release without it
    ],
)
async def test_the_operator_refuses_to_start_with_binding_conditions_off(metrics):
    runtime = SimpleNamespace(kube=MetricsOnlyApiServer(metrics))
    with pytest.raises(RuntimeError) as failed:
        await operator.start(runtime, Settings(), kopf.Memo())
    message = str(failed.value)
    assert "https://api.example:6443" in message and "DRADeviceBindingConditions off" in message
    assert "--feature-gates=DRADeviceBindingConditions=true" in message
