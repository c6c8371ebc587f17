"""Cool-off taints: a device whose preparation failed gets a NoSchedule taint through a
DeviceTaintRule, so that the scheduler's next attempt picks another device (upstream's advice:
make a failed device unattractive, the scheduler may pick it again). The rule is deleted after
the cool-off. Rules carry their end time in an annotation, so a restarted operator finds them
(startup LIST) and still deletes them on time."""

from __future__ import annotations

import datetime
from collections.abc import Callable

import structlog

from ..core.api.kube import ApiError, Kube
from ..core.api.resources import Resource
from ..core.dra.metatime import format_time, utcnow
from ..core.machinery.workqueue import RetryableError
from . import decisions as d
from .metrics import Metrics

log = structlog.stdlib.get_logger("operators.binding")


class CoolOff:
    def __init__(
        self,
        kube: Kube,
        rules: Resource | None,
        drivers: d.DriverFilter,
        seconds: float,
        taint_key: str,
        effect: str,
        metrics: Metrics,
        schedule: Callable[[str, float], None],
    ):
        self.kube = kube
        self.rules = rules
        self.drivers = drivers
        self.seconds = seconds
        self.taint_key = taint_key
        self.effect = effect
        self.metrics = metrics
        self._schedule = schedule  # (rule name, delay): sync_rule(name) after delay
        self.until: dict[str, datetime.datetime] = {}

    @property
    def enabled(self) -> bool:
        return self.rules is not None and self.seconds > 0

    async def prime(self) -> None:
        """Adopt the rules a previous run left behind."""
        if self.rules is None:
            return
        selector = f"{d.MANAGED_BY_LABEL}={d.MANAGED_BY}"
        for rule in await self.kube.list(self.rules, label_selector=selector):
            driver = d.cool_off_driver(rule)
            if not driver or not self.drivers.serves(driver):
                continue
            name = rule["metadata"]["name"]
            self.until[name] = d.cool_off_until(rule) or utcnow()
            self._schedule(name, (self.until[name] - utcnow()).total_seconds())

    async def taint(self, ref: d.DeviceRef, reason: str, message: str, claim: str) -> str | None:
        """Write (or extend) the rule for ``ref``; return its name, None when cool-off is off."""
        if not self.enabled:
            return None
        assert self.rules is not None
        until = utcnow() + datetime.timedelta(seconds=self.seconds)
        body = d.cool_off_rule(
            ref, self.rules.group_version, self.taint_key, self.effect, reason, until, claim, message
        )
        name = body["metadata"]["name"]
        try:
            await self.kube.apply(self.rules, body, field_manager=d.FIELD_MANAGER, force=True)
        except ApiError as e:
            raise RetryableError(f"cool-off taint for {ref.key}: {e}") from e
        self.until[name] = until
        self.metrics.cool_offs.labels(ref.driver, "added").inc()
        log.info(
            "device tainted for cool-off",
            device=ref.key,
            rule=name,
            until=format_time(until),
            claim=claim,
            reason=reason,
        )
        self._schedule(name, self.seconds)
        return name

    async def sync_rule(self, name: str) -> None:
        """Delete the rule once its cool-off is over (the server's copy decides: the rule may
        have been extended by a newer failure in the meantime)."""
        if name not in self.until or self.rules is None:
            return
        try:
            rule = await self.kube.get_or_none(self.rules, name)
            if rule is None:
                self.until.pop(name, None)
                return
            until = d.cool_off_until(rule) or utcnow()
            remaining = (until - utcnow()).total_seconds()
            if remaining > 0:
                self.until[name] = until
                self._schedule(name, remaining)
                return
            meta = rule["metadata"]
            await self.kube.delete(self.rules, name, uid=meta.get("uid"), resource_version=meta.get("resourceVersion"))
        except ApiError as e:
            if not e.not_found:
                raise RetryableError(f"end cool-off {name}: {e}") from e
        self.until.pop(name, None)
        driver = d.cool_off_driver(rule) if rule else ""
        self.metrics.cool_offs.labels(driver or "", "removed").inc()
        log.info("cool-off over, device taint removed", rule=name, driver=driver)
