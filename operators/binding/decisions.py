"""What the binding operator decides, as pure functions over plain dicts.

The scheduler side is kube-scheduler's DynamicResources plugin at v1.37.1
(pkg/scheduler/framework/plugins/dynamicresources/dynamicresources.go): ``isClaimReadyForBinding``
looks up ``status.devices[]`` by driver, pool and device (the first match, shareID ignored), a
device is ready when every ``bindingConditions`` type is True there, failed when any
``bindingFailureConditions`` type is True, and it times out ``bindingTimeout`` after
``status.allocation.allocationTimestamp``. Everything here speaks that language.

Writes are server-side applies with one field manager per allocated device, so that each apply
touches exactly one ``status.devices[]`` entry (a list-map keyed by driver, pool, device and
shareID) and one annotation: other writers' entries, conditions and data are never part of a
body we send, and devices of the same claim never have to be written together.
"""

from __future__ import annotations

import datetime
import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..core.dra import metatime
from ..core.dra.claimstate import PENDING, device_binding_verdict
from ..core.dra.metatime import format_time
from ..core.dra.resourceclaim import Obj, allocation_results, reserved_pod_names

API_VERSION = "resource.k8s.io/v1"
DOMAIN = "binding.dra-operators.dev"
FIELD_MANAGER = "dra-operators-binding"
RECORD_ANNOTATION_PREFIX = f"{DOMAIN}/prep-"
# Held while a claim carries a preparation record: a claim deleted while the operator is away
# (down, failing over) stays until its preparations are undone, instead of taking the only trace
# of an attachment with it. Each device's field manager co-owns it beside its record annotation.
FINALIZER = f"{DOMAIN}/preparations"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "dra-operators-binding"
DRIVER_LABEL = f"{DOMAIN}/driver"
COOL_OFF_UNTIL_ANNOTATION = f"{DOMAIN}/cool-off-until"
COOL_OFF_CLAIM_ANNOTATION = f"{DOMAIN}/claim"
COOL_OFF_MESSAGE_ANNOTATION = f"{DOMAIN}/message"

# Outcome labels (metrics, logs): the scheduler's binding-condition statuses are success, failed
# and timeout; ours say what the preparer reported.
OUTCOME_READY, OUTCOME_FAILED, OUTCOME_TIMEOUT = "ready", "failed", "timeout"
OUTCOME_CANCELLED = "cancelled"  # the allocation went away before the deadline (Pod gone)
REASON_PREPARED = "DevicePrepared"
REASON_TIMEOUT = "BindingTimeout"
REASON_PREPARER_ERROR = "PreparerError"

_REASON_RE = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_MAX_MESSAGE = 32768


# -- time --------------------------------------------------------------------------------------


def parse_time(text: str | None) -> datetime.datetime | None:
    """Lenient: an annotation of ours can be edited to anything, and a time that does not parse
    counts as none."""
    try:
        return metatime.parse_time(text)
    except ValueError:
        return None


# -- which drivers this instance serves ---------------------------------------------------------


@dataclass(frozen=True)
class DriverFilter:
    """Comma-separated driver names or shell patterns (``*.example.com``; ``*`` for every driver)."""

    patterns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> DriverFilter:
        return cls(tuple(p.strip() for p in text.split(",") if p.strip()))

    def serves(self, driver: str) -> bool:
        return any(fnmatch.fnmatchcase(driver, p) for p in self.patterns)

    @property
    def exact_names(self) -> list[str] | None:
        """The driver names for RBAC ``resourceNames``; None when a pattern makes that impossible."""
        if any(ch in p for p in self.patterns for ch in "*?["):
            return None
        return sorted(self.patterns)


# -- devices of a claim ------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRef:
    driver: str
    pool: str
    device: str
    share_id: str | None = None

    @property
    def key(self) -> str:
        """Unique per claim; readable in logs. Pool names may contain '/', so never parsed back."""
        base = f"{self.driver}/{self.pool}/{self.device}"
        return f"{base}#{self.share_id}" if self.share_id else base

    @property
    def digest(self) -> str:
        raw = "\0".join((self.driver, self.pool, self.device, self.share_id or ""))
        return hashlib.sha256(raw.encode()).hexdigest()[:12]

    @property
    def field_manager(self) -> str:
        """One manager per device: an apply never carries another device's entry."""
        return f"{FIELD_MANAGER}/{self.digest}"

    @property
    def record_annotation(self) -> str:
        return RECORD_ANNOTATION_PREFIX + self.digest

    def status_key(self) -> Obj:
        entry: Obj = {"driver": self.driver, "pool": self.pool, "device": self.device}
        if self.share_id:
            entry["shareID"] = self.share_id
        return entry


