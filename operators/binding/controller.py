"""The binding controller: claim events become work-queue keys; ``sync`` compares the claim with
what is known, starts preparations as tasks of their own (a slow attach never holds a worker),
writes their outcomes, undoes preparations whose allocation went away and ends cool-offs.
Decisions live in ``decisions``; this module only reads, calls and writes.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass

import structlog

from ..core.api.kube import ApiError, Kube
from ..core.api.resources import RESOURCE_CLAIMS, Resource
from ..core.dra.metatime import format_time, utcnow
from ..core.machinery.events import NORMAL, WARNING, EventRecorder
from ..core.machinery.store import Store, key_of
from ..core.machinery.workqueue import RetryableError, WorkQueue
from . import decisions as d
from .cooloff import CoolOff
from .metrics import Metrics
from .preparers import Outcome, Preparation, Preparer

log = structlog.stdlib.get_logger("operators.binding")

CLAIM_PREFIX, RULE_PREFIX = "claim:", "cooloff:"
EVENT_COMPONENT = "dra-operators-binding"


@dataclass
class Tracked:
    """One device of one claim that this process prepares, prepared, or must undo."""

    prep: Preparation
    ref: d.DeviceRef
    allocated: str | None
    involved: dict  # enough of the claim for Events after it is gone
    attempted: bool = False  # prepare() was called (here or before a restart): undo needed
    task: asyncio.Task | None = None
    outcome: Outcome | None = None
    outcome_label: str = ""
    written: bool = False  # the outcome is in the claim (or the claim no longer takes it)
    undone: bool = False  # undo() succeeded; only the record remains to be removed
    pods: tuple[str, ...] = ()  # the claim's consumers, for logs

    @property
    def log(self):
        return log.bind(claim=self.prep.claim, device=self.ref.key, node=self.prep.node, pods=list(self.pods))

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def known(self) -> d.Known:
        return d.Known(
            self.prep.claim_uid,
            self.allocated,
            self.prep.started,
            self.running,
            self.outcome is not None and not self.written,
        )


def _involved(claim: d.Obj) -> dict:
    meta = claim["metadata"]
    return {
        "apiVersion": claim.get("apiVersion", d.API_VERSION),
        "kind": claim.get("kind", "ResourceClaim"),
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "uid", "resourceVersion")},
    }


class BindingController:
    def __init__(
        self,
        kube: Kube,
        preparer: Preparer,
        drivers: d.DriverFilter,
        *,
        timeout: float = 600.0,
        workers: int = 10,
        max_parallel: int = 100,
        rules: Resource | None = None,
        cool_off: float = 300.0,
        taint_key: str = f"{d.DOMAIN}/preparation-failed",
        taint_effect: str = "NoSchedule",
        metrics: Metrics | None = None,
    ):
        self.kube = kube
        self.preparer = preparer
        self.drivers = drivers
        self.timeout = timeout
        self.metrics = metrics or Metrics()
        self.claims = Store()
        self.tracked: dict[str, dict[str, Tracked]] = {}  # claim ns/name -> device key -> Tracked
        self.events = EventRecorder(kube, EVENT_COMPONENT)
        # The recorder folds repeats per object, type and reason; a claim's devices each get their
        # own so that every device's Events stay visible (folded per claim, device and reason).
        self._device_events: dict[tuple[str, str], EventRecorder] = {}
        self.queue = WorkQueue("binding", self.sync, workers=workers)
        self.cool_off = CoolOff(
            kube,
            rules,
            drivers,
            cool_off,
            taint_key,
            taint_effect,
            self.metrics,
            lambda name, delay: self.queue.add_after(RULE_PREFIX + name, delay),
        )
        self._slots = asyncio.Semaphore(max_parallel)
        # Preparations undone lately, by (claim UID, device, start): a record that a stale cached
        # copy of the claim still shows must not be adopted and undone a second time.
        self._undone: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        # Unusable record annotations already reported, by (claim UID, annotation, value).
        self._bad_records: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    # -- event handlers (from watches) -------------------------------------------------------

    def on_claim(self, claim: d.Obj, deleted: bool) -> None:
        key = key_of(claim)
        relevant = not deleted and bool(d.binding_devices(claim, self.drivers) or d.records(claim, self.drivers))
        if relevant:
            self.claims.upsert(claim)
        elif deleted:
            self.claims.delete(claim)
        else:
            self.claims.discard(key)  # still there, just no longer ours to watch over
        if relevant or key in self.tracked:
            self.queue.add(CLAIM_PREFIX + key)

    # -- sync --------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        if key.startswith(CLAIM_PREFIX):
            await self.sync_claim(key[len(CLAIM_PREFIX) :])
        elif key.startswith(RULE_PREFIX):
            await self.cool_off.sync_rule(key[len(RULE_PREFIX) :])
        else:
            log.error("unexpected work queue key", key=key)

    async def sync_claim(self, key: str) -> None:
        claim = self.claims.get(key)
        tracked = self.tracked.setdefault(key, {})
        if claim is not None:
            await self._report_bad_records(claim)
            self._adopt(claim, tracked)
            for record in d.records_without_finalizer(claim, self.drivers):
                if not await self._apply_record(key, claim, record.ref, record):
                    break
            claim = self.claims.get(key)
        if claim is not None:
            for t in tracked.values():
                if t.prep.claim_uid == claim["metadata"]["uid"]:
                    t.pods = tuple(d.consumer_pods(claim))
        at = utcnow()
        plan = d.plan(claim, {k: t.known() for k, t in tracked.items()}, self.drivers, self.timeout, at)
        errors: list[str] = []

        for device_key in plan.undo:
            try:
                await self._undo(key, tracked[device_key])
            except RetryableError as e:
                errors.append(str(e))
            else:
                self._device_events.pop((tracked[device_key].prep.claim_uid, device_key), None)
                del tracked[device_key]
        claim = self.claims.get(key)  # undo may have written the claim, or found it gone
        blocked = set(plan.undo) & set(tracked)  # not undone yet: no new preparation of that key
        if claim is None:
            plan.start, plan.expire = [], []
        else:
            for dev in (dev for dev in plan.expire if dev.ref.key not in blocked):
                t = tracked.get(dev.ref.key) or self._new(claim, dev, at)
                tracked[dev.ref.key] = t
                t.outcome = Outcome.failed(
                    d.REASON_TIMEOUT,
                    f"too late to prepare {dev.ref.key}: the scheduler's "
                    f"binding timeout ({self.timeout:g}s after allocation) has passed",
                )
                t.outcome_label = d.OUTCOME_TIMEOUT
            for dev in (dev for dev in plan.start if dev.ref.key not in blocked):
                t = tracked.get(dev.ref.key) or self._new(claim, dev, at)
                tracked[dev.ref.key] = t
                try:
                    await self._start(key, claim, t)
                except RetryableError as e:
                    errors.append(str(e))
        for dev in plan.settled:
            if dev.ref.key in tracked:
                tracked[dev.ref.key].written = True
        for dev in (dev for dev in [*plan.expire, *plan.report] if dev.ref.key not in blocked):
            try:
                await self._report(key, tracked[dev.ref.key])
            except RetryableError as e:
                errors.append(str(e))

        if not tracked:
            self.tracked.pop(key, None)
        if errors:
            raise RetryableError(f"claim {key}: {'; '.join(errors)}")

    # -- steps -------------------------------------------------------------------------------

    def _new(
        self,
        claim: d.Obj,
        dev: d.BindingDevice,
        started,
        attempted: bool = False,
        allocated: str | None = None,
        node: str | None = None,
    ) -> Tracked:
        meta = claim["metadata"]
        allocated = allocated if attempted else d.allocation_timestamp(claim)
        prep = Preparation(
            driver=dev.ref.driver,
            pool=dev.ref.pool,
            device=dev.ref.device,
            share_id=dev.ref.share_id,
            node=node if attempted else d.node_of(claim),
            claim_namespace=meta["namespace"],
            claim_name=meta["name"],
            claim_uid=meta["uid"],
            request=dev.request,
            binding_conditions=dev.conditions,
            binding_failure_conditions=dev.failure_conditions,
            started=started,
            deadline=d.deadline(allocated, started, self.timeout),
        )
        return Tracked(
            prep, dev.ref, allocated, _involved(claim), attempted=attempted, pods=tuple(d.consumer_pods(claim))
        )

    def _adopt(self, claim: d.Obj, tracked: dict[str, Tracked]) -> None:
        """Records written before a restart: resume the preparation or undo it."""
        current = {dev.ref.key: dev for dev in d.binding_devices(claim, self.drivers)}
        for record in d.records(claim, self.drivers):
            if record.ref.key in tracked or (claim["metadata"]["uid"], record.ref.key, record.started) in self._undone:
                continue
            dev = current.get(record.ref.key) or d.BindingDevice(record.ref, "", (), ())
            started = d.parse_time(record.started) or utcnow()
            tracked[record.ref.key] = self._new(
                claim, dev, started, attempted=True, allocated=record.allocated, node=record.node
            )
            log.info(
                "adopted preparation from before a restart",
                claim=key_of(claim),
                device=record.ref.key,
                node=record.node,
                started=record.started,
            )

    async def _report_bad_records(self, claim: d.Obj) -> None:
        """Annotations under our record prefix that are no usable record are ignored: say so once."""
        meta = claim["metadata"]
        for annotation, problem in d.record_problems(claim):
            marker = (meta["uid"], annotation, (meta.get("annotations") or {}).get(annotation, ""))
            if marker in self._bad_records:
                continue
            self._bad_records[marker] = None
            while len(self._bad_records) > 4096:
                self._bad_records.popitem(last=False)
            message = (
                f"annotation {annotation} {problem}; it is ignored. Remove it: kubectl annotate "
                f"resourceclaim -n {meta['namespace']} {meta['name']} {annotation}-"
            )
            log.warning(
                "unusable preparation record ignored", claim=key_of(claim), annotation=annotation, problem=problem
            )
            await self.events.event(_involved(claim), WARNING, "InvalidBindingRecord", message)

    async def _start(self, key: str, claim: d.Obj, t: Tracked) -> None:
        # The record goes first: a crash after this line leaves a trace to resume or undo.
        record = d.Record(t.ref, t.prep.node, format_time(t.prep.started), t.allocated)
        if not d.has_record(claim, t.ref, record) and not await self._apply_record(key, claim, t.ref, record):
            return  # the claim is gone or was replaced: its event brings the next step
        resumed = t.attempted
        t.attempted = True
        t.task = asyncio.create_task(self._run(key, t), name=f"prepare {key} {t.ref.key}")
        where = f" for node {t.prep.node}" if t.prep.node else ""
        await self._event(
            t, NORMAL, "PreparingDevice", f"{'resuming' if resumed else 'preparing'} device {t.ref.key}{where}"
        )
        t.log.info("preparation started", resumed=resumed, deadline=format_time(t.prep.deadline))

    async def _run(self, key: str, t: Tracked) -> None:
        """The preparation, bounded by the scheduler's deadline; its outcome is written by sync."""
        try:
            async with asyncio.timeout((t.prep.deadline - utcnow()).total_seconds()):
                async with self._slots:
                    self.metrics.in_flight.inc()
                    try:
                        outcome = await self.preparer.prepare(t.prep)
                    finally:
                        self.metrics.in_flight.dec()
            label = d.OUTCOME_READY if outcome.ready else d.OUTCOME_FAILED
        except TimeoutError:
            outcome = Outcome.failed(
                d.REASON_TIMEOUT,
                f"preparation of {t.ref.key} did not finish within the "
                f"binding timeout ({self.timeout:g}s after allocation)",
            )
            label = d.OUTCOME_TIMEOUT
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a broken preparer fails this device, not the operator
            t.log.error("preparer raised", exc_info=True)
            outcome = Outcome.failed(d.REASON_PREPARER_ERROR, f"{type(e).__name__}: {e}")
            label = d.OUTCOME_FAILED
        t.outcome, t.outcome_label = outcome, label
        self.queue.add(CLAIM_PREFIX + key)

    async def _report(self, key: str, t: Tracked) -> None:
        outcome = t.outcome
        assert outcome is not None
        claim = self.claims.get(key)
        reason = d.condition_reason(outcome.reason, d.REASON_PREPARED if outcome.ready else "PreparationFailed")
        rule = None
        if not outcome.ready:
            # Before the failure is visible: the scheduler re-allocates within a second or two.
            rule = await self.cool_off.taint(t.ref, reason, outcome.message, key)
        dev = d.BindingDevice(t.ref, t.prep.request, t.prep.binding_conditions, t.prep.binding_failure_conditions)
        if claim is None or claim["metadata"]["uid"] != t.prep.claim_uid:
            accepted = False
        else:
            conditions = d.outcome_conditions(
                dev, outcome.ready, reason, outcome.message, d.device_status(claim, t.ref), utcnow()
            )
            accepted = await self._apply_status(key, claim, dev, conditions, outcome.data)
        t.written = True
        self.metrics.prepared(t.ref.driver, t.outcome_label, (utcnow() - t.prep.started).total_seconds())
        t.log.info(
            "preparation finished",
            outcome=t.outcome_label,
            reason=reason,
            message=outcome.message,
            written=accepted,
            cool_off_rule=rule,
        )
        if not accepted:
            return  # the allocation went away meanwhile: undo follows from its event
        if outcome.ready:
            await self._event(t, NORMAL, "DevicePrepared", f"device {t.ref.key} prepared: {outcome.message or reason}")
        else:
            reason_event = (
                "DevicePreparationTimedOut" if t.outcome_label == d.OUTCOME_TIMEOUT else "DevicePreparationFailed"
            )
            cool = f"; tainted by DeviceTaintRule {rule} for {self.cool_off.seconds:g}s" if rule else ""
            await self._event(t, WARNING, reason_event, f"device {t.ref.key}: {reason}: {outcome.message}{cool}")

    async def _undo(self, key: str, t: Tracked) -> None:
        if t.running:
            assert t.task is not None
            t.task.cancel()
            await asyncio.gather(t.task, return_exceptions=True)
        at = utcnow()
        if not t.written:
            # The allocation went away before an outcome was reported.
            timed_out = d.undo_means_timeout(t.known(), t.allocated, self.timeout, at, False)
            label = t.outcome_label or (d.OUTCOME_TIMEOUT if timed_out else d.OUTCOME_CANCELLED)
            if t.outcome is not None and not t.outcome.ready:
                await self.cool_off.taint(
                    t.ref, d.condition_reason(t.outcome.reason, "PreparationFailed"), t.outcome.message, key
                )
            elif timed_out and t.attempted:
                await self.cool_off.taint(
                    t.ref,
                    d.REASON_TIMEOUT,
                    "the scheduler's binding timeout passed before the device was prepared",
                    key,
                )
            if t.attempted:
                self.metrics.prepared(t.ref.driver, label, (at - t.prep.started).total_seconds())
            t.written, t.outcome_label = True, label
        if t.attempted and not t.undone:
            try:
                await self.preparer.undo(t.prep)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # retried with backoff, reported each time
                self.metrics.undos.labels(t.ref.driver, "error").inc()
                await self._event(
                    t, WARNING, "DeviceUnprepareFailed", f"undoing the preparation of device {t.ref.key} failed: {e}"
                )
                raise RetryableError(f"undo {t.ref.key}: {e}") from e
            t.undone = True
            self._undone[(t.prep.claim_uid, t.ref.key, format_time(t.prep.started))] = None
            while len(self._undone) > 4096:
                self._undone.popitem(last=False)
            self.metrics.undos.labels(t.ref.driver, "success").inc()
            await self._event(
                t, NORMAL, "DeviceUnprepared", f"preparation of device {t.ref.key} undone: its allocation was cleared"
            )
        claim = self.claims.get(key)
        if claim is not None and claim["metadata"]["uid"] == t.prep.claim_uid and not d.has_record(claim, t.ref, None):
            await self._apply_record(key, claim, t.ref, None)
        t.log.info("preparation undone", attempted=t.attempted, outcome=t.outcome_label)

    async def _event(self, t: Tracked, event_type: str, reason: str, message: str) -> None:
        key = (t.prep.claim_uid, t.ref.key)
        recorder = self._device_events.get(key)
        if recorder is None:
            recorder = self._device_events[key] = EventRecorder(self.kube, EVENT_COMPONENT)
        await recorder.event(t.involved, event_type, reason, message)

    # -- writes ------------------------------------------------------------------------------

    async def _apply_record(self, key: str, claim: d.Obj, ref: d.DeviceRef, record: d.Record | None) -> bool:
        try:
            updated = await self.kube.apply(
                RESOURCE_CLAIMS, d.record_apply(claim, ref, record), field_manager=ref.field_manager, force=True
            )
        except ApiError as e:
            # A UID precondition that fails answers 409 (claim gone) or 422 (replaced).
            if e.not_found:
                self._forget_claim(key, claim["metadata"]["uid"])
                return False
            if (e.invalid or e.conflict) and not await self._still_there(key, claim["metadata"]["uid"]):
                return False  # gone, or another claim under this name: nothing to record on
            await self._write_failed(claim, ref, "annotation", e)
            raise RetryableError(f"record for {ref.key} on claim {key}: {e}") from e
        self.claims.upsert(updated)
        return True

    async def _apply_status(
        self, key: str, claim: d.Obj, dev: d.BindingDevice, conditions: list[d.Obj], data: d.Obj | None
    ) -> bool:
        """Write one device's conditions; False when the claim no longer takes them."""
        started = time.monotonic()
        try:
            updated = await self.kube.apply(
                RESOURCE_CLAIMS,
                d.status_apply(claim, dev, conditions, data),
                field_manager=dev.ref.field_manager,
                force=True,
                subresource="status",
            )
        except ApiError as e:
            if e.not_found:
                self._forget_claim(key, claim["metadata"]["uid"])
            if e.not_found or (
                (e.invalid or e.conflict)
                and not await self._still_there(key, claim["metadata"]["uid"], dev.ref, d.allocation_timestamp(claim))
            ):
                # Deleted, replaced (UID), or the device is no longer allocated.
                log.info("claim no longer takes the outcome", claim=key, device=dev.ref.key, error=e.message)
                return False
            # Still allocated, yet refused: most likely RBAC (resourceclaims/driver, see rbac.py).
            await self._write_failed(claim, dev.ref, "status", e)
            raise RetryableError(f"status of {dev.ref.key} on claim {key}: {e}") from e
        self.claims.upsert(updated)
        log.debug("device status written", claim=key, device=dev.ref.key, seconds=time.monotonic() - started)
        return True

    async def _still_there(
        self, key: str, uid: str, ref: d.DeviceRef | None = None, allocated: str | None = None
    ) -> bool:
        """After a 422: is it the same claim (and, with ``ref``, the same allocation of the device)?
        The API server decides, the cache may be behind."""
        namespace, _, name = key.partition("/")
        try:
            live = await self.kube.get_or_none(RESOURCE_CLAIMS, name, namespace)
        except ApiError as e:
            raise RetryableError(f"claim {key}: {e}") from e
        if live is None:
            self._forget_claim(key, uid)
            return False
        self.claims.upsert(live)
        if live["metadata"]["uid"] != uid:
            return False
        if ref is None:
            return True
        return d.allocation_timestamp(live) == allocated and any(
            dev.ref == ref for dev in d.binding_devices(live, self.drivers)
        )

    def _forget_claim(self, key: str, uid: str) -> None:
        """The API server says the claim is gone: drop the cached copy before its DELETED event
        arrives, so that no later sync acts on it."""
        cached = self.claims.get(key)
        if cached is not None and cached["metadata"]["uid"] == uid:
            self.claims.delete(cached)

    async def _write_failed(self, claim: d.Obj, ref: d.DeviceRef, what: str, error: ApiError) -> None:
        log.error(
            "claim write refused",
            claim=key_of(claim),
            device=ref.key,
            what=what,
            status=error.status,
            error=error.message,
        )
        await self.events.event(
            _involved(claim),
            WARNING,
            "FailedDeviceStatusUpdate",
            f"writing the {what} of device {ref.key} failed ({error.status}): {error.message}",
        )

    # -- shutdown ----------------------------------------------------------------------------

    async def stop(self) -> None:
        """Stop workers and abandon running preparations: a restart resumes them from their records."""
        await self.queue.stop()
        tasks = [
            t.task
            for per_claim in self.tracked.values()
            for t in per_claim.values()
            if t.running and t.task is not None
        ]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.preparer.close()
