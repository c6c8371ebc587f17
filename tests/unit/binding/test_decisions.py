import datetime

import pytest

from operators.binding import decisions as d
from operators.core.dra import claimstate

DRIVER = "gpu.example.com"
SERVES = d.DriverFilter.parse(DRIVER)
T0 = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def result(
    device="gpu-0",
    driver=DRIVER,
    pool="node-a",
    conditions=("gpu.example.com/attached",),
    failures=("gpu.example.com/failed",),
    share=None,
):
    r = {"request": "gpu", "driver": driver, "pool": pool, "device": device}
    if conditions:
        r["bindingConditions"] = list(conditions)
    if failures:
        r["bindingFailureConditions"] = list(failures)
    if share:
        r["shareID"] = share
    return r


def claim(*results, uid="u1", allocated="2026-01-01T12:00:00Z", devices=None, node="node-a", annotations=None):
    meta = {"name": "c", "namespace": "ns", "uid": uid}
    if annotations:
        meta["annotations"] = annotations
    status = {}
    if results:
        status["allocation"] = {"devices": {"results": list(results)}}
        if allocated:
            status["allocation"]["allocationTimestamp"] = allocated
        if node:
            status["allocation"]["nodeSelector"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
    if devices is not None:
        status["devices"] = devices
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta, "status": status}


def cond(type_, status="True", reason="R", since="2026-01-01T12:00:01Z"):
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": since}


def entry(device="gpu-0", *conditions, pool="node-a", driver=DRIVER, share=None):
    e = {"driver": driver, "pool": pool, "device": device, "conditions": list(conditions)}
    if share:
        e["shareID"] = share
    return e


# -- drivers -----------------------------------------------------------------------------------


def test_driver_filter_names_and_patterns():
    f = d.DriverFilter.parse(" a.example.com , *.fabric.io ,")
    assert f.patterns == ("a.example.com", "*.fabric.io")
    assert f.serves("a.example.com") and f.serves("gpu.fabric.io")
    assert not f.serves("b.example.com") and not f.serves("fabric.io")
    assert f.exact_names is None
    assert d.DriverFilter.parse("b.x, a.x").exact_names == ["a.x", "b.x"]
    assert not d.DriverFilter.parse("").serves("anything")
    assert d.DriverFilter.parse("*").serves("anything")


# -- devices -----------------------------------------------------------------------------------


def test_binding_devices_only_served_drivers_with_conditions():
    c = claim(
        result("gpu-0"),
        result("gpu-1", conditions=(), failures=()),
        result("x", driver="other.io"),
        result("gpu-2", share="6f1c3c5e-0000-4000-8000-000000000000"),
    )
    devices = d.binding_devices(c, SERVES)
    assert [dev.ref.device for dev in devices] == ["gpu-0", "gpu-2"]
    assert devices[0].conditions == ("gpu.example.com/attached",)
    assert devices[0].failure_conditions == ("gpu.example.com/failed",)
    assert devices[0].request == "gpu"
    assert devices[1].ref.share_id and devices[1].ref.key.endswith("#6f1c3c5e-0000-4000-8000-000000000000")
    assert d.binding_devices(claim(), SERVES) == []
    assert d.binding_devices(None, SERVES) == []


def test_device_refs_have_distinct_managers_and_annotations():
    a, b = d.DeviceRef(DRIVER, "p", "gpu-0"), d.DeviceRef(DRIVER, "p", "gpu-1")
    shared = d.DeviceRef(DRIVER, "p", "gpu-0", "6f1c3c5e-0000-4000-8000-000000000000")
    assert len({a.field_manager, b.field_manager, shared.field_manager}) == 3
    assert len(a.field_manager) <= 128
    name = a.record_annotation.split("/", 1)[1]
    assert len(name) <= 63 and a.record_annotation.startswith(d.DOMAIN + "/")


