"""Each lint rule on its bad and fixed YAML (tests/lint/<case>/): the bad file gets the rule's
finding on the named field with the fix, the fixed file gets no finding at all. The cluster is
stood in for by what it would hold: config/deviceclasses and the simulated node agent's devices
for the kind inventory and the MIG example's (built by the agent's own pure function), namespace
default only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from operators.lint import documents, report, rules, run
from operators.nodeagent.backends.simulated import build_inventory
from tests.paths import ROOT

CASES = ROOT / "tests" / "lint"
INVENTORY = ROOT / "kustomize" / "overlays" / "simulated-devices" / "inventory.yaml"
MIG_INVENTORY = ROOT / "config" / "examples" / "mig" / "node-agent" / "inventory.yaml"
SIM = "gpu.sim.dra-operators.dev"


def expected() -> tuple[dict[str, tuple[str, str, str]], dict[str, str]]:
    """case -> (rule, field, a piece of the fix) its bad file must get (tests/lint/<case>/expect.yaml);
    and case -> the problem of a bad file the lint cannot read (``unreadable`` in expect.yaml)."""
    found, unreadable = {}, {}
    for folder in sorted(p for p in CASES.iterdir() if p.is_dir()):
        e = yaml.safe_load((folder / "expect.yaml").read_text())
        if "unreadable" in e:
            unreadable[folder.name] = e["unreadable"]
        else:
            found[folder.name] = (e["rule"], e["field"], e["fix"])
    return found, unreadable


EXPECTED, UNREADABLE = expected()


def cluster_context(docs: list[documents.Document]) -> rules.Context:
    """What the lab holds when the examples run: the DeviceClasses and one node's simulated devices."""
    classes = {}
    for path in sorted((ROOT / "config" / "deviceclasses").glob("*.yaml")):
        for body in yaml.safe_load_all(path.read_text()):
            if body:
                classes[body["metadata"]["name"]] = body
    inventory = build_inventory(yaml.safe_load(INVENTORY.read_text()), "lab-node-0", SIM)
    mig = build_inventory(yaml.safe_load(MIG_INVENTORY.read_text()), "lab-node-1", "gpu.nvidia.com")
    assert not inventory.errors and not mig.errors
    slices = [
        {
            "spec": {
                "driver": SIM,
                "nodeName": "lab-node-0",
                "pool": {"name": "lab-node-0"},
                "devices": inventory.devices,
            }
        },
        {
            "spec": {
                "driver": "gpu.nvidia.com",
                "nodeName": "lab-node-1",
                "pool": {"name": "lab-node-1"},
                "devices": mig.devices,
            }
        },
    ]
    return rules.Context(
        documents=docs,
        served={"resource.k8s.io": ["v1", "v1beta2", "v1beta1"]},
        device_classes=classes,
        slices=slices,
        templates=set(),
        claims=set(),
        namespaces={"default": {"metadata": {"name": "default"}}},
    )


def lint(path: Path) -> list[rules.Finding]:
    loaded = documents.load([str(path)])
    assert not loaded.errors
    return rules.check(cluster_context(loaded.documents))


def test_every_case_has_bad_fixed_and_expectation():
    assert len(EXPECTED) >= 15 and len(UNREADABLE) >= 2
    for case in [*EXPECTED, *UNREADABLE]:
        assert (CASES / case / "bad.yaml").is_file() and (CASES / case / "fixed.yaml").is_file(), case


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_is_reported_with_field_and_fix(case):
    rule, field, fix = EXPECTED[case]
    findings = lint(CASES / case / "bad.yaml")
    ours = [f for f in findings if f.rule == rule and f.field == field]
    assert ours, f"{case}: no {rule} on {field}; got {[(f.rule, f.field) for f in findings]}"
    assert any(fix in f.fix for f in ours), f"{case}: fix {[f.fix for f in ours]} lacks {fix!r}"
    assert all(f.message and f.file.endswith("bad.yaml") and f.line >= 1 for f in findings)


@pytest.mark.parametrize("case", sorted(UNREADABLE))
def test_unreadable_is_reported_with_file_and_line_quickly(case):
    """A document no rule can run on (a List whose items are a number, aliases that expand to
    billions of values) is a read error naming the file and line, found in linear time; the
    lint neither crashes nor expands it."""
    started = time.process_time()
    result = run.offline([str(CASES / case / "bad.yaml")])
    assert time.process_time() - started < 5
    assert result.failed and not result.loaded.documents and result.findings == []
    [(file, problem)] = result.loaded.errors
    assert file.endswith("bad.yaml") and UNREADABLE[case] in problem, problem


@pytest.mark.parametrize("case", sorted([*EXPECTED, *UNREADABLE]))
def test_fixed_passes(case):
    assert lint(CASES / case / "fixed.yaml") == []


def test_every_example_passes():
    examples = ROOT / "config" / "examples"
    folders = sorted(p for p in examples.iterdir() if p.is_dir())
    assert len(folders) >= 8
    for folder in folders:
        # kubernetes-1.N/: files for older releases, linted on a lab of that release (test_examples)
        subfolders = [p for p in folder.iterdir() if p.is_dir() and p.name != "node-agent"]
        loaded = documents.load([str(folder)] + [str(p) for p in subfolders if not p.name.startswith("kubernetes-1.")])
        assert loaded.documents and not loaded.errors, folder
        assert rules.check(cluster_context(loaded.documents)) == [], folder.name


