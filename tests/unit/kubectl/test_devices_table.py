from operators.devices import build_rows, claim_state, free_capacity, free_devices, render


def claim(name, results=(), reserved=(), ns="ns"):
    status = {}
    if results:
        status["allocation"] = {"devices": {"results": list(results)}}
    if reserved:
        status["reservedFor"] = list(reserved)
    return {"metadata": {"name": name, "namespace": ns}, "status": status}


def pod(name, claims, statuses=(), node="n1", phase="Running", ns="ns", extended=None):
    status = {"phase": phase, "resourceClaimStatuses": list(statuses)}
    if extended:
        status["extendedResourceClaimStatus"] = {"resourceClaimName": extended}
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resourceClaims": claims, "nodeName": node},
        "status": status,
    }


RESULT = {"driver": "d", "pool": "n1", "device": "gpu-0", "request": "gpu"}


def test_rows_name_pod_claim_state_devices_and_node():
    pods = [
        pod(
            "a", [{"name": "gpu", "resourceClaimTemplateName": "t"}], [{"name": "gpu", "resourceClaimName": "a-gpu-x"}]
        ),
        pod("b", [{"name": "gpu", "resourceClaimTemplateName": "t"}], node="", phase="Pending"),
        pod("c", [], extended="c-extended-resources-y"),
        pod("plain", []),
    ]
    claims = [
        claim("a-gpu-x", [RESULT], [{"name": "a"}]),
        claim("c-extended-resources-y", [dict(RESULT, device="gpu-1", shareID="abcdef0123", adminAccess=True)]),
    ]
    rows = build_rows(pods, claims)
    assert [(r.pod, r.claim, r.state, r.devices, r.node) for r in rows] == [
        ("a", "a-gpu-x", "reserved", "d/n1/gpu-0", "n1"),
        ("b", "(gpu: not created yet)", "waiting", "-", "-"),
        ("c", "c-extended-resources-y", "allocated", "d/n1/gpu-1 (share abcdef01) [admin]", "n1"),
    ]
    text = render(rows, {"n1": 3})
    assert text.splitlines()[0].split() == ["NAMESPACE", "POD", "PHASE", "CLAIM", "STATE", "DEVICES", "NODE"]
    assert text.endswith("free devices: n1 3")


def slice_(name, devices, node="n1", generation=1, count=1, pool=None, **spec):
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "d",
            "nodeName": node,
            "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
            **spec,
        },
    }


def test_states_and_free_devices():
    assert claim_state(None) == "missing" and claim_state(claim("x")) == "pending"
    slices = [
        slice_("new", [{"name": "gpu-0"}, {"name": "gpu-1"}], generation=2),
        slice_("old", [{"name": "old"}], generation=1),
    ]
    assert free_devices(slices, [claim("a", [RESULT])]) == {"n1": 1}


def test_binding_shows_while_conditions_pend_although_reserved():
    """kube-scheduler writes reservedFor before its PreBind wait: the state is binding."""
    result = dict(RESULT, bindingConditions=["Attached"], bindingFailureConditions=["AttachFailed"])
    waiting = claim("w", [result], [{"name": "p", "resource": "pods"}])
    assert claim_state(waiting) == "binding"
    waiting["status"]["devices"] = [
        {"driver": "d", "pool": "n1", "device": "gpu-0", "conditions": [{"type": "Attached", "status": "False"}]}
    ]
    assert claim_state(waiting) == "binding"
    waiting["status"]["devices"][0]["conditions"] = [{"type": "Attached", "status": "True"}]
    assert claim_state(waiting) == "reserved"
    waiting["status"]["devices"][0]["conditions"].append({"type": "AttachFailed", "status": "True"})
    assert claim_state(waiting) == "binding-failed"
    done = claim("x", [result])
    done["status"]["devices"] = [
        {"driver": "d", "pool": "n1", "device": "gpu-0", "conditions": [{"type": "Attached", "status": "True"}]}
    ]
    assert claim_state(done) == "allocated"


