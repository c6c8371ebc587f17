"""The CEL engine the taints operator uses for v1alpha3 DeviceTaintRules (Kubernetes <= 1.34),
whose ``deviceClassName``/``selectors`` select through CEL. API servers since 1.35 drop those
fields (the lab runs 1.37.1), so these rules are tested here, with the engine for real."""

import pytest

from operators.core.dra import cel
from operators.taints import decisions as d
from operators.taints.controller import TaintsController

DRIVER = "gpu.example.com"
DEVICE = {
    "name": "gpu-0",
    "attributes": {
        "model": {"string": "A100"},
        "index": {"int": 0},
        "driverVersion": {"version": "1.2.3"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:3b:00.0"},
    },
    "capacity": {"memory": {"value": "40Gi"}},
}


@pytest.mark.parametrize(
    "expression,expected",
    [
        (f'device.driver == "{DRIVER}"', True),
        (f'device.attributes["{DRIVER}"].model == "A100"', True),
        (f"device.attributes['{DRIVER}'].index == 1", False),
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0', True),
        (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("41Gi"))', False),
        (f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("1.2.0"))', True),
        (f'device.attributes["{DRIVER}"].driverVersion.minor() == 2', True),
        ('device.attributes["resource.kubernetes.io"].pciBusID.startsWith("0000:3b")', True),
        ('"model" in device.attributes["unknown.example.com"]', False),  # unknown domain: empty map
        (f'cel.bind(a, device.attributes["{DRIVER}"], a.model == "A100" && a.index == 0)', True),
        (f'device.capacity["{DRIVER}"].memory.asInteger() == 42949672960', True),
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0")) && isQuantity("1Gi") && !isSemver("x")', True),
    ],
)
def test_kubernetes_selector_expressions(expression, expected):
    assert cel.matches(expression, DRIVER, DEVICE) is expected


@pytest.mark.parametrize(
    "expression,error",
    [
        (f'device.attributes["{DRIVER}"].missing == 1', "Key not found"),  # unknown key: an error, not false
        ("device.driver", "could not be converted to bool"),
        ("device.driver ==", "compilation failed"),
        ('quantity("lots").isInteger()', "quantities must match"),
    ],
)
def test_errors_are_reported_not_taken_as_false(expression, error):
    with pytest.raises(cel.SelectorError, match=error):
        cel.matches(expression, DRIVER, DEVICE)


def controller_with(*objects):
    controller = TaintsController(kube=None, rules=None, rule_status=False)
    kinds = {"DeviceTaintRule": [], "DeviceClass": [], "ResourceSlice": [], "ResourceClaim": []}
    for obj in objects:
        kinds[obj["kind"]].append(obj)
    controller.prime(
        rules=kinds["DeviceTaintRule"],
        classes=kinds["DeviceClass"],
        slices=kinds["ResourceSlice"],
        claims=kinds["ResourceClaim"],
        pods=[],
    )
    return controller


SLICE = {
    "kind": "ResourceSlice",
    "metadata": {"name": "s"},
    "spec": {
        "driver": DRIVER,
        "pool": {"name": "node-0", "generation": 1, "resourceSliceCount": 1},
        "devices": [DEVICE, {"name": "gpu-1", "attributes": {"model": {"string": "H100"}}}],
    },
}


def claim_on(device):
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": f"c-{device}", "namespace": "ns", "uid": device},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "node-0", "device": device}]}
            }
        },
    }


def v1alpha3_rule(selector):
    return {
        "kind": "DeviceTaintRule",
        "apiVersion": "resource.k8s.io/v1alpha3",
        "metadata": {"name": "r", "uid": "ur", "generation": 1},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": "k", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"},
        },
    }


def device_class(name, expression):
    return {
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def test_v1alpha3_rule_selects_through_the_device_class_and_its_own_selectors():
    rule = v1alpha3_rule(
        {"deviceClassName": "a100", "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].index == 0'}}]}
    )
    controller = controller_with(
        rule,
        device_class("a100", f'device.attributes["{DRIVER}"].model == "A100"'),
        SLICE,
        claim_on("gpu-0"),
        claim_on("gpu-1"),
    )
    assert controller.claim_eviction(controller.claims.get("ns/c-gpu-0")).rule_names() == ["r"]
    assert controller.claim_eviction(controller.claims.get("ns/c-gpu-1")) is None
    assert controller.selected_devices(rule) == (1, 1)


def test_v1alpha3_rule_with_missing_class_or_broken_cel_selects_nothing_and_says_why():
    missing = controller_with(v1alpha3_rule({"deviceClassName": "nope"}), SLICE, claim_on("gpu-0"))
    assert missing.claim_eviction(missing.claims.get("ns/c-gpu-0")) is None
    assert [reason for reason, _ in missing.rule_problems["r"]] == ["DeviceClassNotFound"]

    broken = controller_with(
        v1alpha3_rule({"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].nope'}}]}),
        SLICE,
        claim_on("gpu-0"),
    )
    assert broken.claim_eviction(broken.claims.get("ns/c-gpu-0")) is None
    [(reason, message)] = broken.rule_problems["r"]
    assert reason == "DeviceSelectorFailed" and "Key not found" in message


def test_v1alpha3_cel_rule_needs_the_published_device():
    rule = v1alpha3_rule({"selectors": [{"cel": {"expression": "true"}}]})
    gone = controller_with(rule, claim_on("gpu-0"))  # the slice is gone: nothing to evaluate on
    assert gone.claim_eviction(gone.claims.get("ns/c-gpu-0")) is None
    assert d.uses_cel(rule)


def test_a_devices_cel_variable_is_built_once_and_kept_clean(monkeypatch):
    built = []
    real = cel.device_variable
    monkeypatch.setattr(
        cel, "device_variable", lambda driver, device: built.append(device["name"]) or real(driver, device)
    )
    cel._VARIABLES.clear()
    device = {"name": "gpu-9", "attributes": {"model": {"string": "A100"}}}
    assert cel.matches(f'device.attributes["{DRIVER}"].model == "A100"', DRIVER, device)
    # Another expression asks an unknown domain: an empty map for it, not for the next one.
    assert not cel.matches('"x" in device.attributes["other.example.com"]', DRIVER, device)
    assert not cel.matches('"other.example.com" in device.attributes', DRIVER, device)
    assert built == ["gpu-9"]
    # The same content in a new dict (a slice's new generation) is a new variable; another
    # driver asking about the same dict too.
    newer = {"name": "gpu-9", "attributes": {"model": {"string": "H100"}}}
    assert not cel.matches(f'device.attributes["{DRIVER}"].model == "A100"', DRIVER, newer)
    assert cel.matches('device.driver == "b.example.com"', "b.example.com", device)
    assert built == ["gpu-9"] * 3
    monkeypatch.setattr(cel, "MAX_CACHED_VARIABLES", 2)
    cel.matches(f'device.driver == "{DRIVER}"', DRIVER, {"name": "gpu-10"})
    assert len(cel._VARIABLES) == 1  # emptied when full