@dataclass(frozen=True)
class BindingDevice:
    """An allocated device that makes the scheduler wait in PreBind."""

    ref: DeviceRef
    request: str
    conditions: tuple[str, ...]
    failure_conditions: tuple[str, ...]


def allocation(claim: Obj | None) -> Obj | None:
    return ((claim or {}).get("status") or {}).get("allocation")


def allocation_timestamp(claim: Obj | None) -> str | None:
    return (allocation(claim) or {}).get("allocationTimestamp")


def binding_devices(claim: Obj | None, drivers: DriverFilter) -> list[BindingDevice]:
    """Allocated devices of served drivers that carry binding conditions (scheduler: a result
    with an empty ``bindingConditions`` list needs no wait)."""
    if claim is None or not allocation(claim):
        return []
    devices = []
    for result in allocation_results(claim):
        conditions = tuple(result.get("bindingConditions") or ())
        if not conditions or not drivers.serves(result.get("driver", "")):
            continue
        ref = DeviceRef(result["driver"], result["pool"], result["device"], result.get("shareID"))
        devices.append(
            BindingDevice(
                ref, result.get("request", ""), conditions, tuple(result.get("bindingFailureConditions") or ())
            )
        )
    return devices


def consumer_pods(claim: Obj | None) -> list[str]:
    """Names of the Pods the claim is reserved for (the scheduler reserves before PreBind)."""
    return sorted(reserved_pod_names(claim or {}))


def node_of(claim: Obj | None) -> str | None:
    """The node chosen at allocation: the scheduler writes ``matchFields metadata.name In [node]``
    for node-local devices and for ``bindsToNode``. Anything else names no single node."""
    selector = (allocation(claim) or {}).get("nodeSelector") or {}
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1:
        return None
    requirement = fields[0]
    values = requirement.get("values") or []
    if requirement.get("key") == "metadata.name" and requirement.get("operator") == "In" and len(values) == 1:
        return values[0]
    return None


def device_status(claim: Obj | None, ref: DeviceRef) -> Obj | None:
    """``getAllocatedDeviceStatus``: the first entry with the same driver, pool and device."""
    for entry in ((claim or {}).get("status") or {}).get("devices") or []:
        if (entry.get("driver"), entry.get("pool"), entry.get("device")) == (ref.driver, ref.pool, ref.device):
            return entry
    return None


def _condition(entry: Obj | None, type_: str) -> Obj | None:
    for cond in (entry or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond
    return None


def binding_state(claim: Obj | None, dev: BindingDevice) -> str:
    """The scheduler's verdict for one device: failed wins over ready, as in ``isClaimReadyForBinding``."""
    entry = device_status(claim, dev.ref)
    if entry is None:
        return PENDING
    return device_binding_verdict(entry.get("conditions") or [], dev.conditions, dev.failure_conditions)


def deadline(allocated_at: str | None, started: datetime.datetime, timeout: float) -> datetime.datetime:
    """The scheduler gives up ``bindingTimeout`` after ``allocationTimestamp`` (``isClaimTimeout``);
    without a timestamp (an older scheduler) our own start is the best anchor."""
    anchor = parse_time(allocated_at) or started
    return anchor + datetime.timedelta(seconds=timeout)


# -- the outcome, as conditions ----------------------------------------------------------------


def condition_reason(text: str, default: str) -> str:
    """metav1.Condition reasons are CamelCase identifiers; an external service's text may not be."""
    words = re.findall(r"[A-Za-z0-9]+", text or "")
    reason = "".join(w[:1].upper() + w[1:] for w in words)
    reason = reason.lstrip("0123456789")[:1024]
    return reason if reason and _REASON_RE.match(reason) else default


def outcome_conditions(
    dev: BindingDevice, ready: bool, reason: str, message: str, existing: Obj | None, at: datetime.datetime
) -> list[Obj]:
    """Ready: every binding condition True. Failed: the first failure condition True and the
    binding conditions False, all with the reason and message. A condition whose status does not
    change keeps its ``lastTransitionTime``."""
    message = (message or "")[:_MAX_MESSAGE]
    wanted: list[tuple[str, str]] = [(t, "True" if ready else "False") for t in dev.conditions]
    if not ready and dev.failure_conditions:
        wanted.append((dev.failure_conditions[0], "True"))
    conditions = []
    for type_, status in wanted:
        old = _condition(existing, type_)
        since = (
            old["lastTransitionTime"]
            if old and old.get("status") == status and old.get("lastTransitionTime")
            else format_time(at)
        )
        conditions.append(
            {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}
        )
    return conditions


def claim_ref(claim: Obj) -> Obj:
    meta = claim["metadata"]
    # The UID makes the apply fail (422) instead of writing into a new claim of the same name.
    return {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]}


