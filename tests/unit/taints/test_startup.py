"""The taints operator follows the cluster's gates: off where nothing else honours device taints,
rules ignored where upstream ignores them."""

from types import SimpleNamespace

import kopf
import pytest

from operators.core.api.featuregates import device_taint_rules_on
from operators.core.settings import Settings
from operators.taints import operator
from tests.unit.metrics_only import MetricsOnlyApiServer


async def test_the_operator_refuses_to_start_with_device_taints_off():
    metrics = 'kubernetes_feature_enabled{name="DRADeviceTaints",stage="ALPHA"} 0\n'
    runtime = SimpleNamespace(kube=MetricsOnlyApiServer(metrics))
    with pytest.raises(RuntimeError) as failed:
        await operator.start(runtime, Settings(), kopf.Memo())
    assert "https://api.example:6443" in str(failed.value) and "DRADeviceTaints off" in str(failed.value)
    assert "--feature-gates=DRADeviceTaints=true" in str(failed.value)


@pytest.mark.parametrize(
    ("gates", "honoured"),
    [
        ({"DRADeviceTaints": True}, True),  # 1.34: no DRADeviceTaintRules, rules go with taints
        ({"DRADeviceTaints": False}, False),
        ({"DRADeviceTaints": True, "DRADeviceTaintRules": False}, False),  # 1.35, 1.36 by default
        ({"DRADeviceTaints": True, "DRADeviceTaintRules": True}, True),  # 1.37
    ],
)
def test_which_releases_honour_device_taint_rules(gates, honoured):
    assert device_taint_rules_on(gates) is honoured