@pytest.mark.parametrize(
    "selector,expected",
    [
        (
            {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]},
            "n1",
        ),
        (
            {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}
                ]
            },
            None,
        ),
        ({"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}, None),
        (
            {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]},
                ]
            },
            None,
        ),
        (None, None),
    ],
)
def test_node_of(selector, expected):
    c = claim(result(), node=None)
    if selector is not None:
        c["status"]["allocation"]["nodeSelector"] = selector
    assert d.node_of(c) == expected


def test_binding_state_follows_the_scheduler():
    dev = d.binding_devices(claim(result(conditions=("a/x", "a/y"), failures=("a/f",))), SERVES)[0]

    def state(*conditions):
        return d.binding_state(
            claim(result(conditions=("a/x", "a/y"), failures=("a/f",)), devices=[entry("gpu-0", *conditions)]), dev
        )

    assert d.binding_state(claim(result()), dev) == claimstate.PENDING  # no entry: not ready yet
    assert state() == claimstate.PENDING
    assert state(cond("a/x")) == claimstate.PENDING  # every condition must be True
    assert state(cond("a/x"), cond("a/y", "False")) == claimstate.PENDING
    assert state(cond("a/x"), cond("a/y")) == claimstate.READY
    assert state(cond("a/x"), cond("a/y"), cond("a/f")) == claimstate.FAILED  # failure wins
    assert state(cond("a/f", "False"), cond("a/x"), cond("a/y")) == claimstate.READY
    # The scheduler matches driver, pool and device, ignoring shareID.
    other = claim(result(), devices=[entry("gpu-0", cond("gpu.example.com/attached"), share="s1")])
    assert d.binding_state(other, d.binding_devices(other, SERVES)[0]) == claimstate.READY


def test_deadline_is_anchored_at_the_allocation():
    assert d.deadline("2026-01-01T12:00:00Z", at(30), 10) == at(10)
    assert d.deadline(None, at(30), 10) == at(40)


# -- conditions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("AttachFailed", "AttachFailed"),
        ("link down", "LinkDown"),
        ("503 busy!", "Busy"),
        ("", "Default"),
        ("!!!", "Default"),
        ("fabric-port_7", "FabricPort7"),
    ],
)
def test_condition_reason(text, expected):
    assert d.condition_reason(text, "Default") == expected


def test_outcome_conditions_ready_and_failed():
    dev = d.BindingDevice(d.DeviceRef(DRIVER, "p", "gpu-0"), "gpu", ("a/x", "a/y"), ("a/f", "a/g"))
    ready = d.outcome_conditions(dev, True, "Attached", "ok", None, at(5))
    assert [(c["type"], c["status"]) for c in ready] == [("a/x", "True"), ("a/y", "True")]
    assert all(
        c["reason"] == "Attached" and c["message"] == "ok" and c["lastTransitionTime"] == "2026-01-01T12:00:05Z"
        for c in ready
    )
    failed = d.outcome_conditions(dev, False, "LinkDown", "port 7", None, at(5))
    assert [(c["type"], c["status"]) for c in failed] == [("a/x", "False"), ("a/y", "False"), ("a/f", "True")]
    # An unchanged status keeps its transition time.
    existing = entry("gpu-0", cond("a/x", "True", since="2026-01-01T11:00:00Z"), cond("a/y", "False"))
    again = d.outcome_conditions(dev, True, "Attached", "", existing, at(9))
    assert again[0]["lastTransitionTime"] == "2026-01-01T11:00:00Z"
    assert again[1]["lastTransitionTime"] == "2026-01-01T12:00:09Z"


def test_status_apply_carries_only_one_device_entry_and_the_uid():
    c = claim(result(share="s-1"))
    dev = d.binding_devices(c, SERVES)[0]
    body = d.status_apply(c, dev, [cond("gpu.example.com/attached")], {"port": 7})
    assert body["metadata"] == {"name": "c", "namespace": "ns", "uid": "u1"}
    assert body["apiVersion"] == "resource.k8s.io/v1" and body["kind"] == "ResourceClaim"
    assert body["status"] == {
        "devices": [
            {
                "driver": DRIVER,
                "pool": "node-a",
                "device": "gpu-0",
                "shareID": "s-1",
                "conditions": [cond("gpu.example.com/attached")],
                "data": {"port": 7},
            }
        ]
    }
    assert "spec" not in body