def status_apply(claim: Obj, dev: BindingDevice, conditions: list[Obj], data: Obj | None = None) -> Obj:
    """The server-side apply body for one ``status.devices[]`` entry (``resourceclaims/status``)."""
    entry = {**dev.ref.status_key(), "conditions": conditions}
    if data:
        entry["data"] = data
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": claim_ref(claim),
        "status": {"devices": [entry]},
    }


# -- records: what survives a restart and a deallocation ---------------------------------------


@dataclass(frozen=True)
class Record:
    """A preparation that was started, kept in an annotation on the claim until it is undone:
    the allocation (and its ``status.devices``) can be cleared while the operator is down."""

    ref: DeviceRef
    node: str | None
    started: str
    allocated: str | None

    def to_json(self) -> str:
        body = {**self.ref.status_key(), "node": self.node, "started": self.started, "allocated": self.allocated}
        return json.dumps({k: v for k, v in body.items() if v is not None}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Record | None:
        """The record in an annotation's value; None for anything that is not one (edited by hand)."""
        try:
            body = json.loads(text)
            ref = DeviceRef(body["driver"], body["pool"], body["device"], body.get("shareID"))
            record = cls(ref, body.get("node"), body["started"], body.get("allocated"))
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):  # the last: JSON nested too deep
            return None
        required = (ref.driver, ref.pool, ref.device, record.started)
        optional = (ref.share_id, record.node, record.allocated)
        if not all(isinstance(v, str) and v for v in required) or not all(
            v is None or isinstance(v, str) for v in optional
        ):
            return None
        return record


def records(claim: Obj | None, drivers: DriverFilter) -> list[Record]:
    """Our records on ``claim`` for served drivers; one whose key does not match its content
    (edited by hand) is ignored."""
    found = []
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    for key, value in sorted(annotations.items()):
        if not key.startswith(RECORD_ANNOTATION_PREFIX):
            continue
        record = Record.from_json(value)
        if record and record.ref.record_annotation == key and drivers.serves(record.ref.driver):
            found.append(record)
    return found


def record_problems(claim: Obj | None) -> list[tuple[str, str]]:
    """(annotation, why) for annotations under our record prefix that are no usable record:
    they are ignored, and the user is told to remove them."""
    problems = []
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    for key, value in sorted(annotations.items()):
        if not key.startswith(RECORD_ANNOTATION_PREFIX):
            continue
        record = Record.from_json(value)
        if record is None:
            problems.append(
                (
                    key,
                    "is not a preparation record of the binding operator (a JSON object with "
                    "driver, pool, device and started)",
                )
            )
        elif record.ref.record_annotation != key:
            problems.append(
                (
                    key,
                    f"holds the record of device {record.ref.key}, whose record annotation is "
                    f"{record.ref.record_annotation} (copied or edited by hand)",
                )
            )
    return problems


def record_apply(claim: Obj, ref: DeviceRef, record: Record | None) -> Obj:
    """Apply body for one record annotation and the finalizer that keeps the claim while it is
    there; ``None`` removes both (the device's field manager stops owning them; the finalizer
    goes with the claim's last record)."""
    meta = claim_ref(claim)
    if record is not None:
        meta["annotations"] = {ref.record_annotation: record.to_json()}
        meta["finalizers"] = [FINALIZER]
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": meta}


def has_finalizer(claim: Obj | None) -> bool:
    return FINALIZER in (((claim or {}).get("metadata") or {}).get("finalizers") or ())


def has_record(claim: Obj | None, ref: DeviceRef, record: Record | None) -> bool:
    annotations = ((claim or {}).get("metadata") or {}).get("annotations") or {}
    current = annotations.get(ref.record_annotation)
    if record is None:
        return current is None
    return current == record.to_json() and has_finalizer(claim)


def records_without_finalizer(claim: Obj | None, drivers: DriverFilter) -> list[Record]:
    """Records written before the finalizer existed (an upgrade): each is applied again, with it.
    Not on a claim being deleted, which may no longer gain finalizers."""
    if has_finalizer(claim) or ((claim or {}).get("metadata") or {}).get("deletionTimestamp"):
        return []
    return records(claim, drivers)


