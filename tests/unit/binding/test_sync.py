"""The binding controller's sync, table-driven over the shared fake API (no upstream
counterpart: binding conditions are prepared by drivers' controllers, not kube-controller-manager).
Each case: the claim the API server and cache hold, the drivers served, what the preparer
answers, and after the sync (and the sync its finished preparation brings) the writes sent, the
record and conditions stored, and the Events.

Not covered here: undo after a deallocation and adoption after a restart (their server-side
apply removes fields a field manager stops applying, which the fake API does not model; see
tests/integration/test_binding.py), cool-off DeviceTaintRules (off here: no rules resource).
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field

import pytest

from operators.binding import decisions as d
from operators.binding.controller import BindingController
from operators.binding.preparers.base import Outcome, Preparer
from operators.core.api.resources import EVENTS, RESOURCE_CLAIMS
from operators.core.dra.metatime import format_time, utcnow
from tests.fakeapi import FakeApi, service_unavailable

DRIVER, POOL, DEVICE = "gpu.example.com", "node-1", "gpu-0"


def claim(driver=DRIVER, conditions=("example.com/ready",), allocated=True):
    c = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default", "uid": "u-c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {},
    }
    if allocated:
        c["status"]["allocation"] = {
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
                ]
            },
            "devices": {
                "results": [
                    {
                        "request": "r",
                        "driver": driver,
                        "pool": POOL,
                        "device": DEVICE,
                        "bindingConditions": list(conditions),
                        "bindingFailureConditions": ["example.com/failed"],
                    }
                ]
            },
        }
        c["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u-p"}]
    return c


class Answering(Preparer):
    name = "table"

    def __init__(self, outcome: Outcome | Exception):
        self.outcome, self.prepared, self.undone = outcome, [], []

    async def prepare(self, preparation):
        self.prepared.append(preparation.device)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    async def undo(self, preparation):
        self.undone.append(preparation.device)


@dataclass
class Case:
    name: str
    claim: dict
    outcome: Outcome | Exception = field(default_factory=lambda: Outcome.prepared("attached"))
    drivers: str = DRIVER
    reactors: list = field(default_factory=list)
    prepared: list = field(default_factory=list)
    writes: list = field(default_factory=list)  # (subresource or "", what the apply sets)
    conditions: dict = field(default_factory=dict)  # condition type -> status, in status.devices
    events: list = field(default_factory=list)  # reasons
    error: str = ""


READY = {"example.com/ready": "True"}  # a ready device gets only its binding condition
FAILED = {"example.com/ready": "False", "example.com/failed": "True"}

CASES = [
    Case("claim-without-binding-conditions", claim(conditions=())),
    Case("claim-of-another-driver", claim(driver="other.example.com")),
    Case("unallocated-claim", claim(allocated=False)),
    Case(
        "prepared",
        claim(),
        prepared=[DEVICE],
        writes=[("", "record"), ("status", "conditions")],
        conditions=READY,
        events=["PreparingDevice", "DevicePrepared"],
    ),
    Case(
        "prepared-driver-pattern",
        claim(),
        drivers="*.example.com",
        prepared=[DEVICE],
        writes=[("", "record"), ("status", "conditions")],
        conditions=READY,
        events=["PreparingDevice", "DevicePrepared"],
    ),
    Case(
        "preparation-failed",
        claim(),
        outcome=Outcome.failed("AttachFailed", "no path"),
        prepared=[DEVICE],
        writes=[("", "record"), ("status", "conditions")],
        conditions=FAILED,
        events=["PreparingDevice", "DevicePreparationFailed"],
    ),
    Case(
        "preparer-raised",
        claim(),
        outcome=RuntimeError("boom"),
        prepared=[DEVICE],
        writes=[("", "record"), ("status", "conditions")],
        conditions=FAILED,
        events=["PreparingDevice", "DevicePreparationFailed"],
    ),
    Case(
        "record-write-fails",
        claim(),
        reactors=[("patch", "resourceclaims", service_unavailable())],
        writes=[("", "record")],
        events=["FailedDeviceStatusUpdate"],
        error="record for",
    ),
]


def what(action) -> str:
    meta = action.obj.get("metadata") or {}
    if action.subresource == "status":
        return "conditions"
    return "record" if any(k.startswith(d.RECORD_ANNOTATION_PREFIX) for k in meta.get("annotations") or {}) else "?"


def allocated_now(claim: dict) -> dict:
    """The case's claim, allocated as the test runs: the scheduler's binding timeout (10 minutes)
    counts from the allocation, and a stamp taken when the module was imported had passed it by
    the time `make test` reached this module (the unit modules run last there)."""
    claim = copy.deepcopy(claim)
    if allocation := claim["status"].get("allocation"):
        allocation["allocationTimestamp"] = format_time(utcnow())
    return claim


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_sync(case: Case):
    api = FakeApi([allocated_now(case.claim)])
    for verb, plural, error in case.reactors:
        api.fail(verb, plural, error)
    preparer = Answering(case.outcome)
    controller = BindingController(api, preparer, d.DriverFilter.parse(case.drivers))
    queued: list[str] = []
    controller.queue.add = queued.append
    controller.on_claim(api.stored(RESOURCE_CLAIMS, "c", "default"), False)

    error = ""
    try:
        await controller.sync(queued.pop(0)) if queued else None
        for per_claim in controller.tracked.values():  # the preparations started: let them finish
            await asyncio.gather(*(t.task for t in per_claim.values() if t.task))
        while queued:  # each finished preparation queues its claim again
            await controller.sync(queued.pop(0))
    except Exception as e:  # noqa: BLE001 - the case says which
        error = str(e)
    assert (case.error in error) if case.error else error == "", error
    assert preparer.prepared == case.prepared
    writes = [(a.subresource or "", what(a)) for a in api.actions_of("patch", "resourceclaims")]
    assert writes == case.writes
    stored = api.stored(RESOURCE_CLAIMS, "c", "default")
    devices = (stored.get("status") or {}).get("devices") or []
    assert {c["type"]: c["status"] for dev in devices for c in dev.get("conditions") or []} == case.conditions
    if "record" in [w for _, w in case.writes] and not case.error:
        records = d.records(stored, d.DriverFilter.parse("*"))
        assert [(r.ref.device, r.node) for r in records] == [(DEVICE, "node-1")]
        assert d.FINALIZER in stored["metadata"]["finalizers"]
    assert [e["reason"] for e in sorted(api.objects(EVENTS), key=lambda e: e["firstTimestamp"])] == case.events
