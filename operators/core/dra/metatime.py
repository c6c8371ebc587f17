"""``metav1.Time``, the API server's timestamps: RFC 3339 in UTC, whole seconds.

Every timestamp the operators read or write (taints' ``timeAdded``, conditions'
``lastTransitionTime``, ``allocationTimestamp``, their own annotations) goes through these, so
that a time written by one operator reads back the same in another.
"""

from __future__ import annotations

import datetime


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def format_time(t: datetime.datetime) -> str:
    return t.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> datetime.datetime | None:
    """The time, timezone-aware in UTC; None for no time. Text that is no time raises
    ValueError: the API server validates its fields, and an annotation's reader decides."""
    if not text:
        return None
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(datetime.UTC)