# -- the plan for one claim --------------------------------------------------------------------


@dataclass(frozen=True)
class Known:
    """What the controller knows about one device key of a claim."""

    claim_uid: str
    allocated: str | None
    started: datetime.datetime
    running: bool = False
    outcome_pending: bool = False


@dataclass
class Plan:
    undo: list[str] = field(default_factory=list)  # keys whose allocation is gone
    start: list[BindingDevice] = field(default_factory=list)  # prepare now
    expire: list[BindingDevice] = field(default_factory=list)  # too late to prepare: report timeout
    report: list[BindingDevice] = field(default_factory=list)  # a finished preparation to write
    settled: list[BindingDevice] = field(default_factory=list)  # the claim already shows the outcome
    waiting: list[BindingDevice] = field(default_factory=list)  # a preparation is running


def plan(
    claim: Obj | None, known: Mapping[str, Known], drivers: DriverFilter, timeout: float, at: datetime.datetime
) -> Plan:
    """Level-triggered: from the claim as it is and what is known, what to do now."""
    result = Plan()
    uid = ((claim or {}).get("metadata") or {}).get("uid")
    allocated = allocation_timestamp(claim)
    current = {dev.ref.key: dev for dev in binding_devices(claim, drivers)}
    for key, old in known.items():
        # Another claim under the same name, a device no longer allocated, or a new allocation
        # (another timestamp) of the same device: the old preparation is over.
        if old.claim_uid != uid or key not in current or old.allocated != allocated:
            result.undo.append(key)
    for key, dev in current.items():
        k = known.get(key)
        if k is not None and key in result.undo:
            k = None  # undone first, then prepared anew for the new allocation
        state = binding_state(claim, dev)
        if k is not None and k.outcome_pending:
            result.report.append(dev)
        elif state != PENDING:
            result.settled.append(dev)
        elif k is not None and k.running:
            result.waiting.append(dev)
        elif at >= deadline(allocated, k.started if k else at, timeout):
            result.expire.append(dev)
        else:
            result.start.append(dev)
    return result


def undo_means_timeout(
    known: Known, allocated_at: str | None, timeout: float, at: datetime.datetime, outcome_written: bool
) -> bool:
    """The allocation went away while our preparation had not finished, after the scheduler's
    deadline: the scheduler gave up on this device, which makes it a failed device."""
    return not outcome_written and at >= deadline(allocated_at, known.started, timeout)


# -- cool-off: a DeviceTaintRule per failed device ---------------------------------------------


def cool_off_rule_name(ref: DeviceRef) -> str:
    # Device names are DNS labels (<= 63), so the name stays a valid DNS subdomain (<= 253).
    return f"dra-binding-{ref.device}-{ref.digest}"


def label_value(text: str) -> str:
    """A taint value must be a label value: <= 63 of [A-Za-z0-9_.-], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "", text or "")[:63]
    return cleaned.strip("_.-")


def cool_off_rule(
    ref: DeviceRef,
    api_version: str,
    key: str,
    effect: str,
    reason: str,
    until: datetime.datetime,
    claim: str,
    message: str,
) -> Obj:
    """A DeviceTaintRule that makes the allocator avoid one device until ``until``."""
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": cool_off_rule_name(ref),
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, DRIVER_LABEL: label_value(ref.driver)},
            "annotations": {
                COOL_OFF_UNTIL_ANNOTATION: format_time(until),
                COOL_OFF_CLAIM_ANNOTATION: claim,
                COOL_OFF_MESSAGE_ANNOTATION: (message or "")[:1024],
            },
        },
        "spec": {
            "deviceSelector": {"driver": ref.driver, "pool": ref.pool, "device": ref.device},
            "taint": {"key": key, "value": label_value(reason), "effect": effect},
        },
    }


def cool_off_until(rule: Obj) -> datetime.datetime | None:
    return parse_time(((rule.get("metadata") or {}).get("annotations") or {}).get(COOL_OFF_UNTIL_ANNOTATION))


def cool_off_driver(rule: Obj) -> str | None:
    return ((rule.get("spec") or {}).get("deviceSelector") or {}).get("driver")


def is_ours(rule: Obj) -> bool:
    return ((rule.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY


def keys(devices: Iterable[BindingDevice]) -> list[str]:
    return [d.ref.key for d in devices]