# -- records -----------------------------------------------------------------------------------


def test_records_round_trip_and_filtering():
    ref = d.DeviceRef(DRIVER, "pool/with/slashes", "gpu-0")
    record = d.Record(ref, "node-a", "2026-01-01T12:00:00Z", "2026-01-01T11:59:59Z")
    other = d.Record(d.DeviceRef("other.io", "p", "x"), None, "2026-01-01T12:00:00Z", None)
    annotations = {
        ref.record_annotation: record.to_json(),
        other.ref.record_annotation: other.to_json(),
        d.RECORD_ANNOTATION_PREFIX + "000000000000": record.to_json(),  # key does not match: edited
        d.RECORD_ANNOTATION_PREFIX + "bad": "not json",
        "unrelated": "x",
    }
    c = claim(annotations=annotations)
    assert d.records(c, SERVES) == [record]
    assert d.records(c, d.DriverFilter.parse("*")) == sorted([record, other], key=lambda r: r.ref.record_annotation)
    # Written before the finalizer existed: not the full record, and applied again (with it).
    assert not d.has_record(c, ref, record) and not d.has_record(c, ref, None)
    assert d.records_without_finalizer(c, SERVES) == [record]
    c["metadata"]["finalizers"] = [d.FINALIZER]
    assert d.has_record(c, ref, record) and d.records_without_finalizer(c, SERVES) == []
    body = d.record_apply(c, ref, record)
    assert body["metadata"]["annotations"] == {ref.record_annotation: record.to_json()}
    assert body["metadata"]["finalizers"] == [d.FINALIZER]
    removed = d.record_apply(c, ref, None)["metadata"]
    assert "annotations" not in removed and "finalizers" not in removed  # apply without them: removed
    assert d.has_record(claim(), ref, None)
    deleting = claim(annotations=annotations)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    assert d.records_without_finalizer(deleting, SERVES) == []  # a deleting claim gains no finalizer


# -- the plan ----------------------------------------------------------------------------------

KEY = f"{DRIVER}/node-a/gpu-0"


def known(uid="u1", allocated="2026-01-01T12:00:00Z", started=T0, **kw):
    return d.Known(uid, allocated, started, **kw)


def test_plan_starts_new_devices_and_waits_for_running_ones():
    c = claim(result("gpu-0"), result("gpu-1"))
    p = d.plan(c, {}, SERVES, 600, at(1))
    assert d.keys(p.start) == [KEY, f"{DRIVER}/node-a/gpu-1"] and not p.undo
    p = d.plan(c, {KEY: known(running=True)}, SERVES, 600, at(1))
    assert d.keys(p.waiting) == [KEY] and d.keys(p.start) == [f"{DRIVER}/node-a/gpu-1"]


def test_plan_reports_finished_outcomes_and_leaves_settled_devices_alone():
    ready = claim(result(), devices=[entry("gpu-0", cond("gpu.example.com/attached"))])
    p = d.plan(ready, {KEY: known()}, SERVES, 600, at(1))
    assert d.keys(p.settled) == [KEY] and not p.start and not p.report
    # After a restart without memory: a device that shows its outcome is not prepared again.
    assert d.keys(d.plan(ready, {}, SERVES, 600, at(1)).settled) == [KEY]
    failed = claim(result(), devices=[entry("gpu-0", cond("gpu.example.com/failed"))])
    assert d.keys(d.plan(failed, {}, SERVES, 600, at(1)).settled) == [KEY]
    pending = claim(result())
    assert d.keys(d.plan(pending, {KEY: known(outcome_pending=True)}, SERVES, 600, at(1)).report) == [KEY]


def test_plan_expires_devices_past_the_deadline():
    c = claim(result())
    assert d.keys(d.plan(c, {}, SERVES, 10, at(10)).expire) == [KEY]
    assert d.keys(d.plan(c, {}, SERVES, 10, at(9)).start) == [KEY]
    # A preparation that is still running is bounded by its own task, not expired here.
    assert d.keys(d.plan(c, {KEY: known(running=True)}, SERVES, 10, at(11)).waiting) == [KEY]


