"""The one small interface every preparer implements, and what goes in and out of it.

A preparer does the out-of-cluster work that makes an allocated device usable on the chosen node
(attach a fabric GPU, program an FPGA) and undoes it. The controller calls ``prepare`` at most
once at a time per device and again after a restart of the operator, so ``prepare`` must be
idempotent: called for a device that is already prepared (or being prepared) it reports the
state of that work instead of starting it twice. ``undo`` must be idempotent too, and is called
for devices whose preparation failed, timed out or never finished.
"""

from __future__ import annotations

import abc
import datetime
from dataclasses import dataclass
from typing import Any

from ...core.dra.metatime import format_time


@dataclass(frozen=True)
class Preparation:
    """One allocated device to prepare on ``node`` for one claim."""

    driver: str
    pool: str
    device: str
    share_id: str | None
    node: str | None  # None unless the allocation names exactly one node
    claim_namespace: str
    claim_name: str
    claim_uid: str
    request: str
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    started: datetime.datetime  # the first attempt, kept across operator restarts
    deadline: datetime.datetime  # the scheduler gives up then (allocationTimestamp + bindingTimeout)

    @property
    def claim(self) -> str:
        return f"{self.claim_namespace}/{self.claim_name}"

    @property
    def device_id(self) -> str:
        base = f"{self.driver}/{self.pool}/{self.device}"
        return f"{base}#{self.share_id}" if self.share_id else base

    def to_json(self) -> dict[str, Any]:
        """The wire form external services see (the http preparer's request body)."""
        return {
            "driver": self.driver,
            "pool": self.pool,
            "device": self.device,
            "shareID": self.share_id,
            "node": self.node,
            "request": self.request,
            "claim": {"namespace": self.claim_namespace, "name": self.claim_name, "uid": self.claim_uid},
            "bindingConditions": list(self.binding_conditions),
            "bindingFailureConditions": list(self.binding_failure_conditions),
            "started": format_time(self.started),
            "deadline": format_time(self.deadline),
        }


@dataclass(frozen=True)
class Outcome:
    """What ``prepare`` found. ``reason`` becomes the condition reason (CamelCase), ``message``
    its message; ``data`` (a JSON object, at most 10 KiB) goes into ``status.devices[].data``."""

    ready: bool
    reason: str
    message: str = ""
    data: dict[str, Any] | None = None

    @classmethod
    def prepared(cls, message: str = "", reason: str = "DevicePrepared", data: dict[str, Any] | None = None) -> Outcome:
        return cls(True, reason, message, data)

    @classmethod
    def failed(cls, reason: str, message: str) -> Outcome:
        return cls(False, reason, message)


class Preparer(abc.ABC):
    """Built from a configuration dict by its factory (the class itself, or any callable
    registered in the ``dra_operators.preparers`` entry point group)."""

    name: str = ""

    @abc.abstractmethod
    async def prepare(self, preparation: Preparation) -> Outcome:
        """Do (or look up) the preparation. Raising is a failure with reason ``PreparerError``;
        the controller cancels the call at the deadline."""

    @abc.abstractmethod
    async def undo(self, preparation: Preparation) -> None:
        """Undo whatever ``prepare`` did or started. Raising makes the controller retry with backoff."""

    async def close(self) -> None:  # noqa: B027 - optional hook: by default nothing to release
        """Release connections at shutdown."""


class ConfigError(ValueError):
    """A preparer configuration that cannot work; the operator refuses to start with it."""
