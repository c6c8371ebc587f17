"""DeviceState without gRPC: prepare, unprepare, the CDI specs and the checkpoint, called as the
servicers call it (plain claim references), on the simulated backend with a stand-in API server
that serves the claims and records what is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from operators.core.api.kube import ApiError
from operators.core.api.resources import EVENTS, RESOURCE_CLAIMS
from operators.nodeagent.backends.simulated import PREPARE_FAILURE_ANNOTATION, SimulatedBackend
from operators.nodeagent.metrics import Metrics
from operators.nodeagent.plugin import cdi, checkpoint
from operators.nodeagent.plugin.state import ClaimResult, DeviceState

DRIVER, NODE = "gpu.sim.test", "node-a"
PREPARES, UNPREPARES = "dra_nodeagent_node_prepare_claims_total", "dra_nodeagent_node_unprepare_claims_total"
PREPARED = "dra_nodeagent_prepared_claims"


class ClaimsApi:
    """The API calls DeviceState makes: claims read by namespace and name (an exception stored
    for a claim is raised), status applies and Events recorded."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict | Exception] = {}
        self.applied: list[dict] = []
        self.events: list[dict] = []

    def add(self, claim: dict) -> dict:
        self.claims[(claim["metadata"]["namespace"], claim["metadata"]["name"])] = claim
        return claim

    async def get_or_none(self, resource, name: str, namespace: str | None = None) -> dict | None:
        assert resource is RESOURCE_CLAIMS
        found = self.claims.get((namespace, name))
        if isinstance(found, Exception):
            raise found
        return found

    async def apply(self, resource, body: dict, **options) -> dict:
        assert resource is RESOURCE_CLAIMS and options["subresource"] == "status"
        self.applied.append(body)
        return body

    async def create(self, resource, body: dict, namespace: str | None = None) -> dict:
        assert resource is EVENTS
        self.events.append(body)
        return body


def claim(name: str, devices: list[str], uid: str | None = None, node: str = NODE) -> dict:
    return {
        "metadata": {"uid": uid or f"uid-{name}", "namespace": "ns", "name": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "gpus", "driver": DRIVER, "pool": NODE, "device": d} for d in devices]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        },
    }


def ref(c: dict) -> dict[str, str]:
    """A claim as kubelet names it in its requests."""
    return {k: c["metadata"][k] for k in ("namespace", "uid", "name")}


@pytest.fixture
def world(tmp_path: Path):
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"gpus": [{"count": 4, "memory": "16Gi"}]}))
    backend = SimulatedBackend(str(inventory), NODE, DRIVER)
    found = backend.discover()
    agent = SimpleNamespace(
        driver=DRIVER,
        node_name=NODE,
        backend=backend,
        metrics=Metrics(),
        node=None,
        published_devices=lambda: found.devices,
    )
    api = ClaimsApi()

    def state() -> DeviceState:
        """A fresh instance over the same directories: what a restarted agent starts with."""
        return DeviceState(agent, api, data_dir=tmp_path / "plugin" / DRIVER, cdi_root=tmp_path / "cdi")

    return SimpleNamespace(
        agent=agent,
        api=api,
        state=state,
        cdi=tmp_path / "cdi",
        checkpoint=tmp_path / "plugin" / DRIVER / "checkpoint.json",
    )


def metric(agent, name: str, outcome: str | None = None) -> float:
    labels = {"driver": DRIVER, **({"outcome": outcome} if outcome else {})}
    return agent.metrics.registry.get_sample_value(name, labels) or 0


def spec_env(world, uid: str) -> dict[str, str]:
    spec = json.loads((world.cdi / cdi.spec_file_name(DRIVER, uid)).read_text())
    return dict(e.split("=", 1) for d in spec["devices"] for e in d["containerEdits"]["env"])