def test_offline_rules_need_no_cluster():
    """Without a cluster the rules that need one stay silent instead of guessing."""
    loaded = documents.load(
        [str(CASES / "missing-template" / "bad.yaml"), str(CASES / "selector-never-matches" / "bad.yaml")]
    )
    assert rules.check(rules.Context(documents=loaded.documents)) == []
    loaded = documents.load([str(CASES / "v1alpha2-claim" / "bad.yaml")])
    found = {(f.rule, f.field) for f in rules.check(rules.Context(documents=loaded.documents))}
    assert ("served-version", "apiVersion") in found  # the versions 1.37 has, without asking


def test_v1alpha2_claim_fields_named():
    loaded = documents.load([str(CASES / "v1alpha2-claim" / "bad.yaml")])
    found = {(f.rule, f.field) for f in rules.check(rules.Context(documents=loaded.documents))}
    assert {("removed-claim-field", "spec.allocationMode"), ("removed-claim-field", "spec.resourceClassName")} <= found


def test_allocation_mode_wait_for_first_consumer_in_a_request():
    loaded = documents.load([str(CASES / "v1-request-layout" / "bad.yaml")])
    found = [f for f in rules.check(rules.Context(documents=loaded.documents)) if f.rule == "allocation-mode"]
    assert found and "WaitForFirstConsumer" in found[0].message


def test_parse_reports_line_and_lists():
    loaded = documents.parse(
        "a: 1\n---\nkind: List\napiVersion: v1\nitems:\n- kind: Pod\n  apiVersion: v1\n- 3\n", "f.yaml"
    )
    assert [d.kind for d in loaded.documents] == ["", "Pod"] and loaded.documents[1].line == 3
    assert loaded.errors == [("f.yaml", "document 3 (line 3) is not a mapping")]
    assert documents.parse("a: [", "g.yaml").errors[0][1].startswith("not valid YAML")


def test_server_findings_on_fields_the_rules_named_are_dropped():
    own = [rules.Finding("r", "error", "f", 1, "K/n", "spec.x", "m", "fix")]
    server = [
        rules.Finding("server-dry-run", "error", "f", 1, "K/n", "spec.x", "m", "fix"),
        rules.Finding("server-dry-run", "error", "f", 1, "K/n", "spec.y", "m", "fix"),
    ]
    assert [f.field for f in report.merge(own, server)] == ["spec.x", "spec.y"]


def test_server_answers_become_findings_on_their_fields():
    from operators.core.api.kube import ApiError
    from operators.lint.cluster import _server_findings

    doc = documents.parse("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "p.yaml").documents[0]
    invalid = ApiError(
        422,
        {
            "message": 'Pod "p" is invalid',
            "details": {"causes": [{"field": "spec.containers[0].resources.claims[0]", "message": 'Not found: "x"'}]},
        },
    )
    [f] = _server_findings(doc, invalid)
    assert (f.rule, f.field, f.file) == ("server-dry-run", "spec.containers[0].resources.claims[0]", "p.yaml")
    # Server-side apply answers a field the schema lacks with a 500 naming the field.
    undeclared = ApiError(
        500,
        {
            "message": "failed to create typed patch object (default/p; /v1, Kind=Pod): "
            '.spec.resourceClaims[name="gpu"].source: field not declared in schema'
        },
    )
    [f] = _server_findings(doc, undeclared)
    assert f.field == 'spec.resourceClaims[name="gpu"].source' and "not declared" in f.message


def test_parse_refuses_what_cannot_be_walked():
    """Recursive aliases and nesting deeper than Python's stack: read errors, not crashes."""
    assert documents.parse("kind: ConfigMap\nx: &a [*a]\n", "r.yaml").errors == [
        ("r.yaml", "document 1 (line 1) refers to itself through an alias (an anchor inside its own value)")
    ]
    [(_, problem)] = documents.parse("kind: ConfigMap\nx: " + "[" * 5000 + "]" * 5000 + "\n", "d.yaml").errors
    assert problem.startswith("nested too deeply (near line 2)")
    # The good documents next to a bad one are kept.
    loaded = documents.parse("kind: FooList\nitems: 5\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "f.yaml")
    assert [d.name for d in loaded.documents] == ["p"] and len(loaded.errors) == 1
    # Aliases a document repeats a few times are no problem (go-yaml allows them too).
    shared = documents.parse("kind: ConfigMap\nx: &x {a: 1}\ny: *x\nz: *x\n", "s.yaml")
    assert not shared.errors and shared.documents[0].body["z"] == {"a": 1}


@pytest.mark.parametrize(("minor", "found"), [(None, True), (37, True), (35, True), (34, False)])
def test_counters_beside_devices_are_an_error_from_135_only(minor, found):
    """1.34 wants a device's counter sets in its own slice; 1.35 and later refuse that."""
    loaded = documents.load([str(CASES / "slice-counters-with-devices" / "bad.yaml")])
    ctx = rules.Context(documents=loaded.documents, minor=minor)
    assert any(f.rule == "slice-counters-with-devices" for f in rules.check(ctx)) is found


@pytest.mark.parametrize(("answer", "minor"), [({"minor": "34"}, 34), ({"minor": "35+"}, 35), ({"minor": ""}, None)])
def test_the_clusters_minor_from_its_version(answer, minor):
    from operators.lint.cluster import release_minor

    assert release_minor(answer) == minor
