"""The taints controller: watch events become work-queue keys (``pod:ns/name`` for a Pod that may
have to go, ``rule:name`` for a DeviceTaintRule status), and each key is synced against the cache
and the API server. Decisions live in ``decisions``; this module only reads, schedules and writes.

Nothing here is remembered that the API does not hold, except upstream's in-memory parts (which
Pods this instance evicted, per rule): a restarted operator computes the same deadlines again
from the taints' ``timeAdded`` and the tolerations in the claims.
"""

from __future__ import annotations

import datetime
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import structlog

from ..core.api.kube import STRATEGIC_PATCH, ApiError, Kube
from ..core.api.resources import PODS, Resource
from ..core.dra import resourceclaim as rc
from ..core.dra.metatime import format_time, utcnow
from ..core.machinery import slim
from ..core.machinery.events import NORMAL, WARNING, EventRecorder
from ..core.machinery.store import Store, key_of
from ..core.machinery.uidcache import UidCache
from ..core.machinery.workqueue import RetryableError, WorkQueue
from . import decisions as d
from .metrics import Metrics
from .ratelimit import EvictionLimiter

log = structlog.stdlib.get_logger("operators.taints")

POD_PREFIX, RULE_PREFIX = "pod:", "rule:"


@dataclass(frozen=True)
class Pending:
    uid: str
    eviction: d.Eviction


@dataclass(frozen=True)
class Guards:
    """The guard rails (all off by default): see the settings ``taints_*``."""

    evictions_per_second: float = 0.0
    eviction_api_max_wait: float = 300.0
    eviction_api_retry: float = 2.0