async def test_prepare_writes_the_spec_and_the_checkpoint_and_answers_the_devices(world):
    state = world.state()
    await state.recover()
    c = world.api.add(claim("one", ["gpu-1"]))
    results = await state.prepare([ref(c)])
    [result] = results.values()
    assert list(results) == ["uid-one"] and result.error == ""
    [device] = result.devices
    assert (device.pool, device.device, device.requestNames) == (NODE, "gpu-1", ["gpus"])
    assert device.cdiDeviceIDs == [f"k8s.{DRIVER}/claim=uid-one-gpu-1"]
    assert spec_env(world, "uid-one")["DRA_DEVICE_GPU_1_CLAIM"] == "ns/one"
    assert checkpoint.load(world.checkpoint) == {"uid-one": state.prepared["uid-one"]}
    [status] = world.api.applied
    assert [(d["pool"], d["device"]) for d in status["status"]["devices"]] == [(NODE, "gpu-1")]
    assert metric(world.agent, PREPARES, "success") == 1 and metric(world.agent, PREPARED) == 1


async def test_an_empty_call_answers_nothing(world):
    assert await world.state().prepare([]) == {}


async def test_a_repeated_prepare_answers_what_the_first_got_and_restores_a_lost_spec(world):
    state = world.state()
    await state.recover()
    c = world.api.add(claim("one", ["gpu-0", "gpu-2"]))
    first = await state.prepare([ref(c)])
    spec_path = world.cdi / cdi.spec_file_name(DRIVER, "uid-one")
    written, saved = spec_path.read_text(), world.checkpoint.read_text()
    spec_path.unlink()  # /var/run/cdi emptied by a reboot, say
    again = await state.prepare([ref(c)])
    assert again == first
    assert spec_path.read_text() == written and world.checkpoint.read_text() == saved
    assert len(world.api.applied) == 1  # status.devices written by the first prepare only


async def test_unprepare_removes_the_spec_and_the_checkpoint_entry_and_accepts_unknown_claims(world):
    state = world.state()
    await state.recover()
    kept, gone = world.api.add(claim("kept", ["gpu-0"])), world.api.add(claim("gone", ["gpu-1"]))
    await state.prepare([ref(kept), ref(gone)])
    never = ref(claim("never", ["gpu-3"]))
    assert await state.unprepare([ref(gone), never]) == {"uid-gone": "", "uid-never": ""}
    assert sorted(cdi.spec_files(world.cdi, DRIVER)) == ["uid-kept"]
    assert list(checkpoint.load(world.checkpoint)) == ["uid-kept"]
    assert metric(world.agent, UNPREPARES, "success") == 2 and metric(world.agent, PREPARED) == 1
    # The device is free again for another claim.
    other = world.api.add(claim("other", ["gpu-1"]))
    assert (await state.prepare([ref(other)]))["uid-other"].error == ""


async def test_each_claim_gets_its_own_error_and_the_others_are_prepared(world):
    state = world.state()
    await state.recover()
    good = world.api.add(claim("good", ["gpu-0"]))
    elsewhere = world.api.add(claim("elsewhere", ["gpu-1"], node="node-b"))
    replaced = world.api.add(claim("replaced", ["gpu-2"], uid="uid-new"))
    missing = claim("missing", ["gpu-3"])
    world.api.claims[("ns", "forbidden")] = ApiError(403, {"reason": "Forbidden", "message": "no"}, "GET", "/x")
    taken = world.api.add(claim("taken", ["gpu-0"]))
    requests = [
        ref(good),
        ref(elsewhere),
        {**ref(replaced), "uid": "uid-old"},
        ref(missing),
        {"namespace": "ns", "uid": "uid-forbidden", "name": "forbidden"},
        ref(taken),
    ]
    results = await state.prepare(requests)
    errors = {uid: r.error for uid, r in results.items()}
    assert errors["uid-good"] == "" and results["uid-good"].devices
    assert "allocated on node node-b, not on this node node-a" in errors["uid-elsewhere"]
    assert "got replaced: it has UID uid-new, kubelet asked for uid-old" in errors["uid-old"]
    assert errors["uid-missing"] == "ResourceClaim ns/missing does not exist"
    assert errors["uid-forbidden"].startswith("ResourceClaim ns/forbidden: GET /x: 403 Forbidden")
    assert "device gpu-0 is already prepared for ResourceClaim ns/good" in errors["uid-taken"]
    assert all(results[uid] == ClaimResult(error=e) for uid, e in errors.items() if uid != "uid-good")
    assert list(cdi.spec_files(world.cdi, DRIVER)) == ["uid-good"]
    assert list(checkpoint.load(world.checkpoint)) == ["uid-good"]
    assert metric(world.agent, PREPARES, "error") == 5 and metric(world.agent, PREPARES, "success") == 1


