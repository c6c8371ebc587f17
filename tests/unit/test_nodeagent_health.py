import datetime

from operators.nodeagent.health import ECC, LOST, XID, HealthEvent, HealthTracker

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def at(seconds):
    return T0 + datetime.timedelta(seconds=seconds)


def test_xid_taints_like_nvidia_and_ignorable_xids_have_effect_none():
    tracker = HealthTracker("gpu.nvidia.com", quiet_period=60)
    assert tracker.record(HealthEvent("gpu-0", XID, "79", at(0.4)))
    assert tracker.taints("gpu-0") == [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule",
                                        "timeAdded": "2026-01-01T00:00:00Z"}]
    assert tracker.record(HealthEvent("gpu-1", XID, "13", at(0)))
    assert tracker.taints("gpu-1")[0]["effect"] == "None"
    # the same fault again keeps timeAdded; an informational one never weakens a fault
    assert not tracker.record(HealthEvent("gpu-0", XID, "79", at(30)))
    assert not tracker.record(HealthEvent("gpu-0", XID, "13", at(31)))
    assert tracker.taints("gpu-0")[0]["timeAdded"] == "2026-01-01T00:00:00Z"


def test_lost_and_ecc():
    tracker = HealthTracker("d", quiet_period=60)
    tracker.record(HealthEvent("gpu-2", LOST, "", at(0)))
    tracker.record(HealthEvent("gpu-3", ECC, "double-bit", at(0)))
    tracker.record(HealthEvent("gpu-4", ECC, "single-bit", at(0)))
    assert tracker.taints("gpu-2")[0]["key"] == "d/gpu-lost"
    assert tracker.taints("gpu-3")[0]["effect"] == "NoSchedule"
    assert tracker.taints("gpu-4")[0]["effect"] == "None"


def test_recovery_needs_a_passing_check_and_a_quiet_period():
    tracker = HealthTracker("d", quiet_period=60)
    tracker.record(HealthEvent("gpu-0", XID, "79", at(0)))
    assert tracker.recover(lambda d: True, now=at(59)) == []
    assert tracker.recover(lambda d: False, now=at(61)) == []
    assert tracker.recover(lambda d: True, now=at(61)) == ["gpu-0"]
    assert tracker.taints("gpu-0") == [] and tracker.tainted_devices() == []


def test_adopt_published_taints_keeps_time_added_and_quiet_period():
    tracker = HealthTracker("d", quiet_period=60)
    tracker.adopt([{"name": "gpu-0", "taints": [
        {"key": "d/xid", "value": "48", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:10Z"},
        {"key": "someone-else/x", "value": "", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:10Z"}]}])
    assert [t["key"] for t in tracker.taints("gpu-0")] == ["d/xid"]
    assert tracker.recover(lambda d: True, now=at(69)) == []
    assert tracker.recover(lambda d: True, now=at(71)) == ["gpu-0"]


def test_apply_adds_taints_only_to_tainted_devices():
    tracker = HealthTracker("d")
    tracker.record(HealthEvent("b", XID, "79", at(0)))
    out = tracker.apply([{"name": "a"}, {"name": "b", "taints": [{"key": "x", "effect": "None"}]}])
    assert out[0] == {"name": "a"}
    assert [t["key"] for t in out[1]["taints"]] == ["x", "d/xid"]
