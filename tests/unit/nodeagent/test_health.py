import datetime

from operators.nodeagent.health import ECC, LOST, XID, HealthEvent, HealthTracker

T0 = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def at(seconds):
    return T0 + datetime.timedelta(seconds=seconds)


def test_xid_taints_like_nvidia_and_ignorable_xids_have_effect_none():
    tracker = HealthTracker("gpu.nvidia.com", quiet_period=60)
    assert tracker.record(HealthEvent("gpu-0", XID, "79", at(0.4)))
    assert tracker.taints("gpu-0") == [
        {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
    ]
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
    tracker.record(HealthEvent("gpu-0", XID, "94", at(0)))  # contained ECC error: restart the app
    assert tracker.recover(lambda d: True, now=at(59)) == []
    assert tracker.recover(lambda d: False, now=at(61)) == []
    assert tracker.recover(lambda d: True, now=at(61)) == ["gpu-0"]
    assert tracker.taints("gpu-0") == [] and tracker.tainted_devices() == []


def test_adopt_published_taints_keeps_time_added_and_counts_quiet_from_adoption():
    tracker = HealthTracker("d", quiet_period=60)
    tracker.adopt(
        [
            {
                "name": "gpu-0",
                "taints": [
                    {"key": "d/xid", "value": "94", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:10Z"},
                    {"key": "someone-else/x", "value": "", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:10Z"},
                ],
            }
        ],
        now=at(3600),
    )
    assert tracker.taints("gpu-0") == [
        {"key": "d/xid", "value": "94", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:10Z"}
    ]
    assert tracker.recover(lambda d: True, now=at(3659)) == []
    assert tracker.recover(lambda d: True, now=at(3661)) == ["gpu-0"]


def test_after_a_restart_the_quiet_period_counts_from_what_this_agent_saw():
    """Not from the old timeAdded: an agent restarted an hour after the event must not untaint at once."""
    tracker = HealthTracker("d", quiet_period=60)
    tracker.adopt(
        [
            {
                "name": "gpu-0",
                "taints": [
                    {"key": "d/xid", "value": "94", "effect": "NoSchedule", "timeAdded": "2020-01-01T00:00:00Z"}
                ],
            }
        ]
    )
    soon = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=5)
    assert tracker.recover(lambda d: True, now=soon) == []


def test_xids_that_need_a_reset_or_reboot_are_never_recovered():
    """NVIDIA's XID catalogue: 48 (double-bit ECC), 64, 74 (NVLink), 79 (off the bus), 95
    (uncontained ECC), 119/120 (GSP) need a GPU reset or a reboot; a quiet GPU is still broken."""
    tracker = HealthTracker("d", quiet_period=60)
    for i, xid in enumerate((48, 64, 74, 79, 95, 119, 120)):
        tracker.record(HealthEvent(f"gpu-{i}", XID, str(xid), at(0)))
    tracker.record(HealthEvent("gpu-9", ECC, "double-bit", at(0)))
    assert tracker.recover(lambda d: True, now=at(10**6)) == []
    assert len(tracker.tainted_devices()) == 8


def test_application_xids_single_bit_ecc_and_a_lost_gpu_that_is_back_recover():
    tracker = HealthTracker("d", quiet_period=60)
    for i, xid in enumerate((13, 31, 43, 45, 94)):
        tracker.record(HealthEvent(f"gpu-{i}", XID, str(xid), at(0)))
    tracker.record(HealthEvent("gpu-8", ECC, "single-bit", at(0)))
    tracker.record(HealthEvent("gpu-9", LOST, "", at(0)))
    assert sorted(tracker.recover(lambda d: True, now=at(61))) == sorted(
        [f"gpu-{i}" for i in range(5)] + ["gpu-8", "gpu-9"]
    )


def test_a_reset_fault_stays_over_an_application_fault_that_recovers():
    tracker = HealthTracker("d", quiet_period=60)
    tracker.record(HealthEvent("gpu-0", XID, "79", at(0)))
    tracker.record(HealthEvent("gpu-0", LOST, "", at(1)))
    assert tracker.recover(lambda d: True, now=at(1000)) == []
    assert [t["key"] for t in tracker.taints("gpu-0")] == ["d/gpu-lost", "d/xid"]


def test_a_reboot_clears_taints_that_needed_a_reset():
    """A taint that needed a reset, added before this boot, is not adopted: rebooting reset the GPU."""
    tracker = HealthTracker("d", quiet_period=60, booted_at=at(100))
    tracker.adopt(
        [
            {
                "name": "gpu-0",
                "taints": [
                    {"key": "d/xid", "value": "79", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:00:00Z"}
                ],
            },
            {
                "name": "gpu-1",
                "taints": [
                    {"key": "d/xid", "value": "79", "effect": "NoSchedule", "timeAdded": "2026-01-01T00:05:00Z"}
                ],
            },
        ]
    )
    assert tracker.tainted_devices() == ["gpu-1"]


def test_apply_adds_taints_only_to_tainted_devices():
    tracker = HealthTracker("d")
    tracker.record(HealthEvent("b", XID, "79", at(0)))
    out = tracker.apply([{"name": "a"}, {"name": "b", "taints": [{"key": "x", "effect": "None"}]}])
    assert out[0] == {"name": "a"}
    assert [t["key"] for t in out[1]["taints"]] == ["x", "d/xid"]
