"""The one small interface every device backend implements."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..health import HealthEvent


class BackendError(Exception):
    """The backend cannot work at all (the agent exits with this message)."""


@dataclass
class Inventory:
    """Devices as ResourceSlice device entries (``name``, ``attributes``, ``capacity``, ...),
    shared counter sets, and problems found while reading the inventory (naming device and
    field); devices with problems are left out, the others are published."""

    devices: list[dict[str, Any]] = field(default_factory=list)
    counter_sets: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class DeviceBackend(Protocol):
    name: str

    def discover(self) -> Inventory:
        """The node's devices now (blocking; called in a thread)."""

    def healthy(self, device: str) -> bool:
        """Whether ``device`` passes its health check now (blocking; called in a thread)."""

    async def watch(self, events: asyncio.Queue[HealthEvent], changed: asyncio.Event) -> None:
        """Until cancelled: put health events on ``events``; set ``changed`` when ``discover``
        may return something new."""

    def observe_node(self, node: dict[str, Any]) -> None:
        """Called with the agent's own Node on every change of it."""

    def container_edits(
        self,
        device: str,
        claim: dict[str, str],
        share_id: str | None,
        admin_access: bool,
        config: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """CDI containerEdits that hand ``device`` to a container of ``claim`` ({uid, namespace, name}),
        with its merged opaque configuration (``plugin/opaque_config``: env, sharing) applied."""

    def common_edits(self) -> dict[str, Any] | None:
        """CDI containerEdits every container with any of our devices needs (or None)."""

    def close(self) -> None: ...