async def test_a_backend_failure_fails_its_claim_and_leaves_no_spec(world):
    state = world.state()
    await state.recover()
    world.agent.backend.observe_node({"metadata": {"annotations": {PREPARE_FAILURE_ANNOTATION: "gpu-3"}}})
    c = world.api.add(claim("one", ["gpu-3"]))
    [result] = (await state.prepare([ref(c)])).values()
    assert "simulated prepare failure of device gpu-3" in result.error
    assert not cdi.spec_files(world.cdi, DRIVER) and not state.prepared


async def test_the_checkpoint_round_trips_and_a_restarted_state_carries_on(world):
    state = world.state()
    await state.recover()
    one, two = world.api.add(claim("one", ["gpu-0"])), world.api.add(claim("two", ["gpu-1", "gpu-2"]))
    answered = await state.prepare([ref(one), ref(two)])
    assert checkpoint.decode(checkpoint.encode(state.prepared)) == state.prepared
    assert checkpoint.load(world.checkpoint) == state.prepared

    restarted = world.state()
    await restarted.recover()
    assert restarted.prepared == state.prepared
    world.api.claims.clear()  # already prepared: answered from the checkpoint, not the API
    assert await restarted.prepare([ref(one), ref(two)]) == answered
    assert len(world.api.applied) == 2
    assert await restarted.unprepare([ref(one)]) == {"uid-one": ""}
    assert sorted(cdi.spec_files(world.cdi, DRIVER)) == ["uid-two"]


async def test_another_instance_sees_what_the_first_prepared(world):
    """Two instances during a rolling update share the directories: each call reads the
    checkpoint first, so the second never prepares a device the first gave away."""
    first, second = world.state(), world.state()
    await first.recover()
    await second.recover()
    await first.prepare([ref(world.api.add(claim("one", ["gpu-0"])))])
    [result] = (await second.prepare([ref(world.api.add(claim("two", ["gpu-0"])))])).values()
    assert "device gpu-0 is already prepared for ResourceClaim ns/one" in result.error
    assert await second.unprepare([ref(claim("one", ["gpu-0"]))]) == {"uid-one": ""}
    assert not cdi.spec_files(world.cdi, DRIVER)


async def test_a_corrupt_checkpoint_is_rebuilt_from_the_specs_with_an_event_on_the_node(world):
    state = world.state()
    await state.recover()
    await state.prepare([ref(world.api.add(claim("one", ["gpu-0"])))])
    prepared = state.prepared
    world.checkpoint.write_text('{"kind": "Checkpoint", "apiVersion": "torn')
    world.agent.node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "uid": "node-uid"}}
    restarted = world.state()
    await restarted.recover()
    assert restarted.prepared == prepared and checkpoint.load(world.checkpoint) == prepared
    [event] = world.api.events
    assert event["reason"] == "CheckpointCorrupt" and event["involvedObject"]["name"] == NODE


async def test_an_orphan_spec_is_removed_at_start(world):
    """A prepare that wrote its spec and died before saving the checkpoint."""
    state = world.state()
    await state.recover()
    state._prepare_claim(ref(claim("lost", ["gpu-0"])), claim("lost", ["gpu-0"]))
    assert list(cdi.spec_files(world.cdi, DRIVER)) == ["uid-lost"]
    restarted = world.state()
    await restarted.recover()
    assert not cdi.spec_files(world.cdi, DRIVER) and not restarted.prepared


def test_the_state_loads_no_grpc():
    """Prepare is testable and usable without the transport: no gRPC or HTTP/2 library behind it."""
    script = (
        "import sys, operators.nodeagent.plugin.state\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'grpclib', 'grpc', 'h2'}))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
