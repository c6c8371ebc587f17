"""What each XID means for a device's taint (pure): NVIDIA's XID catalogue, "Resolution Bucket
(Immediate Action)" (docs.nvidia.com/deploy/xid-errors, Analyzing Xid Errors with the Xid Catalog;
the same buckets NVIDIA ships machine-readable in NVSentinel's xiderrorsmapping.csv).

Only XIDs whose immediate action is to restart the application, to ignore, or to check UVM
(``recovers``) lose their taint by themselves, after a quiet period with a passing health check.
Everything else (reset the GPU, restart the machine or VM, an NVLink or double-bit ECC workflow,
mechanical checks, firmware updates, "contact support", and XIDs the catalogue does not know) keeps
its taint until the GPU has been reset; a reboot resets every GPU, so such taints added before the
node's boot are dropped when the agent starts.

The taint's effect is a separate choice, NVIDIA's DRA driver's: NoSchedule, or None for the XIDs it
ignores as application errors (13, 31, 43, 45, 68, 109; ``DRA_NODEAGENT_IGNORED_XIDS``).
"""

from __future__ import annotations

RESTART_APP, IGNORE, CHECK_UVM = "RESTART_APP", "IGNORE", "CHECK_UVM"
RESET_GPU, RESTART_BM, RESTART_VM = "RESET_GPU", "RESTART_BM", "RESTART_VM"
CONTACT_SUPPORT = "CONTACT_SUPPORT"


def _xids(*parts: int | range) -> set[int]:
    out: set[int] = set()
    for part in parts:
        out.update(part if isinstance(part, range) else (part,))
    return out


_BUCKETS: dict[str, set[int]] = {
    RESTART_APP: _xids(
        8,
        11,
        13,
        25,
        31,
        32,
        range(39, 42),
        60,
        range(68, 73),
        range(75, 78),
        80,
        range(82, 87),
        88,
        89,
        94,
        range(96, 106),
        range(126, 136),
        139,
    ),
    IGNORE: _xids(14, 37, 38, 43, 44, 63, 66, 67, 92, 93, 106, 107, 121, 137, 141, 152, 153, 157, 161),
    CHECK_UVM: _xids(159),
    "WORKFLOW_XID_45": _xids(45),
    RESET_GPU: _xids(46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 155, 156, 158, 162),
    RESTART_BM: _xids(79, 160),
    RESTART_VM: _xids(151),
    "WORKFLOW_XID_48": _xids(48),
    "WORKFLOW_NVLINK_ERR": _xids(74),
    "WORKFLOW_NVLINK5_ERR": _xids(range(144, 151)),
    "CHECK_MECHANICALS": _xids(54),
    "UPDATE_SWFW": _xids(78),
    "XID_154": _xids(154),  # "the recovery action changed": follow the other XID's guidance
}
BUCKET_BY_XID = {xid: bucket for bucket, xids in _BUCKETS.items() for xid in xids}

# Buckets whose fault is over once the application is gone (XID 45 is the clean-up after another
# fault: that other XID carries its own bucket).
RECOVERING_BUCKETS = {RESTART_APP, IGNORE, CHECK_UVM, "WORKFLOW_XID_45"}


def bucket(xid: int) -> str:
    """The catalogue's immediate action for ``xid`` (CONTACT_SUPPORT where it names none)."""
    return BUCKET_BY_XID.get(xid, CONTACT_SUPPORT)


def recovers(xid: int) -> bool:
    """Whether a device tainted for ``xid`` may lose the taint without a GPU reset."""
    return bucket(xid) in RECOVERING_BUCKETS


def advice(xid: int) -> str:
    """What to do, for Events and logs."""
    action = bucket(xid)
    if action in RECOVERING_BUCKETS:
        return f"application-level fault ({action}); the taint goes after a quiet period"
    if action == RESTART_BM:
        return f"restart the machine ({action}); the taint stays until then"
    return f"reset the GPU or restart the machine ({action}); the taint stays until then"
