"""What makes the CDI specs on disk match the checkpoint (pure).

The checkpoint is the truth: every prepared claim with devices has its spec, as the agent would
write it now; a spec of ours whose claim the checkpoint does not hold is an orphan (a prepare
that crashed between writing the spec and saving the checkpoint, or an unprepare that crashed
between saving the checkpoint and removing the spec), to be undone."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

MISSING, UNREADABLE, DIFFERS = "missing", "unreadable", "differs from the checkpoint"


@dataclass(frozen=True)
class SpecPlan:
    write: dict[str, str] = field(default_factory=dict)  # claim UID -> why its spec is (re)written
    orphans: list[str] = field(default_factory=list)  # claim UIDs of specs to undo and remove

    def __bool__(self) -> bool:
        return bool(self.write or self.orphans)


def plan_specs(
    expected: Mapping[str, dict[str, Any]], on_disk: Mapping[str, dict[str, Any] | None], prepared: Collection[str]
) -> SpecPlan:
    """``expected``: the spec each prepared claim should have (claims whose spec cannot be built
    are left out: they are neither written nor removed); ``on_disk``: our specs as read, None for
    one that does not parse; ``prepared``: every claim UID of the checkpoint."""
    write = {}
    for uid, spec in expected.items():
        if uid not in on_disk:
            write[uid] = MISSING
        elif on_disk[uid] is None:
            write[uid] = UNREADABLE
        elif on_disk[uid] != spec:
            write[uid] = DIFFERS
    return SpecPlan(write=write, orphans=sorted(uid for uid in on_disk if uid not in prepared))
