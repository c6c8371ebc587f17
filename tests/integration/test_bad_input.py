"""R4, bad input: what each operator does with input it cannot use, on the lab.

Every case asserts on API state: no crash (the process still runs and its liveness endpoint
answers 200, or, for settings and an unusable API at start, it exits non-zero with one message
naming the variable or the address and the fix, never a traceback or a hang), a clear Event,
condition or message naming the object and the fix, and the work next to the bad input still done
(a good Pod runs, a good device is published, a good record is kept).

The claims and taints operators are the session's (``controllers``); the binding operator and a
node agent are this module's, shared by its cases; each case has a namespace (or inventory) of
its own. docs/bad-input.md lists the cases in a table.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from operators.binding import decisions as bd
from operators.claims.decisions import POD_CLAIM_ANNOTATION
from operators.core.api.kube import ApiError, Kube
from operators.core.api.resources import (
    DEVICE_CLASSES,
    DEVICE_TAINT_RULES,
    EVENTS,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    SERVICE_ACCOUNTS,
)
from operators.lab.cluster import free_ports
from operators.nodeagent.plugin import cdi
from operators.taints import decisions as td

from . import objects
from .claims_env import ClaimsEnv
from .operator_process import OperatorProcess
from .taints_env import TaintsEnv
from .waiting import describe_namespace, wait_for, wait_for_object

BINDING_DOMAIN = "bi.lab.dra-operators.dev"  # the module's binding operator serves *.<this>
TOKEN = uuid.uuid4().hex[:6]  # this module's cluster-scoped names


# -- shared helpers ------------------------------------------------------------------------------


def alive(operator: OperatorProcess) -> None:
    """Still running, and its liveness endpoint answers 200."""
    assert operator.proc is not None and operator.proc.poll() is None, (
        f"operator {operator.names} exited with {operator.proc.returncode}:\n{operator.tail()}"
    )
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.liveness_port}/healthz", timeout=5) as answer:
        assert answer.status == 200


class LogMark:
    """Where an operator's log stood when this module began: any traceback written after it is a
    crash of some part of the operator (the work queue and the supervisor log one for every
    unexpected exception)."""

    def __init__(self, operator: OperatorProcess):
        self.operator = operator
        self.offset = operator.log.stat().st_size if operator.log.exists() else 0

    def tracebacks(self) -> list[str]:
        with open(self.operator.log, errors="replace") as f:
            f.seek(self.offset)
            return [line[:500] for line in f if "Traceback" in line]


async def warning_events(kube: Kube, namespace: str, reason: str, name: str | None = None) -> list[dict]:
    return [
        e
        for e in await kube.list(EVENTS, namespace)
        if e.get("reason") == reason and (name is None or e["involvedObject"].get("name") == name)
    ]


async def wait_event(
    kube: Kube, namespace: str, reason: str, name: str | None, *texts: str, timeout: float = 60, describe=None
) -> dict:
    """An Event with ``reason`` about ``name`` whose message contains every one of ``texts``."""

    async def seen() -> dict | None:
        return next(
            (
                e
                for e in await warning_events(kube, namespace, reason, name)
                if all(t in e.get("message", "") for t in texts)
            ),
            None,
        )

    return await wait_for(seen, timeout=timeout, what=f"Event {reason} on {name} with {texts}", describe=describe)


def condition(pod: dict, type_: str) -> dict:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == type_), {})


# -- the claims operator ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claims(controllers) -> OperatorProcess:
    controllers.use("ours")
    operator = controllers.operators["claims"]
    mark = LogMark(operator)
    yield operator
    assert not mark.tracebacks(), mark.tracebacks()[:3]


def tmpl(name: str) -> dict[str, str]:
    return {"resourceClaimTemplateName": name}


async def good_pod_runs(env: ClaimsEnv) -> None:
    """The work next to the bad input: a Pod with a good template gets its claim and runs."""
    await env.template("good")
    await env.pod("good", {"gpu": tmpl("good")})
    await env.claim_of("good", "gpu")
    await env.wait_running("good")


async def unschedulable_because(env: ClaimsEnv, pod: str, text: str) -> dict:
    """The claims operator made the claim (it is in the Pod's status); the scheduler says why it
    cannot be allocated."""
    await env.claim_of(pod, "gpu")
    found = await env.wait_pod(
        pod, lambda p: text in condition(p, "PodScheduled").get("message", ""), f"pod {pod} unschedulable: {text}"
    )
    assert condition(found, "PodScheduled")["status"] == "False"
    return found


async def test_claims_pod_naming_a_missing_template(kube, claims, unique):
    async with ClaimsEnv(kube, f"bm{unique}") as env:
        await env.pod("waiting", {"gpu": tmpl("absent")})
        event = await wait_event(
            kube,
            env.namespace,
            "FailedResourceClaimCreation",
            "waiting",
            'resource claim template "absent"',
            f"create it in namespace {env.namespace}",
            describe=env.describe,
        )
        assert event["type"] == "Warning"
        await good_pod_runs(env)
        await env.template("absent")  # the fix: the claim follows, the Pod runs
        await env.claim_of("waiting", "gpu")
        await env.wait_running("waiting")
    alive(claims)


async def test_claims_template_naming_a_device_class_that_does_not_exist(kube, claims, unique):
    async with ClaimsEnv(kube, f"bc{unique}") as env:
        await kube.create(
            RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("ghost", f"ghost-{unique}"), env.namespace
        )
        await env.pod("ghostly", {"gpu": tmpl("ghost")})
        await unschedulable_because(env, "ghostly", f"device class ghost-{unique} does not exist")
        await good_pod_runs(env)
    alive(claims)


async def test_claims_template_the_api_accepts_but_no_allocation_satisfies(kube, claims, unique):
    async with ClaimsEnv(kube, f"ba{unique}", devices=4) as env:
        template = objects.resource_claim_template("nine", env.device_class)
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 9
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template, env.namespace)
        await env.pod("greedy", {"gpu": tmpl("nine")})
        await unschedulable_because(env, "greedy", "cannot allocate all claims")
        await good_pod_runs(env)
    alive(claims)


async def test_claims_template_whose_cel_selector_fails_at_runtime(kube, claims, unique):
    async with ClaimsEnv(kube, f"be{unique}") as env:
        template = objects.resource_claim_template("typo", env.device_class)
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": f'device.attributes["{env.driver}"].modle == "lab-gpu"'}}
        ]
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template, env.namespace)
        await env.pod("typo", {"gpu": tmpl("typo")})
        pod = await unschedulable_because(env, "typo", "CEL runtime error: no such key: modle")
        assert "has()" in condition(pod, "PodScheduled")["message"]  # the scheduler says how to fix it
        await good_pod_runs(env)
    alive(claims)


async def test_claims_claim_whose_pod_claim_name_is_not_in_the_pod(kube, claims, unique):
    """A claim the Pod controls, annotated with a pod claim name the Pod does not have, is never
    adopted (upstream's findPodResourceClaim): the Pod gets its own claim and runs; the stray claim
    goes with the Pod (garbage collector)."""
    async with ClaimsEnv(kube, f"bs{unique}") as env:
        await env.template("t")
        pod = await kube.create(PODS, objects.pod("owner", {"gpu": tmpl("t")}), env.namespace)
        stray = objects.resource_claim("stray", env.device_class)
        stray["metadata"]["annotations"] = {POD_CLAIM_ANNOTATION: "not-in-the-pod"}
        stray["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": pod["metadata"]["uid"], "controller": True}
        ]
        await kube.create(RESOURCE_CLAIMS, stray, env.namespace)
        claim = await env.claim_of("owner", "gpu")
        assert claim != "stray" and claim.startswith("owner-gpu-")
        await env.wait_running("owner")
        statuses = (await kube.get(PODS, "owner", env.namespace))["status"]["resourceClaimStatuses"]
        assert statuses == [{"name": "gpu", "resourceClaimName": claim}]
        stray = await kube.get(RESOURCE_CLAIMS, "stray", env.namespace)
        assert not (stray.get("status") or {}).get("reservedFor")
    alive(claims)


async def test_claims_names_that_exceed_the_limits_when_generated(kube, claims, unique):
    """A 253-character Pod name with a 63-character pod claim name: the generated claim name is
    cut to fit (upstream's proportional cut), and the Event about the missing template still
    reaches the Pod (Event names built from such a Pod's name are longer than 253)."""
    async with ClaimsEnv(kube, f"bl{unique}") as env:
        pod_name, pod_claim = "p" * 253, "c" * 63
        await env.pod(pod_name, {pod_claim: tmpl("later")})
        await wait_event(
            kube,
            env.namespace,
            "FailedResourceClaimCreation",
            pod_name,
            f"PodResourceClaim {pod_claim}",
            'resource claim template "later"',
            describe=env.describe,
        )
        await env.template("later")
        claim = await env.claim_of(pod_name, pod_claim)
        assert re.fullmatch("p" * 45 + "-" + "c" * 11 + "[a-z0-9]{5}", claim), claim  # 62 characters
        await env.wait_running(pod_name)
    alive(claims)


async def test_claims_template_whose_claim_exceeds_the_annotation_limit(kube, claims, unique):
    """The template's annotations are just under the API server's 256 KiB; the claim made from it
    carries the pod-claim annotation too and is refused: the API server's message is the Event."""
    async with ClaimsEnv(kube, f"bz{unique}") as env:
        key = "big.example.com/data"
        template = objects.resource_claim_template("big", env.device_class)
        template["spec"]["metadata"] = {"annotations": {key: "x" * (256 * 1024 - len(key) - 8)}}
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template, env.namespace)
        await env.pod("big", {"gpu": tmpl("big")})
        await wait_event(
            kube,
            env.namespace,
            "FailedResourceClaimCreation",
            "big",
            "metadata.annotations: Too long",
            describe=env.describe,
        )
        await good_pod_runs(env)
    alive(claims)


# -- the taints operator ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def taints(controllers) -> OperatorProcess:
    controllers.use("ours")
    operator = controllers.operators["taints"]
    mark = LogMark(operator)
    yield operator
    assert not mark.tracebacks(), mark.tracebacks()[:3]


async def test_taints_rule_with_three_bad_guard_rail_annotations(kube, taints, unique):
    """Each unreadable annotation is an InvalidAnnotation Event on the rule naming it and the fix;
    the rule itself works as upstream's (no limit, direct delete), and a Pod on another device stays."""
    async with TaintsEnv(kube, f"bg{unique}", "ours") as env:
        await env.claim("c0", index=0)
        await env.claim("c1", index=1)
        await env.pod("doomed", {"gpu": {"resourceClaimName": "c0"}})
        await env.pod("spared", {"gpu": {"resourceClaimName": "c1"}})
        await env.wait_running("doomed", "spared")
        rule = f"{env.token}-bad"
        await env.rule(
            "bad",
            {"driver": env.driver, "device": "gpu-0"},
            annotations={
                td.RATE_ANNOTATION: "fast",
                td.EVICTION_API_ANNOTATION: "maybe",
                td.MAX_WAIT_ANNOTATION: "soon",
            },
        )
        await env.wait_evicted("doomed")
        for annotation, text in (
            (td.RATE_ANNOTATION, "is not a number; write evictions per second"),
            (td.EVICTION_API_ANNOTATION, 'must be "true" or "false"'),
            (td.MAX_WAIT_ANNOTATION, "is not a number of seconds"),
        ):
            event = await wait_event(kube, "default", "InvalidAnnotation", rule, annotation, text)
            assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "DeviceTaintRule"
        pod = await kube.get(PODS, "spared", env.namespace)
        assert pod["status"]["phase"] == "Running" and not pod["metadata"].get("deletionTimestamp")
    alive(taints)


def _preview_rule(name: str, driver: str, selector: dict) -> dict:
    """A v1alpha3 rule with a DeviceClass or CEL selectors: API servers since 1.35 drop those
    fields, so only a file given to the preview still carries them to core/dra/cel.py."""
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": driver, **selector},
            "taint": {"key": "k.example.com/x", "effect": "NoExecute"},
        },
    }


async def _preview(lab, path: Path, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "operators.cli",
        "taints",
        "preview",
        str(path),
        *args,
        env={**os.environ, "KUBECONFIG": str(lab.kubeconfig)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(scope="module")
async def preview_env(kube, taints):
    """Published devices of a driver and a Pod running on one of them, for the preview cases."""
    async with TaintsEnv(kube, f"bp{TOKEN}", "ours") as env:
        await env.template("t")
        await env.pod("running", {"gpu": tmpl("t")})
        await env.wait_running("running")
        yield env


@pytest.mark.parametrize(
    "case, selector, expected",
    [
        (
            "runtime",
            {"selectors": [{"cel": {"expression": 'device.attributes["{driver}"].modle == "x"'}}]},
            ["DeviceSelectorFailed", "evaluation failed", "modle", "fix the expression"],
        ),
        (
            "compile",
            {"selectors": [{"cel": {"expression": 'device.attributes["{driver}"].model =='}}]},
            ["DeviceSelectorFailed", "compilation failed", "fix the expression"],
        ),
        (
            "class",
            {"deviceClassName": "no-such-class"},
            ["DeviceClassNotFound", "DeviceClass no-such-class does not exist"],
        ),
    ],
    ids=["runtime", "compile", "class"],
)
async def test_taints_preview_of_a_rule_whose_cel_selector_fails(
    lab, kube, taints, preview_env, tmp_path, case, selector, expected
):
    env = preview_env
    body = json.loads(
        json.dumps(_preview_rule(f"{env.token}-{case}", env.driver, selector)).replace("{driver}", env.driver)
    )
    path = tmp_path / "rule.yaml"
    path.write_text(yaml.safe_dump(body))
    (code, out, err), (table_code, table, _) = await asyncio.gather(
        _preview(lab, path, "-o", "json"), _preview(lab, path)
    )
    assert code == 0 and "Traceback" not in err, err
    preview = json.loads(out)
    assert preview["pods"] == [] and preview["publishedDevices"] == 0  # a broken selector selects nothing
    problems = "\n".join(preview["problems"])
    assert all(text in problems for text in expected), problems
    assert f"device {env.driver}/gpu-0" in problems or case == "class"
    assert table_code == 0 and "problem: " + expected[0] in table
    assert await kube.get_or_none(DEVICE_TAINT_RULES, f"{env.token}-{case}") is None
    assert (await kube.get(PODS, "running", env.namespace))["status"]["phase"] == "Running"
    alive(taints)


async def test_taints_preview_of_a_file_that_is_not_yaml(lab, tmp_path):
    path = tmp_path / "rule.yaml"
    path.write_bytes(b"kind: [DeviceTaintRule\n\xff")
    code, out, err = await _preview(lab, path)
    assert code == 1 and "Traceback" not in err
    assert err.startswith(f"Error: {path}: not a readable YAML file") and "one DeviceTaintRule" in err


# -- the binding operator --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bad-input-logs")


@pytest.fixture(scope="module")
def binding(lab, controllers, log_dir) -> OperatorProcess:
    controllers.use("ours")  # the claims operator makes the claims from the templates
    operator = OperatorProcess(
        ["binding"],
        lab.kubeconfig,
        log_dir,
        env={
            "DRA_BINDING_DRIVERS": f"*.{BINDING_DOMAIN}",
            "DRA_BINDING_PREPARER": "simulated",
            "DRA_BINDING_PREPARER_CONFIG": json.dumps({"delay": 0.2}),
            "DRA_BINDING_COOL_OFF": "0",
        },
    )
    operator.start()
    mark = LogMark(operator)
    try:
        yield operator
        assert not mark.tracebacks(), mark.tracebacks()[:3]
    finally:
        operator.stop()


@dataclass
class BindingWorld:
    """A namespace, a driver whose devices carry binding conditions on lab-node-0, a template."""

    kube: Kube
    token: str
    devices: int = 4
    domain: str = BINDING_DOMAIN
    namespace: str = field(init=False)
    driver: str = field(init=False)

    def __post_init__(self) -> None:
        self.namespace = f"bb-{self.token}"
        self.driver = f"{self.token}.{self.domain}"

    async def __aenter__(self) -> BindingWorld:
        await self.kube.create(NAMESPACES, {"metadata": {"name": self.namespace}})
        await self.kube.create(DEVICE_CLASSES, objects.device_class(self.driver, self.driver))
        devices = [
            objects.device(
                f"gpu-{i}",
                bindsToNode=True,
                bindingConditions=[f"{self.driver}/attached"],
                bindingFailureConditions=[f"{self.driver}/failed"],
            )
            for i in range(self.devices)
        ]
        await self.kube.create(RESOURCE_SLICES, objects.resource_slice(self.driver, self.driver, "lab-node-0", devices))
        await self.kube.create(
            RESOURCE_CLAIM_TEMPLATES, objects.resource_claim_template("gpu", self.driver), self.namespace
        )
        await wait_for(
            lambda: self.kube.get_or_none(SERVICE_ACCOUNTS, "default", self.namespace),
            timeout=30,
            what="default ServiceAccount",
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        for res, name in ((NAMESPACES, self.namespace), (RESOURCE_SLICES, self.driver), (DEVICE_CLASSES, self.driver)):
            try:
                await self.kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise

    async def describe(self) -> str:
        return await describe_namespace(self.kube, self.namespace)

    async def pod(self, name: str) -> None:
        await self.kube.create(PODS, objects.pod(name, {"gpu": tmpl("gpu")}), self.namespace)

    async def allocated_claim(self, pod: str) -> dict:
        async def check():
            p = await self.kube.get(PODS, pod, self.namespace)
            names = [s.get("resourceClaimName") for s in p["status"].get("resourceClaimStatuses") or []]
            claim = await self.kube.get_or_none(RESOURCE_CLAIMS, names[0], self.namespace) if names else None
            return claim if claim and bd.allocation(claim) else None

        return await wait_for(check, timeout=60, what=f"claim of {pod} allocated", describe=self.describe)

    async def running(self, pod: str) -> None:
        await wait_for_object(
            self.kube,
            PODS,
            pod,
            self.namespace,
            lambda p: p["status"].get("phase") == "Running",
            what=f"pod {pod} Running",
            timeout=90,
        )

    async def annotate(self, claim: dict, annotations: dict) -> None:
        await self.kube.patch(
            RESOURCE_CLAIMS, claim["metadata"]["name"], {"metadata": {"annotations": annotations}}, self.namespace
        )


async def test_binding_unusable_record_annotations_on_claims(kube, binding, unique):
    """Not JSON, and a good record copied under another device's key: each claim gets an
    InvalidBindingRecord Event saying how to remove the annotation; both devices are prepared
    and both Pods run."""
    async with BindingWorld(kube, f"br{unique}") as world:
        await world.pod("garbled")
        await world.pod("copied")
        garbled, copied = await world.allocated_claim("garbled"), await world.allocated_claim("copied")
        bad = bd.RECORD_ANNOTATION_PREFIX + "0123456789ab"
        await world.annotate(garbled, {bad: "{this is not json"})
        other = bd.DeviceRef(world.driver, "lab-node-0", "gpu-7")
        record = bd.Record(other, "lab-node-0", "2026-01-01T00:00:00Z", None)
        await world.annotate(copied, {bad: record.to_json()})
        for claim, text in (
            (garbled, "is not a preparation record"),
            (copied, f"holds the record of device {other.key}"),
        ):
            name = claim["metadata"]["name"]
            event = await wait_event(
                kube,
                world.namespace,
                "InvalidBindingRecord",
                name,
                bad,
                text,
                f"kubectl annotate resourceclaim -n {world.namespace} {name} {bad}-",
                describe=world.describe,
            )
            assert event["type"] == "Warning"
        await world.running("garbled")
        await world.running("copied")
    alive(binding)


async def test_binding_record_of_a_device_the_claim_does_not_have(kube, binding, unique):
    """A well-formed record for a device that is not allocated to the claim (a preparation whose
    allocation went away): undone, its record removed, the claim's own device prepared."""
    async with BindingWorld(kube, f"bu{unique}") as world:
        await world.pod("p")
        claim = await world.allocated_claim("p")
        ghost = bd.DeviceRef(world.driver, "lab-node-0", "gpu-9")
        # As a run of the operator before a restart would have left it: applied by the device's manager.
        record = bd.Record(ghost, "lab-node-0", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")
        await kube.apply(
            RESOURCE_CLAIMS, bd.record_apply(claim, ghost, record), field_manager=ghost.field_manager, force=True
        )
        name = claim["metadata"]["name"]
        await wait_event(
            kube,
            world.namespace,
            "DeviceUnprepared",
            name,
            f"preparation of device {ghost.key} undone",
            describe=world.describe,
        )
        await wait_for_object(
            kube,
            RESOURCE_CLAIMS,
            name,
            world.namespace,
            lambda c: ghost.record_annotation not in (c["metadata"].get("annotations") or {}),
            what="the stale record removed",
        )
        await world.running("p")
    alive(binding)


class GarbageAttachService:
    """An attach service behind a misconfigured URL: its first answer is a web page with 200, then
    it answers as the protocol says."""

    def __init__(self):
        self.prepares = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        if request.match_info["op"] == "undo":
            return web.json_response({})
        self.prepares += 1
        if self.prepares == 1:
            return web.Response(text="<html><body>It works!</body></html>", content_type="text/html")
        return web.json_response({"status": "ready", "message": "attached"})

    async def __aenter__(self) -> GarbageAttachService:
        app = web.Application()
        app.router.add_post("/{op}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        [port] = free_ports(1)
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


async def test_binding_attach_service_answering_garbage(kube, lab, controllers, unique, log_dir):
    """The http preparer gets a web page instead of JSON: the device fails with the service's URL
    and answer in the Event, is cooled off, and the Pod gets another device that is prepared."""
    controllers.use("ours")
    async with (
        GarbageAttachService() as service,
        BindingWorld(kube, f"bh{unique}", devices=2, domain="bh.lab.dra-operators.dev") as world,
    ):
        operator = OperatorProcess(
            ["binding"],
            lab.kubeconfig,
            log_dir,
            env={
                "DRA_BINDING_DRIVERS": world.driver,
                "DRA_BINDING_PREPARER": "http",
                "DRA_BINDING_COOL_OFF": "60",
                "DRA_BINDING_PREPARER_CONFIG": json.dumps({"url": service.url, "retries": 0, "timeout": 5}),
            },
        )
        operator.log = log_dir / f"binding-http-{unique}.log"
        await asyncio.to_thread(operator.start)
        try:
            await world.pod("p")
            event = await wait_event(
                kube,
                world.namespace,
                "DevicePreparationFailed",
                None,
                "AttachServiceRejected",
                f"{service.url}/prepare answered 200",
                "It works!",
                timeout=90,
                describe=world.describe,
            )
            assert event["type"] == "Warning" and "tainted by DeviceTaintRule" in event["message"]
            await world.running("p")
            alive(operator)
            assert not [line for line in operator.log.read_text().splitlines() if "Traceback" in line]
        finally:
            operator.stop()
            rules = await kube.list(DEVICE_TAINT_RULES, label_selector=f"{bd.MANAGED_BY_LABEL}={bd.MANAGED_BY}")
            for rule in rules:
                if bd.cool_off_driver(rule) == world.driver:
                    await kube.delete(DEVICE_TAINT_RULES, rule["metadata"]["name"])


# -- the node agent ------------------------------------------------------------------------------


@dataclass
class Agent:
    """A node agent (simulated backend, kubelet plugin on) on a kwok Node of this module, with an
    inventory file the cases rewrite."""

    process: OperatorProcess
    node: str
    driver: str
    inventory: Path
    plugins: Path
    cdi_root: Path


@pytest.fixture(scope="module")
def agent(lab, log_dir) -> Agent:
    node, driver = f"bi-{TOKEN}", f"bi-{TOKEN}.agent.lab.dra-operators.dev"
    root = Path(tempfile.mkdtemp(prefix="bi-"))  # short: socket paths have at most 107 characters
    inventory = log_dir / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"gpus": [{"count": 2}]}))
    lab.create_node(node)
    lab.wait_node_schedulable(node)
    process = OperatorProcess(
        ["nodeagent"],
        lab.kubeconfig,
        log_dir,
        env={
            "NODE_NAME": node,
            "DRA_NODEAGENT_BACKEND": "simulated",
            "DRA_NODEAGENT_INVENTORY": str(inventory),
            "DRA_NODEAGENT_DRIVER": driver,
            "DRA_NODEAGENT_SYNC_DELAY": "1",
            "DRA_NODEAGENT_REGISTRY_DIR": str(root / "registry"),
            "DRA_NODEAGENT_PLUGINS_DIR": str(root / "plugins"),
            "DRA_NODEAGENT_CDI_ROOT": str(root / "cdi"),
        },
    )
    process.log = log_dir / "nodeagent.log"
    process.start()
    yield Agent(process, node, driver, inventory, root / "plugins" / driver, root / "cdi")
    try:
        assert not [line for line in process.log.read_text().splitlines() if "Traceback" in line]
    finally:
        process.stop()
        lab.api("DELETE", f"/api/v1/nodes/{node}")


async def published(kube: Kube, agent: Agent) -> list[str]:
    slices = await kube.list(RESOURCE_SLICES, field_selector=f"spec.nodeName={agent.node},spec.driver={agent.driver}")
    newest = max((s["spec"]["pool"]["generation"] for s in slices), default=0)
    return sorted(
        d["name"] for s in slices if s["spec"]["pool"]["generation"] == newest for d in s["spec"].get("devices") or []
    )


async def inventory_case(
    kube: Kube, agent: Agent, content: dict | str | bytes | None, good: list[str], *texts: str
) -> None:
    """Write the inventory (None: delete it); the good devices are published, the InvalidDevice
    Event on the Node names every problem, and the agent stays live."""
    if content is None:
        agent.inventory.unlink()
    elif isinstance(content, bytes):
        agent.inventory.write_bytes(content)
    else:
        agent.inventory.write_text(content if isinstance(content, str) else yaml.safe_dump(content))

    async def done() -> bool:
        events = await warning_events(kube, "default", "InvalidDevice", agent.node)
        reported = any(all(t in e["message"] for t in texts) for e in events)
        return reported and await published(kube, agent) == sorted(good)

    async def describe() -> str:
        events = await warning_events(kube, "default", "InvalidDevice", agent.node)
        return f"published {await published(kube, agent)}; events {[e['message'] for e in events]}"

    await wait_for(done, timeout=30, what=f"inventory case {texts}", describe=describe)
    alive(agent.process)


async def test_nodeagent_inventory_with_wrong_types(kube, agent):
    await inventory_case(
        kube,
        agent,
        {
            "gpus": [
                {"count": 1, "model": "Good"},
                {"count": "four"},
                {"count": 1, "partitions": "two"},
                {"count": 1, "attributes": ["not", "a", "map"]},
                {"count": 1, "memoryPolicy": "x", "allowMultipleAllocations": True},
            ],
            "devices": [
                {"name": "extra-0", "attributes": {"a": {"int": "5"}}},
                {"name": "extra-1", "capacity": {"m": "1"}},
                {"name": "extra-2", "allowMultipleAllocations": "yes"},
                {"name": "extra-ok"},
            ],
        },
        ["gpu-0", "extra-ok"],
        "gpus[1].count: 'four' is not a whole number",
        "gpus[2].partitions: 'two' is not a whole number",
        "gpus[3].attributes: ['not', 'a', 'map'] is not a mapping",
        "gpus[4].memoryPolicy: 'x' is not a mapping",
        "device 'extra-0': attributes[a]: int value '5' is not an integer",
        "device 'extra-1': capacity[m]: '1' must be a mapping like {value: 16Gi}",
        "device 'extra-2': allowMultipleAllocations: 'yes' is not true or false",
    )


async def test_nodeagent_inventory_with_duplicate_device_names(kube, agent):
    await inventory_case(
        kube,
        agent,
        {"gpus": [{"count": 2}], "devices": [{"name": "gpu-1"}, {"name": "dup-0"}, {"name": "dup-0"}]},
        ["gpu-0", "gpu-1", "dup-0"],
        "device 'gpu-1': name: duplicate device name in the pool",
        "device 'dup-0': name: duplicate device name in the pool",
    )


async def test_nodeagent_inventory_with_counters_that_do_not_add_up(kube, agent):
    """A device naming a counter set that does not exist made the scheduler refuse the whole pool
    ("invalid resource pools"): it is left out, with the other counter problems, and the rest of
    the pool stays allocatable."""
    await inventory_case(
        kube,
        agent,
        {
            "gpus": [{"count": 1, "memory": "16Gi", "partitions": 2}, {"count": 1, "memory": "16Gi", "partitions": 3}],
            "devices": [
                {
                    "name": "nowhere",
                    "consumesCounters": [{"counterSet": "nope", "counters": {"memory": {"value": "1Gi"}}}],
                },
                {
                    "name": "greedy",
                    "consumesCounters": [{"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "32Gi"}}}],
                },
            ],
        },
        ["gpu-0", "gpu-0-part-0", "gpu-0-part-1"],
        "gpus[1].partitions: 16Gi of memory does not split into 3 equal partitions",
        "device 'nowhere': consumesCounters[0]: counter set 'nope' does not exist in this pool",
        "device 'greedy': consumesCounters[0].counters[memory]: consumes 32Gi, more than counter set "
        "'gpu-0-counters' holds (16Gi)",
    )


async def test_nodeagent_inventory_with_a_yaml_syntax_error(kube, agent):
    await inventory_case(kube, agent, {"gpus": [{"count": 1}], "devices": [{"name": "kept"}]}, ["gpu-0", "kept"])
    await inventory_case(kube, agent, "gpus: [ {count: 1\n", ["gpu-0", "kept"], "does not parse", "line 2")


async def test_nodeagent_inventory_that_is_not_utf8_or_gone(kube, agent):
    await inventory_case(kube, agent, {"gpus": [{"count": 1}], "devices": [{"name": "still"}]}, ["gpu-0", "still"])
    await inventory_case(
        kube, agent, b"gpus:\n- count: 1\n  model: \xff\xfe\n", ["gpu-0", "still"], "is not UTF-8 text"
    )
    await inventory_case(kube, agent, None, ["gpu-0", "still"], f"cannot read the inventory {agent.inventory}")
    await inventory_case(kube, agent, {"gpus": [{"count": 1}]}, ["gpu-0"])  # the fix


def _claim_spec(driver: str, uid: str) -> dict:
    return cdi.build_claim_spec(
        driver,
        {"uid": uid, "namespace": "ns", "name": f"claim-{uid}"},
        [
            {
                "cdi_name": f"{uid}-gpu-0",
                "edits": {"env": ["X=1"]},
                "record": {
                    "pool": "p",
                    "device": "gpu-0",
                    "requestNames": ["gpu"],
                    "shareID": None,
                    "adminAccess": False,
                    "cdiDeviceIDs": [cdi.qualified_id(driver, f"{uid}-gpu-0")],
                },
            }
        ],
    )


@pytest.mark.parametrize(
    "case, content, error",
    [
        ("not-utf8", b'{"kind": "Checkpoint", "apiVersion": "\xff"}', "UnicodeDecodeError"),
        (
            "unknown-version",
            b'{"kind": "Checkpoint", "apiVersion": "checkpoint.nodeagent.dra-operators.dev/v9"}',
            "unknown checkpoint version 'checkpoint.nodeagent.dra-operators.dev/v9'",
        ),
    ],
    ids=["not-utf8", "unknown-version"],
)
async def test_nodeagent_corrupt_checkpoint_is_rebuilt_from_cdi_specs(kube, agent, case, content, error):
    """The agent rebuilds its checkpoint from the CDI specs it wrote (a damaged spec is skipped,
    then removed as an orphan) and posts CheckpointCorrupt on its Node; it publishes and serves as
    before."""
    agent.process.kill()  # as a node crash would leave it
    uid = f"{case}-{uuid.uuid4().hex[:8]}"
    cdi.write_spec(agent.cdi_root, cdi.spec_file_name(agent.driver, uid), _claim_spec(agent.driver, uid))
    (agent.cdi_root / cdi.spec_file_name(agent.driver, f"damaged-{uid}")).write_text(
        json.dumps({"kind": cdi.kind(agent.driver), "annotations": {cdi.CLAIM_ANNOTATION: "[1]"}, "devices": []})
    )
    (agent.plugins / "checkpoint.json").write_bytes(content)
    await asyncio.to_thread(agent.process.start)
    event = await wait_event(
        kube, "default", "CheckpointCorrupt", agent.node, error, "rebuilt", "prepared claim(s) from the CDI specs"
    )
    assert event["type"] == "Warning"
    rebuilt = json.loads((agent.plugins / "checkpoint.json").read_text())
    assert uid in [c["uid"] for c in rebuilt["preparedClaims"]]
    assert await published(kube, agent)
    alive(agent.process)
    # The damaged spec names no claim of the checkpoint: an orphan, removed by the agent's check of
    # its specs right after the rebuild.
    damaged = agent.cdi_root / cdi.spec_file_name(agent.driver, f"damaged-{uid}")
    await wait_for(lambda: _async(not damaged.exists()), what=f"the orphan spec {damaged.name} removed")


# -- settings and an unusable API at start: exit with one message --------------------------------

SECRET = "hunter22"  # a credential in a setting: never printed


@dataclass(frozen=True)
class ExitCase:
    names: tuple[str, ...]
    env: dict
    expected: tuple[str, ...]


class GarbageServer:
    """Something that is not a Kubernetes API server where KUBECONFIG points: answers every request
    with 200 and a line of text."""

    async def __aenter__(self) -> str:
        async def answer(request: web.Request) -> web.Response:
            return web.Response(text="hello from a web server")

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        [port] = free_ports(1)
        await web.TCPSite(self.runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


def _kubeconfig(path: Path, server: str, ca: str | None = None, token: str | None = None) -> Path:
    cluster = {"server": server, **({"certificate-authority": ca} if ca else {})}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": token or "x"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def exit_cases(lab, agent: Agent, closed_port: int, garbage: str, files: Path) -> dict[str, ExitCase]:
    closed = _kubeconfig(files / "closed.kubeconfig", f"https://127.0.0.1:{closed_port}", str(lab.pki.ca_cert))
    not_api = _kubeconfig(files / "garbage.kubeconfig", garbage)
    bad_token = _kubeconfig(files / "token.kubeconfig", lab.server, str(lab.pki.ca_cert), token="garbage")
    node = {
        "NODE_NAME": agent.node,
        "DRA_NODEAGENT_BACKEND": "simulated",
        "DRA_NODEAGENT_INVENTORY": str(agent.inventory),
        "DRA_NODEAGENT_KUBELET_PLUGIN": "false",
        "DRA_NODEAGENT_DRIVER": f"exit-{TOKEN}.lab.dra-operators.dev",
    }
    unreachable = (
        f"cannot reach the API server at https://127.0.0.1:{closed_port}",
        f"check that the cluster is running and that KUBECONFIG ({closed}) names its address and port",
    )
    cases = {
        "claims-workers-not-a-number": ExitCase(
            ("claims",),
            {"DRA_CLAIMS_WORKERS": "abc"},
            ("DRA_CLAIMS_WORKERS='abc': not a whole number", "Set a whole number >= 1"),
        ),
        "log-level-unknown": ExitCase(
            ("claims",),
            {"DRA_LOG_LEVEL": "LOUD"},
            ("DRA_LOG_LEVEL='LOUD': not a log level", "Set DEBUG, INFO, WARNING or ERROR"),
        ),
        "leader-election-not-a-bool": ExitCase(
            ("claims",), {"DRA_LEADER_ELECTION": "maybe"}, ("DRA_LEADER_ELECTION='maybe': not true or false",)
        ),
        "taints-negative-rate": ExitCase(
            ("taints",),
            {"DRA_TAINTS_EVICTIONS_PER_SECOND": "-1"},
            ("DRA_TAINTS_EVICTIONS_PER_SECOND='-1': too small", "Set a number >= 0"),
        ),
        "taints-unknown-rule-version": ExitCase(
            ("taints",),
            {"DRA_TAINTS_RULE_VERSION": "v9"},
            ("DRA_TAINTS_RULE_VERSION='v9': not a known value", "'v1', 'v1beta2', 'v1alpha3'"),
        ),
        "binding-bad-taint-effect": ExitCase(
            ("binding",),
            {"DRA_BINDING_TAINT_EFFECT": "NoExecute"},
            ("DRA_BINDING_TAINT_EFFECT='NoExecute': not a known value", "Set one of 'NoSchedule', 'None'"),
        ),
        "binding-unknown-preparer": ExitCase(
            ("binding",),
            {"DRA_BINDING_PREPARER": "nope"},
            ("DRA_BINDING_PREPARER='nope'", "unknown preparer 'nope'; available: http, simulated"),
        ),
        "binding-preparer-config-wrong-type": ExitCase(
            ("binding",),
            {"DRA_BINDING_PREPARER_CONFIG": '{"delay": "slow"}'},
            (
                "simulated preparer: delay must be a number >= 0, got 'slow'",
                "fix the preparer's name or its configuration",
            ),
        ),
        # Not shown: a configuration holds credentials (SECRET must not be in the output).
        "binding-preparer-config-not-json": ExitCase(
            ("binding",),
            {"DRA_BINDING_PREPARER_CONFIG": '{"headers": {"Authorization": "Bearer ' + SECRET + '"}, delay: 1'},
            (
                "DRA_BINDING_PREPARER_CONFIG: preparer configuration (inline, 58 characters, not shown): not JSON: "
                "Expecting property name enclosed in double quotes at line 1 column 51",
                "(a JSON object, or @file with JSON or YAML)",
            ),
        ),
        "binding-preparer-config-file-missing": ExitCase(
            ("binding",),
            {"DRA_BINDING_PREPARER_CONFIG": "@/nonexistent.yaml"},
            ("preparer configuration file /nonexistent.yaml: cannot read it: No such file or directory",),
        ),
        "nodeagent-unknown-backend": ExitCase(
            ("nodeagent",),
            {**node, "DRA_NODEAGENT_BACKEND": "gpu"},
            ("DRA_NODEAGENT_BACKEND='gpu': not a known value", "Set one of 'nvml', 'simulated'"),
        ),
        "nodeagent-node-name-unset": ExitCase(
            ("nodeagent",), {**node, "NODE_NAME": ""}, ("NODE_NAME is not set", "downward API")
        ),
        "nodeagent-node-does-not-exist": ExitCase(
            ("nodeagent",),
            {**node, "NODE_NAME": f"missing-{TOKEN}"},
            (f"Node 'missing-{TOKEN}' does not exist: set NODE_NAME",),
        ),
        "nodeagent-ignored-xids-not-numbers": ExitCase(
            ("nodeagent",),
            {**node, "DRA_NODEAGENT_IGNORED_XIDS": "13,x"},
            ("DRA_NODEAGENT_IGNORED_XIDS='13,x': 'x' is not an XID number",),
        ),
        "nodeagent-socket-path-too-long": ExitCase(
            ("nodeagent",),
            {
                **node,
                "DRA_NODEAGENT_KUBELET_PLUGIN": "true",
                "DRA_NODEAGENT_PLUGINS_DIR": "/tmp/" + "p" * 100,
                "DRA_NODEAGENT_REGISTRY_DIR": str(files / "registry"),
                "DRA_NODEAGENT_CDI_ROOT": str(files / "cdi"),
            },
            ("is longer than 107 characters", "choose shorter kubelet directories"),
        ),
        "kubeconfig-missing-file": ExitCase(
            ("claims",),
            {"KUBECONFIG": "/nonexistent/kubeconfig"},
            ("KUBECONFIG=/nonexistent/kubeconfig: no such file", "point KUBECONFIG at the cluster's kubeconfig"),
        ),
        "kubeconfig-not-an-api-server": ExitCase(
            ("taints",),
            {"KUBECONFIG": str(not_api)},
            (
                f"the API server at {garbage} did not answer like a Kubernetes API server",
                "not JSON",
                f"check the server address in KUBECONFIG ({not_api})",
            ),
        ),
        "kubeconfig-bad-token": ExitCase(
            ("binding",),
            {"KUBECONFIG": str(bad_token)},
            (
                f"the API server at {lab.server} does not accept our credentials",
                "401",
                f"check the user (token or client certificate) in KUBECONFIG ({bad_token})",
            ),
        ),
    }
    for name in ("claims", "taints", "binding", "nodeagent"):
        # Each waits DRA_API_WAIT (60 s by default, 3 s here) for the API server, saying so, then exits.
        cases[f"{name}-api-unreachable"] = ExitCase(
            (name,),
            {**(node if name == "nodeagent" else {}), "KUBECONFIG": str(closed), "DRA_API_WAIT": "3"},
            (f"{name} could not start", *unreachable),
        )
    return cases


@dataclass(frozen=True)
class Exit:
    code: int | None
    output: str


@pytest.fixture(scope="module")
async def exits(lab, agent, tmp_path_factory) -> dict[str, tuple[ExitCase, Exit]]:
    """Every exit case run once, a few at a time (each is a Python process that starts and ends)."""
    files = tmp_path_factory.mktemp("bad-input-exits")
    [closed_port] = free_ports(1)  # nothing listens there
    limit = asyncio.Semaphore(8)

    async def run(case: ExitCase) -> Exit:
        env = {
            **os.environ,
            "KUBECONFIG": str(lab.kubeconfig),
            "DRA_METRICS_PORT": "0",
            "DRA_LOG_FORMAT": "json",
            **case.env,
        }
        env = {k: v for k, v in env.items() if v != ""}
        async with limit:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "operators.cli",
                "run",
                *case.names,
                "--liveness",
                "",
                env=env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
            except TimeoutError:
                proc.kill()
                out, _ = await proc.communicate()
                return Exit(None, out.decode(errors="replace"))  # a hang: the case fails
            return Exit(proc.returncode, out.decode(errors="replace"))

    async with GarbageServer() as garbage:
        cases = exit_cases(lab, agent, closed_port, garbage, files)
        # The ones that wait for retries first, so that the quick ones fill the gaps.
        order = sorted(cases, key=lambda name: "KUBECONFIG" not in cases[name].env)
        results = dict(zip(order, await asyncio.gather(*(run(cases[name]) for name in order)), strict=True))
    return {name: (case, results[name]) for name, case in cases.items()}


EXIT_CASES = [
    "claims-workers-not-a-number",
    "log-level-unknown",
    "leader-election-not-a-bool",
    "taints-negative-rate",
    "taints-unknown-rule-version",
    "binding-bad-taint-effect",
    "binding-unknown-preparer",
    "binding-preparer-config-wrong-type",
    "binding-preparer-config-not-json",
    "binding-preparer-config-file-missing",
    "nodeagent-unknown-backend",
    "nodeagent-node-name-unset",
    "nodeagent-node-does-not-exist",
    "nodeagent-ignored-xids-not-numbers",
    "nodeagent-socket-path-too-long",
    "kubeconfig-missing-file",
    "kubeconfig-not-an-api-server",
    "kubeconfig-bad-token",
    "claims-api-unreachable",
    "taints-api-unreachable",
    "binding-api-unreachable",
    "nodeagent-api-unreachable",
]


@pytest.mark.parametrize("name", EXIT_CASES)
def test_exits_with_one_message_naming_the_fix(exits, name):
    case, result = exits[name]
    assert result.code is not None, f"{name}: still running after 120 s:\n{result.output[-3000:]}"
    assert result.code != 0, result.output[-3000:]
    assert "Traceback" not in result.output, result.output[-5000:]
    message = result.output.strip().splitlines()[-1]
    assert message.startswith("Error: "), result.output[-3000:]
    if name.endswith("-api-unreachable"):
        assert "waiting for the API server" in result.output, result.output[-3000:]
    for text in case.expected:
        assert text in message, f"{text!r} not in {message!r}"
    assert SECRET not in result.output, result.output[-3000:]


async def _async(value):
    return value
