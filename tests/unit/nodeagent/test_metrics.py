"""The node agent's devices by state."""

from prometheus_client import CollectorRegistry

from operators.nodeagent.metrics import Metrics, device_states

TAINT = {"key": "gpu.example.com/xid", "value": "79", "effect": "NoSchedule"}


def test_device_states():
    devices = [{"name": "gpu-0"}, {"name": "gpu-1", "taints": [TAINT]}, {"name": "gpu-2", "taints": [TAINT]}]
    # gpu-2 tainted by the backend's own inventory; gpu-1 by health tracking; gpu-9 no longer published
    assert device_states(devices, ["gpu-1", "gpu-9"]) == {"published": 3, "tainted": 2, "unhealthy": 1}
    assert device_states([], []) == {"published": 0, "tainted": 0, "unhealthy": 0}


def test_set_device_states_labels_driver_pool_and_state():
    metrics = Metrics(CollectorRegistry())
    metrics.set_device_states("gpu.example.com", "node-1", [{"name": "gpu-0", "taints": [TAINT]}], ["gpu-0"])
    value = metrics.registry.get_sample_value
    labels = {"driver": "gpu.example.com", "pool": "node-1"}
    assert value("dra_nodeagent_devices", {**labels, "state": "published"}) == 1
    assert value("dra_nodeagent_devices", {**labels, "state": "unhealthy"}) == 1