def partitioned():
    """One 80Gi GPU offered whole or as two halves (shared counters, as the node agent publishes)."""
    counters = slice_(
        "n1-counters",
        [],
        count=2,
        sharedCounters=[{"name": "gpu-0-counters", "counters": {"memory": {"value": "80Gi"}}}],
    )
    del counters["spec"]["devices"]

    def consumes(amount):
        return [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": amount}}}]

    devices = slice_(
        "n1-devices",
        [
            {"name": "gpu-0", "consumesCounters": consumes("80Gi")},
            {"name": "gpu-0-part-0", "consumesCounters": consumes("40Gi")},
            {"name": "gpu-0-part-1", "consumesCounters": consumes("40Gi")},
        ],
        count=2,
    )
    return [counters, devices]


def test_free_counts_partitions_through_shared_counters():
    slices = partitioned()
    assert free_devices(slices, []) == {"n1": 3}
    # One half in use: the whole GPU's counters are used up, the other half is free.
    free = free_capacity(slices, [claim("a", [dict(RESULT, device="gpu-0-part-0")])])["n1"]
    assert (free.free, free.in_use, free.counters) == (1, 1, 1)
    # The whole GPU in use: both halves are blocked.
    free = free_capacity(slices, [claim("a", [RESULT])])["n1"]
    assert (free.free, free.in_use, free.counters) == (0, 1, 2)
    assert "counters used up" in free.text()


def test_free_counts_shared_capacity_taints_and_admin_access():
    shared = {"name": "gpu-9", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "48Gi"}}}
    tainted = {"name": "gpu-1", "taints": [{"key": "xid", "value": "79", "effect": "NoSchedule"}]}
    harmless = {"name": "gpu-2", "taints": [{"key": "note", "effect": "None"}]}
    slices = [slice_("s", [{"name": "gpu-0"}, tainted, harmless, shared])]
    share = dict(RESULT, device="gpu-9", shareID="1234", consumedCapacity={"memory": "40Gi"})
    admin = dict(RESULT, adminAccess=True)
    free = free_capacity(slices, [claim("a", [share]), claim("b", [admin])])["n1"]
    # gpu-0 is only watched with admin access (it holds nothing), gpu-1 is tainted, gpu-2's
    # effect None keeps nobody away. gpu-9 has 8Gi left, but a plain request would take all
    # 48Gi (no requestPolicy default: k8s.io/dynamic-resource-allocation v0.37.1
    # structured/internal/experimental/consumable_capacity.go calculateConsumedCapacity).
    assert (free.total, free.free, free.tainted, free.in_use, free.admin) == (4, 2, 1, 1, 1)
    assert "gpu-9 shared: memory 8Gi/48Gi left" in free.text()
    # With a default of 8Gi a plain request fits in what is left.
    shared["capacity"]["memory"]["requestPolicy"] = {"default": "8Gi", "validRange": {"min": "1Gi"}}
    free = free_capacity(slices, [claim("a", [share]), claim("b", [admin])])["n1"]
    assert (free.free, free.in_use) == (3, 0)
    full = dict(share, consumedCapacity={"memory": "48Gi"})
    assert free_capacity(slices, [claim("a", [full])])["n1"].in_use == 1


def test_wide_rows_carry_model_and_uuid():
    slices = [
        slice_("s", [{"name": "gpu-0", "attributes": {"model": {"string": "H100"}, "uuid": {"string": "GPU-1"}}}])
    ]
    pods = [pod("a", [{"name": "gpu", "resourceClaimName": "c"}])]
    [row] = build_rows(pods, [claim("c", [RESULT])], slices)
    assert row.attributes == "model=H100 uuid=GPU-1"
    assert render([row], wide=True).splitlines()[0].split()[-1] == "ATTRIBUTES"