class TaintsController:
    def __init__(
        self,
        kube: Kube,
        *,
        rules: Resource | None,
        rule_status: bool = True,
        workers: int = 10,
        guards: Guards = Guards(),
        metrics: Metrics | None = None,
        workload_claims: bool = False,
    ):
        self.kube = kube
        # DRAWorkloadResourceClaims: a claim reserved for a PodGroup is its member Pods' (found
        # through the "claim" index: their statuses name the PodGroup's claim).
        self.workload_claims = workload_claims
        self.rules_resource = rules  # None: the cluster serves no DeviceTaintRules
        self.rule_status = rule_status and rules is not None
        self.guards = guards
        self.metrics = metrics or Metrics()
        self.pods = Store({"claim": rc.pod_claim_keys}, transform=slim.pod)
        self.claims = Store({"device": lambda c: d.claim_device_keys(c) if rc.is_allocated(c) else []})
        self.slices = Store({"pool": lambda s: [d.slice_pool_key(s)]})
        self.rules = Store()
        self.classes = Store()
        self.budgets = Store({"namespace": lambda b: [b["metadata"]["namespace"]]})
        # Eviction API mode: Pods parked until their PodDisruptionBudget allows a disruption
        # (PDB key -> pod keys, first parked first), and attempts under way per PDB.
        self.parked: dict[str, OrderedDict[str, None]] = {}
        self.attempts: dict[str, int] = {}
        self.pending: dict[str, Pending] = {}  # pod key -> when and why it goes
        self.admitted: dict[
            str, tuple[str, float]
        ] = {}  # pod key -> (uid, monotonic time its rate-limit token is valid)
        self.marked: set[str] = set()  # UIDs with a "Marking for deletion" Event
        self.evicted = UidCache()
        # Pods whose eviction request has not returned yet, by UID (with the eviction): pending
        # until it counts as evicted, even if the Pod is already deleting or gone from the cache.
        self.in_flight: dict[str, tuple[d.Obj, d.Eviction]] = {}
        self.rule_evictions: dict[str, int] = {}  # rule UID -> Pods evicted since start
        self.rule_problems: dict[str, set[tuple[str, str]]] = {}  # rule name -> (reason, message) to report
        self.events = EventRecorder(kube, d.CONTROLLER_NAME, distinct_messages=True)
        self.limiter = EvictionLimiter(guards.evictions_per_second)
        self.queue = WorkQueue(d.CONTROLLER_NAME, self.sync, workers=workers)
        self._views: dict[str, d.PoolView] = {}
        self._timers: dict[str, float] = {}
        # Per-claim eviction cache: claim UID -> (stamp, eviction). The stamp names all the answer
        # depends on (the claim's resourceVersion, which rules were asked, and ``_generation`` for
        # the slices, rule specs and DeviceClasses seen), so a hit is exact; the rule-status
        # passes and the Pods of a shared claim reuse one answer (CEL included) instead of
        # recomputing it per Pod and pass. Rule status writes do not empty it.
        self._claim_evictions: dict[str, tuple[tuple, d.Eviction | None]] = {}
        self._generation = 0  # bumped whenever a slice, a rule's spec or a DeviceClass changes

    # -- lookups -----------------------------------------------------------------------------

    def _view(self, pool_key: str) -> d.PoolView:
        view = self._views.get(pool_key)
        if view is None:
            view = self._views[pool_key] = d.pool_view(self.slices.by_index("pool", pool_key))
        return view

    def _device(self, driver: str, pool: str, device: str) -> tuple[str, d.Obj] | None:
        return self._view(d.pool_key(driver, pool)).device(device)

    def evicting_rules(self) -> list[d.Obj]:
        return [r for r in self.rules.values() if d.is_evicting(r)]

    def claim_eviction(self, claim: d.Obj, rules: list[d.Obj] | None = None) -> d.Eviction | None:
        if rules is None:
            rules = self.evicting_rules()
        meta = claim["metadata"]
        stamp = (
            meta.get("resourceVersion"),
            self._generation,
            tuple((r["metadata"].get("uid"), d.rule_effect(r)) for r in rules),
        )
        cacheable = bool(meta.get("uid") and meta.get("resourceVersion"))
        cached = self._claim_evictions.get(meta["uid"]) if cacheable else None
        if cached is not None and cached[0] == stamp:
            return cached[1]
        eviction = d.claim_eviction(claim, self._device, rules, self._cel)
        if cacheable:
            self._claim_evictions[meta["uid"]] = (stamp, eviction)
        return eviction

    def pod_eviction(self, pod: d.Obj, rules: list[d.Obj] | None = None) -> d.Eviction | None:
        if rules is None:
            rules = self.evicting_rules()
        return d.pod_eviction(
            pod, self.claims.get, lambda claim: self.claim_eviction(claim, rules), self.workload_claims
        )

    def _cel(self, rule: d.Obj, driver: str, device: d.Obj) -> bool:
        """A v1alpha3 rule's DeviceClass and CEL selectors, evaluated on the published device.
        A selector that cannot be evaluated selects nothing: a broken expression must not evict."""
        selector = rule["spec"]["deviceSelector"]
        expressions: list[str] = []
        if class_name := selector.get("deviceClassName"):
            device_class = self.classes.get(class_name)
            if device_class is None:
                self._problem(
                    rule,
                    "DeviceClassNotFound",
                    f"DeviceClass {class_name} does not exist: the rule selects no device until it does",
                )
                return False
            expressions += [
                s["cel"]["expression"]
                for s in (device_class.get("spec") or {}).get("selectors") or []
                if (s.get("cel") or {}).get("expression")
            ]
        expressions += [
            s["cel"]["expression"] for s in selector.get("selectors") or [] if (s.get("cel") or {}).get("expression")
        ]
        if expressions:
            # Only v1alpha3 rules (Kubernetes <= 1.34) select by CEL: the engine (4 MiB) is
            # loaded by the operators that meet one.
            from ..core.dra import cel
        for expression in expressions:
            try:
                if not cel.matches(expression, driver, device):
                    return False
            except cel.SelectorError as e:
                self._problem(
                    rule,
                    "DeviceSelectorFailed",
                    f"CEL selector {expression!r} on device {driver}/{device.get('name')}: {e}; "
                    "the rule does not select this device (fix the expression, e.g. with has() or 'in')",
                )
                return False
        return True

    def _problem(self, rule: d.Obj, reason: str, message: str) -> None:
        problems = self.rule_problems.setdefault(rule["metadata"]["name"], set())
        if (reason, message) not in problems:
            problems.add((reason, message))
            log.warning("rule problem", rule=rule["metadata"]["name"], reason=reason, problem=message)
            self.queue.add(RULE_PREFIX + rule["metadata"]["name"])

    def _result_matches(self, rule: d.Obj, result: d.Obj) -> bool:
        driver, pool, name = result.get("driver", ""), result.get("pool", ""), result.get("device", "")
        found = self._device(driver, pool, name)
        return d.rule_matches_device(rule, driver, pool, name, found[1] if found else None, self._cel)

    # -- event handlers (from watches; never block) -----------------------------------------

    def on_pod(self, pod: d.Obj, deleted: bool) -> None:
        key = rc.pod_key(pod)
        old = self.pods.get(key)
        if deleted:
            if old is not None and old["metadata"].get("uid") == pod["metadata"].get("uid"):
                self.pods.delete(pod)
            pending = self.pending.get(key)
            uid = pod["metadata"].get("uid")
            # Its "Marking" Event is history now, whoever deleted it (a failed eviction leaves
            # the mark, and someone else's delete was the only end it would get).
            ours = uid in self.marked
            self.marked.discard(uid)
            if pending is not None and pending.uid == uid:
                # Gone by itself: nothing to cancel publicly (upstream posts no Event either).
                del self.pending[key]
                self.admitted.pop(key, None)
                self._unpark(key)
                if not ours:  # else it is our own eviction coming back
                    log.info(
                        "pod deleted while its eviction was pending",
                        pod=key,
                        uid=uid,
                        due=format_time(pending.eviction.when),
                    )
            return
        if not self.pods.upsert(pod):
            return
        same = old if old is not None and old["metadata"].get("uid") == pod["metadata"].get("uid") else None
        if (rc.pod_claim_names(pod) or key in self.pending) and d.pod_needs_look(same, pod):
            self.queue.add(POD_PREFIX + key)

    def on_claim(self, claim: d.Obj, deleted: bool) -> None:
        key = key_of(claim)
        old = self.claims.get(key)
        if deleted:
            self.claims.delete(claim)
            self._claim_evictions.pop(claim["metadata"].get("uid", ""), None)
        elif not self.claims.upsert(claim):
            return
        if deleted or d.claim_needs_look(old, claim):
            self._enqueue_claim_pods(old)
            self._enqueue_claim_pods(claim)

    def _enqueue_claim_pods(self, claim: d.Obj | None) -> None:
        if claim is None:
            return
        namespace = claim["metadata"]["namespace"]
        keys = {rc.pod_key(p) for p in self.pods.by_index("claim", key_of(claim))}
        keys.update(f"{namespace}/{name}" for name in rc.reserved_pod_names(claim))
        for key in keys:
            if key in self.pods:
                self.queue.add(POD_PREFIX + key)

    def on_slice(self, slice_: d.Obj, deleted: bool) -> None:
        name = slice_["metadata"]["name"]
        old = self.slices.get(name)
        pools = {d.slice_pool_key(slice_)} | ({d.slice_pool_key(old)} if old else set())
        before = {p: d.no_execute_taints(self._view(p)) for p in pools}
        if deleted:
            self.slices.delete(slice_)
        elif not self.slices.upsert(slice_):
            return
        for p in pools:
            self._views.pop(p, None)
        self._generation += 1
        cel_rules = any(d.uses_cel(r) for r in self.rules.values())
        for p in pools:
            modified = d.modified_devices(before[p], d.no_execute_taints(self._view(p)))
            if cel_rules:  # attributes decide what a CEL rule selects: look at every device
                modified |= {dev.get("name", "") for s in (old, slice_) if s for dev in s["spec"].get("devices") or []}
            for device in modified:
                for claim in self.claims.by_index("device", f"{p}/{device}"):
                    self._enqueue_claim_pods(claim)

    def on_rule(self, rule: d.Obj, deleted: bool) -> None:
        name = rule["metadata"]["name"]
        old = self.rules.get(name)
        if deleted:
            self.rules.delete(rule)
            uid = rule["metadata"].get("uid", "")
            self.rule_evictions.pop(uid, None)
            self.rule_problems.pop(name, None)
            self.limiter.forget_rule(uid)
        elif not self.rules.upsert(rule):
            return
        new = None if deleted else rule
        if not d.rule_spec_changed(old, new):
            # Status or metadata only (our own status writes come back this way); guard-rail
            # annotations are read when a Pod is due, but a bad one is reported now.
            if (
                new is not None
                and old is not None
                and (old["metadata"].get("annotations") != new["metadata"].get("annotations"))
            ):
                self.queue.add(RULE_PREFIX + name)
            return
        self._generation += 1
        if new is not None:
            self.rule_problems.pop(name, None)
            self.queue.add(RULE_PREFIX + name)  # status at once, before any eviction
        self._enqueue_rule_pods([r for r in (old, new) if r is not None])

    def on_class(self, device_class: d.Obj, deleted: bool) -> None:
        name = device_class["metadata"]["name"]
        old = self.classes.get(name)
        if deleted:
            self.classes.delete(device_class)
        elif not self.classes.upsert(device_class):
            return
        if old is not None and not deleted and old.get("spec") == device_class.get("spec"):
            return
        self._generation += 1
        users = [
            r
            for r in self.rules.values()
            if ((r.get("spec") or {}).get("deviceSelector") or {}).get("deviceClassName") == name
        ]
        for rule in users:
            self.rule_problems.pop(rule["metadata"]["name"], None)
        if users:
            self._enqueue_rule_pods(users)

    def on_budget(self, pdb: d.Obj, deleted: bool) -> None:
        key = key_of(pdb)
        if deleted:
            self.budgets.delete(pdb)
        elif not self.budgets.upsert(pdb):
            return
        self._wake(key)

    def _wake(self, budget: str) -> None:
        """Let as many parked Pods try as the PodDisruptionBudget allows now (all of them when
        it is gone): one request per possible eviction, not one per Pod and retry."""
        parked = self.parked.get(budget)
        if not parked:
            return
        pdb = self.budgets.get(budget)
        free = len(parked) if pdb is None else d.budget_allows(pdb) - self.attempts.get(budget, 0)
        while parked and free > 0:
            key, _ = parked.popitem(last=False)
            if key in self.pending:
                self.queue.add(POD_PREFIX + key)
                free -= 1
        if not parked:
            del self.parked[budget]

    def _budgets_of(self, pod: d.Obj) -> list[str]:
        return [
            key_of(b)
            for b in self.budgets.by_index("namespace", pod["metadata"]["namespace"])
            if d.budget_selects(b, pod)
        ]

    def _enqueue_rule_pods(self, rules: list[d.Obj]) -> None:
        """Pods of allocated claims with a device the rule selects (before or after a change);
        rule changes are rare, so every allocated claim is looked at."""
        for claim in self.claims.values():
            if rc.is_allocated(claim) and any(
                self._result_matches(rule, result) for rule in rules for result in rc.allocation_results(claim)
            ):
                self._enqueue_claim_pods(claim)

    # -- timers ------------------------------------------------------------------------------

    def _after(self, key: str, delay: float) -> None:
        """Sync ``key`` in ``delay`` seconds, unless an earlier sync of it is already due (that
        sync recomputes everything and schedules again if needed)."""
        now = time.monotonic()
        due = now + max(delay, 0.0)
        current = self._timers.get(key)
        if current is not None and now < current <= due + 0.001:
            return
        self._timers[key] = due
        self.queue.add_after(key, max(delay, 0.0))

    # -- sync --------------------------------------------------------------------------------

    async def sync(self, key: str) -> None:
        due = self._timers.get(key)
        if due is not None and due <= time.monotonic() + 0.01:
            del self._timers[key]
        if key.startswith(POD_PREFIX):
            await self.sync_pod(key[len(POD_PREFIX) :])
        elif key.startswith(RULE_PREFIX):
            await self.sync_rule(key[len(RULE_PREFIX) :])
        else:
            log.error("unexpected work queue key", key=key)

    async def sync_pod(self, key: str) -> None:
        pod = self.pods.get(key)
        pending = self.pending.get(key)
        if pod is None:
            return
        uid = pod["metadata"]["uid"]
        if pending is not None and pending.uid != uid:
            del self.pending[key]  # that Pod instance is gone; this one is new
            pending = None
        eviction = self.pod_eviction(pod)
        if eviction is None:
            if pending is not None:
                del self.pending[key]
                self.admitted.pop(key, None)
                self._unpark(key)
                self.marked.discard(uid)
                log.info(
                    "pod eviction cancelled",
                    pod=key,
                    claims=rc.pod_claim_keys(pod),
                    was_due=format_time(pending.eviction.when),
                    reasons=[str(r) for r in pending.eviction.reasons],
                )
                self.events.post(pod, NORMAL, d.EVENT_REASON, d.CANCELLING)
            return
        if uid in self.evicted:
            return
        if pending is None or pending.eviction != eviction:
            self.pending[key] = Pending(uid, eviction)
            log.info(
                "pod eviction scheduled",
                pod=key,
                due=format_time(eviction.when),
                reasons=[str(r) for r in eviction.reasons],
                rules=eviction.rule_names(),
                claims=rc.pod_claim_keys(pod),
                devices=self._pod_devices(pod),
            )
            # Rule status follows once more Pods had their say (upstream: ruleStatusPeriod later).
            for rule in eviction.rule_names():
                self._after(RULE_PREFIX + rule, d.RULE_STATUS_PERIOD)
        delay = (eviction.when - utcnow()).total_seconds()
        if delay > 0:
            self._after(POD_PREFIX + key, delay)
            return
        wait = self._admission(key, uid, eviction)
        if wait > 0:
            self._after(POD_PREFIX + key, wait)
            return
        await self._evict(key, pod, eviction)

    def _pod_devices(self, pod: d.Obj) -> list[str]:
        devices = []
        for key in rc.pod_claim_keys(pod):
            claim = self.claims.get(key)
            if claim is not None:
                devices += d.claim_device_keys(claim)
        return devices

    def _reason_rules(self, eviction: d.Eviction) -> list[d.Obj]:
        rules = (self.rules.get(name) for name in eviction.rule_names())
        return [r for r in rules if r is not None]

    def _admission(self, key: str, uid: str, eviction: d.Eviction) -> float:
        """Seconds until the rate limits let this Pod go (a token is reserved once per Pod)."""
        admitted = self.admitted.get(key)
        now = time.monotonic()
        if admitted is not None and admitted[0] == uid:
            return max(0.0, admitted[1] - now)
        rates: dict[str, float] = {}
        for rule in self._reason_rules(eviction):
            try:
                rate = d.rule_rate(rule)
            except d.BadAnnotation:
                continue  # reported by sync_rule
            if rate is not None:
                rates[rule["metadata"]["uid"]] = rate
        if not rates and self.guards.evictions_per_second <= 0:
            return 0.0
        wait = self.limiter.reserve(rates)
        self.admitted[key] = (uid, now + wait)
        if wait > 0:
            log.info("pod eviction rate limited", pod=key, wait=round(wait, 3), rules=eviction.rule_names())
        return wait

    async def _evict(self, key: str, cached: d.Obj, eviction: d.Eviction) -> None:
        """``maybeDeletePod``/``addConditionAndDeletePod``, or the Eviction API for rules that ask."""
        namespace, name = key.split("/", 1)
        uid = cached["metadata"]["uid"]
        rules = self._reason_rules(eviction)
        api_wait = d.eviction_api_wait(rules, eviction, self.guards.eviction_api_max_wait)
        logger = log.bind(
            pod=key,
            uid=uid,
            rules=eviction.rule_names(),
            reasons=[str(r) for r in eviction.reasons],
            claims=rc.pod_claim_keys(cached),
            devices=self._pod_devices(cached),
        )
        deadline = eviction.when + datetime.timedelta(seconds=api_wait or 0)
        remaining = (deadline - utcnow()).total_seconds()
        budgets = self._budgets_of(cached) if api_wait is not None and remaining > 0 else []
        for budget in budgets:
            pdb = self.budgets.get(budget)  # listed from the store just now: never None
            if pdb is not None and d.budget_allows(pdb) - self.attempts.get(budget, 0) <= 0:
                # Wait for the budget's next change (or the re-check timer), without a request.
                self._park(key, budget, remaining)
                return
        # The Pod as the cache has it, where upstream GETs it first (addConditionAndDeletePod):
        # every request below names its UID, so a Pod replaced under the same name is refused,
        # not evicted (409) and one that is gone answers 404. At the envelope that GET was a
        # third of the requests per eviction and a tenth of this operator's CPU
        # (bench/RESULTS.md).
        pod = cached
        if d.is_deleting(pod):
            self._done(key, uid)  # already on its way out
            return

        if api_wait is not None:
            if remaining > 0:
                await self._mark(pod)
                for budget in budgets:
                    self.attempts[budget] = self.attempts.get(budget, 0) + 1
                self.in_flight[uid] = (pod, eviction)
                try:
                    await self.kube.request("POST", PODS.path(namespace, name, "eviction"), body=d.eviction_body(pod))
                except ApiError as e:
                    if e.status == 429:
                        self.metrics.eviction(d.EVICTION_API, d.BLOCKED)
                        logger.info(
                            "eviction refused by a PodDisruptionBudget, will retry",
                            message=e.message,
                            deletes_at=format_time(deadline),
                        )
                        self._park(key, budgets[0] if budgets else "", remaining)
                        return
                    if e.not_found or e.conflict:
                        self._done(key, uid)
                        return
                    self.metrics.eviction(d.EVICTION_API, d.FAILED)
                    raise RetryableError(f"evict pod {key}: {e}") from e
                finally:
                    self.in_flight.pop(uid, None)
                    for budget in budgets:
                        self.attempts[budget] -= 1
                self.metrics.eviction(d.EVICTION_API, d.EVICTED)
                self._evicted(key, uid, eviction, logger, "Eviction API")
                return  # the budget's next status says how many more may go
            self.metrics.eviction(d.EVICTION_API, d.GAVE_UP)
            logger.warning(
                "PodDisruptionBudget still refuses after the longest wait, deleting the pod", max_wait=api_wait
            )

        self.in_flight[uid] = (pod, eviction)
        try:
            if not d.has_pod_condition(pod):
                await self.kube.patch(
                    PODS,
                    name,
                    d.pod_condition_patch(pod, utcnow()),
                    namespace,
                    content_type=STRATEGIC_PATCH,
                    subresource="status",
                    field_manager=d.CONTROLLER_NAME,
                )
            # After the patch, which found this very Pod: no "Marking" Event for one already
            # gone or replaced (upstream's GET tells it that before its Event).
            await self._mark(pod)
            await self.kube.delete(PODS, name, namespace, uid=uid)
        except ApiError as e:
            if e.not_found or e.conflict:
                self._done(key, uid)  # gone, or replaced under the same name: not ours to delete
                return
            self.metrics.eviction(d.DELETE, d.FAILED)
            raise RetryableError(f"delete pod {key}: {e}") from e
        finally:
            self.in_flight.pop(uid, None)
        self.metrics.eviction(d.DELETE, d.EVICTED)
        self._evicted(key, uid, eviction, logger, "delete")

    def _unpark(self, key: str) -> None:
        for budget in [b for b, keys in self.parked.items() if key in keys]:
            del self.parked[budget][key]
            if not self.parked[budget]:
                del self.parked[budget]

    def _park(self, key: str, budget: str, remaining: float) -> None:
        if budget:
            self.parked.setdefault(budget, OrderedDict())[key] = None
        # A cheap re-check against the cache in a while, and the deadline after which it is deleted.
        self._after(POD_PREFIX + key, min(self.guards.eviction_api_retry, remaining))

    async def _mark(self, pod: d.Obj) -> None:
        uid = pod["metadata"]["uid"]
        if uid not in self.marked:
            self.marked.add(uid)
            self.events.post(pod, NORMAL, d.EVENT_REASON, d.MARKING)

    def _done(self, key: str, uid: str) -> None:
        """Nothing (more) to do for this Pod instance; not counted as an eviction."""
        pending = self.pending.get(key)
        if pending is not None and pending.uid == uid:
            del self.pending[key]
        self.admitted.pop(key, None)
        self._unpark(key)
        self.marked.discard(uid)
        self.evicted.add(uid)

    def _evicted(self, key: str, uid: str, eviction: d.Eviction, logger: Any, how: str) -> None:
        self._done(key, uid)
        latency = (utcnow() - eviction.when).total_seconds()
        self.metrics.pod_deleted(max(latency, 0.0))
        for reason in eviction.reasons:
            if reason.is_rule:
                self.rule_evictions[reason.rule_uid] = self.rule_evictions.get(reason.rule_uid, 0) + 1
                self._after(RULE_PREFIX + reason.rule, d.RULE_STATUS_PERIOD)
        logger.info("evicted pod", how=how, latency=round(latency, 3), due=format_time(eviction.when))

    # -- DeviceTaintRule status --------------------------------------------------------------

    def rule_counts(self, rule: d.Obj) -> d.RuleCounts:
        """``countPendingPods`` (and ``countTaintedDevices`` for effect None, simulated as
        NoExecute with this rule alone, as upstream)."""
        effect = d.rule_effect(rule)
        if effect == d.NO_EXECUTE:
            rules = self.evicting_rules()
        elif effect == d.NONE_EFFECT:
            rule = d.as_no_execute(rule)
            rules = [rule]
        else:
            return d.RuleCounts()
        pods, namespaces = self.pods_evicted_by(rule, rules)
        published, allocated = self.selected_devices(rule) if effect == d.NONE_EFFECT else (0, 0)
        return d.RuleCounts(len(pods), len(namespaces), published, allocated)

    def selected_devices(self, rule: d.Obj) -> tuple[int, int]:
        """``countTaintedDevices``: devices the rule selects in slices of the newest pool
        generations, and in allocation results."""
        published = 0
        for pool in {d.slice_pool_key(s) for s in self.slices.values()}:
            driver, _, pool_name = pool.partition("/")
            published += sum(
                1
                for name, (_, device) in self._view(pool).devices.items()
                if d.rule_matches_device(rule, driver, pool_name, name, device, self._cel)
            )
        allocated = sum(
            1
            for c in self.claims.values()
            if rc.is_allocated(c)
            for r in rc.allocation_results(c)
            if self._result_matches(rule, r)
        )
        return published, allocated

    def pods_evicted_by(self, rule: d.Obj, rules: list[d.Obj]) -> tuple[list[tuple[d.Obj, d.Eviction]], set[str]]:
        """Pods not yet deleting whose eviction (under ``rules``) has ``rule`` among its reasons."""
        rule_uid = rule["metadata"].get("uid")
        found, namespaces = [], set()
        for pod in self.pods.values():
            # Exact at every instant (so pending + evicted in the rule status adds up): a Pod
            # whose eviction we finished counts as evicted even before its watch event says it is
            # deleting, and one whose DELETE is in flight is still pending until it counts.
            uid = pod["metadata"].get("uid")
            if uid in self.evicted or (d.is_deleting(pod) and uid not in self.in_flight):
                continue
            eviction = self.pod_eviction(pod, rules)
            if eviction is not None and rule_uid in eviction.rule_uids():
                found.append((pod, eviction))
                namespaces.add(pod["metadata"]["namespace"])
        listed = {pod["metadata"].get("uid") for pod, _ in found}
        for uid, (pod, eviction) in self.in_flight.items():
            if uid not in listed and rule_uid in eviction.rule_uids():
                found.append((pod, eviction))
                namespaces.add(pod["metadata"]["namespace"])
        return found, namespaces

    def _check_annotations(self, rule: d.Obj) -> None:
        for check, consequence in (
            (d.rule_rate, "the rule's evictions are not rate limited"),
            (d.uses_eviction_api, "the rule's Pods are deleted as upstream does"),
            (lambda r: d.eviction_api_max_wait(r, 0), "the default wait applies"),
        ):
            try:
                check(rule)
            except d.BadAnnotation as e:
                self._problem(rule, "InvalidAnnotation", f"{e}; {consequence}")

    async def sync_rule(self, name: str) -> None:
        rule = self.rules.get(name)
        if rule is None:
            return
        self._check_annotations(rule)
        for reason, message in sorted(self.rule_problems.get(name, ())):
            await self.events.event(rule, WARNING, reason, message)
        if not self.rule_status:
            return
        now = utcnow()
        wait = d.status_wait(rule, now)
        if wait > 0:
            self._after(RULE_PREFIX + name, wait)
            return
        evicted = self.rule_evictions.get(rule["metadata"]["uid"], 0)
        condition = d.rule_condition(rule, self.rule_counts(rule), evicted)
        if not d.condition_changed(d.existing_condition(rule), condition):
            return
        rules_resource = self.rules_resource
        if rules_resource is None:
            return  # cannot happen: no rules without a DeviceTaintRule resource
        body = d.rule_status_apply(rule, rules_resource.group_version, condition, now)
        try:
            updated = await self.kube.apply(
                rules_resource, body, field_manager=d.CONTROLLER_NAME, force=True, subresource="status"
            )
        except ApiError as e:
            if e.not_found or e.conflict:
                return  # deleted, or replaced by a rule of the same name (UID precondition)
            raise RetryableError(f"DeviceTaintRule {name} status: {e}") from e
        self.rules.upsert(updated)
        log.info(
            "rule status updated",
            rule=name,
            reason=condition["reason"],
            message=condition["message"],
            status=condition["status"],
        )

    # -- start-up ----------------------------------------------------------------------------

    def prime(
        self,
        rules: Iterable[d.Obj],
        classes: Iterable[d.Obj],
        slices: Iterable[d.Obj],
        claims: Iterable[d.Obj],
        pods: Iterable[d.Obj],
        budgets: Iterable[d.Obj] = (),
    ) -> None:
        """Fill the caches from LISTs before any worker runs; every Pod using claims and every
        rule gets a sync. Listed items carry no kind: Events about them need one."""
        rule_version = self.rules_resource.group_version if self.rules_resource else ""
        rules = [_typed(r, rule_version, "DeviceTaintRule") for r in rules]
        pods = [_typed(p, "v1", "Pod") for p in pods]
        for obj in budgets:
            self.budgets.upsert(obj)
        for obj in classes:
            self.classes.upsert(obj)
        for obj in slices:
            self.slices.upsert(obj)
        for obj in rules:
            self.rules.upsert(obj)
            self.queue.add(RULE_PREFIX + obj["metadata"]["name"])
        for obj in claims:
            self.claims.upsert(obj)
        for obj in pods:
            self.pods.upsert(obj)
            if rc.pod_claim_names(obj):
                self.queue.add(POD_PREFIX + rc.pod_key(obj))
        self._views.clear()


def _typed(obj: d.Obj, api_version: str, kind: str) -> d.Obj:
    return obj if obj.get("kind") else {"apiVersion": api_version, "kind": kind, **obj}