@pytest.mark.parametrize(
    "current",
    [
        claim(),  # allocation cleared
        None,  # claim deleted
        claim(result("gpu-1")),  # another device
    ],
)
def test_plan_undoes_preparations_whose_allocation_went_away(current):
    p = d.plan(current, {KEY: known()}, SERVES, 600, at(1))
    assert p.undo == [KEY]
    assert KEY not in d.keys(p.start)


def test_plan_treats_a_new_claim_under_the_same_name_as_new():
    p = d.plan(claim(result(), uid="u2"), {KEY: known(uid="u1", running=True)}, SERVES, 600, at(1))
    assert p.undo == [KEY] and d.keys(p.start) == [KEY]


def test_plan_undoes_then_prepares_again_for_a_new_allocation_of_the_same_device():
    reallocated = claim(result(), allocated="2026-01-01T12:05:00Z")
    p = d.plan(reallocated, {KEY: known(running=True)}, SERVES, 600, at(301))
    assert p.undo == [KEY] and d.keys(p.start) == [KEY] and not p.waiting


def test_undo_means_timeout_only_without_outcome_after_the_deadline():
    k = known()
    assert d.undo_means_timeout(k, "2026-01-01T12:00:00Z", 10, at(10), outcome_written=False)
    assert not d.undo_means_timeout(k, "2026-01-01T12:00:00Z", 10, at(9), outcome_written=False)
    assert not d.undo_means_timeout(k, "2026-01-01T12:00:00Z", 10, at(11), outcome_written=True)


# -- cool-off ----------------------------------------------------------------------------------


def test_cool_off_rule():
    ref = d.DeviceRef(DRIVER, "node-a", "gpu-0")
    rule = d.cool_off_rule(
        ref, "resource.k8s.io/v1", "k.io/failed", "NoSchedule", "Link down: port 7!", at(60), "ns/c", "port 7 down"
    )
    assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
    assert rule["metadata"]["name"] == f"dra-binding-gpu-0-{ref.digest}"
    assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}
    assert rule["spec"]["taint"] == {"key": "k.io/failed", "value": "Linkdownport7", "effect": "NoSchedule"}
    assert d.is_ours(rule) and d.cool_off_driver(rule) == DRIVER
    assert d.cool_off_until(rule) == at(60)
    rule["metadata"]["annotations"][d.COOL_OFF_UNTIL_ANNOTATION] = "soon"  # edited by hand: no time
    assert d.cool_off_until(rule) is None
    assert rule["metadata"]["labels"][d.DRIVER_LABEL] == DRIVER
    assert d.label_value("-" + "x" * 80 + ".") == "x" * 62


def test_record_problems_name_unusable_record_annotations():
    ref = d.DeviceRef(DRIVER, "pool", "gpu-0")
    record = d.Record(ref, None, "2026-01-01T12:00:00Z", None)
    wrong_types = '{"driver": 5, "pool": "p", "device": "d", "started": "x"}'
    annotations = {
        ref.record_annotation: record.to_json(),
        d.RECORD_ANNOTATION_PREFIX + "000000000000": record.to_json(),
        d.RECORD_ANNOTATION_PREFIX + "bad": "not json",
        d.RECORD_ANNOTATION_PREFIX + "types": wrong_types,
        "unrelated": "x",
    }
    problems = dict(d.record_problems(claim(annotations=annotations)))
    assert set(problems) == {d.RECORD_ANNOTATION_PREFIX + k for k in ("000000000000", "bad", "types")}
    assert (
        "whose record annotation is " + ref.record_annotation in problems[d.RECORD_ANNOTATION_PREFIX + "000000000000"]
    )
    assert "is not a preparation record" in problems[d.RECORD_ANNOTATION_PREFIX + "bad"]
    assert d.Record.from_json(wrong_types) is None and d.records(claim(annotations=annotations), SERVES) == [record]
