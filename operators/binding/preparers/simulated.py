"""A preparer that only waits: for tests, kind clusters and demos.

Configuration (all optional)::

    {"delay": 1.0,                      # seconds a preparation takes
     "delays": {"gpu-7": 30},           # per device pattern, first match wins
     "fail": ["gpu-3", "pool-a/*"],     # devices that always fail
     "failProbability": 0.1,            # other devices fail with this probability
     "seed": "any text",                # makes the probabilistic failures reproducible
     "reason": "SimulatedFailure",      # condition reason of a failure
     "undoDelay": 0.0}

Patterns are shell patterns matched against ``device``, ``pool/device`` and
``driver/pool/device``. Like a real attach service, a preparation keeps running while the
operator is down: it is done ``delay`` seconds after it first started, so a restarted operator
waits only for the rest. Whether a device fails by probability is a pure function of the seed,
claim and device, so asking again (after a restart) gives the same answer.
"""

from __future__ import annotations

import asyncio
import datetime
import fnmatch
import hashlib
from typing import Any

from .base import ConfigError, Outcome, Preparation, Preparer


def _number(config: dict[str, Any], name: str, default: float) -> float:
    value = config.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"simulated preparer: {name} must be a number >= 0, got {value!r}")
    return float(value)


class SimulatedPreparer(Preparer):
    name = "simulated"

    def __init__(self, config: dict[str, Any] | None = None):
        config = dict(config or {})
        unknown = set(config) - {"delay", "delays", "fail", "failProbability", "seed", "reason", "undoDelay"}
        if unknown:
            raise ConfigError(f"simulated preparer: unknown settings {sorted(unknown)}")
        self.delay = _number(config, "delay", 1.0)
        self.undo_delay = _number(config, "undoDelay", 0.0)
        self.fail_probability = _number(config, "failProbability", 0.0)
        if self.fail_probability > 1:
            raise ConfigError("simulated preparer: failProbability must be between 0 and 1")
        delays = config.get("delays") or {}
        if not isinstance(delays, dict):
            raise ConfigError("simulated preparer: delays must map device patterns to seconds")
        self.delays = [(str(p), _number(delays, p, 0)) for p in delays]
        fail = config.get("fail") or []
        if isinstance(fail, str) or not isinstance(fail, list):
            raise ConfigError("simulated preparer: fail must be a list of device patterns")
        self.fail = [str(p) for p in fail]
        self.seed = str(config.get("seed", ""))
        self.reason = str(config.get("reason", "SimulatedFailure"))

    @staticmethod
    def _names(p: Preparation) -> tuple[str, ...]:
        return p.device, f"{p.pool}/{p.device}", f"{p.driver}/{p.pool}/{p.device}"

    def _matches(self, pattern: str, p: Preparation) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for name in self._names(p))

    def delay_for(self, p: Preparation) -> float:
        return next((seconds for pattern, seconds in self.delays if self._matches(pattern, p)), self.delay)

    def fails(self, p: Preparation) -> bool:
        if any(self._matches(pattern, p) for pattern in self.fail):
            return True
        if self.fail_probability <= 0:
            return False
        digest = hashlib.sha256(f"{self.seed}\0{p.claim_uid}\0{p.device_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64 < self.fail_probability

    async def prepare(self, p: Preparation) -> Outcome:
        done_at = p.started + datetime.timedelta(seconds=self.delay_for(p))
        remaining = (done_at - datetime.datetime.now(datetime.UTC)).total_seconds()
        if remaining > 0:
            await asyncio.sleep(remaining)
        where = f" on node {p.node}" if p.node else ""
        if self.fails(p):
            return Outcome.failed(self.reason, f"simulated failure preparing {p.device_id}{where}")
        return Outcome.prepared(f"simulated preparation of {p.device_id}{where} done")

    async def undo(self, p: Preparation) -> None:
        if self.undo_delay:
            await asyncio.sleep(self.undo_delay)
