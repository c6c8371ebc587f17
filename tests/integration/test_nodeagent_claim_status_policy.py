"""On a cluster without DRAResourceClaimGranularStatusAuthorization the node agent's cluster-wide
``resourceclaims/status`` patch would let a compromised agent rewrite any claim; the admission
policy ``dra-operators-nodeagent-own-claims`` (kustomize base) holds it to what the gate would:
status.devices entries of its own drivers, on claims allocated on its own node, nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from operators.core.api.kube import MERGE_PATCH, ApiError, Kube
from operators.core.api.resources import NODES, RESOURCE_CLAIMS
from operators.lab import Lab, LabOptions

from .labs import client_of, short_run_dir
from .waiting import wait_for

GATE = "DRAResourceClaimGranularStatusAuthorization"
ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "dra-operators"
DRIVER = "gpu.sim.dra-operators.dev"
FOREIGN = "other.example.com"


@pytest.fixture(scope="module")
def gate_off_lab():
    lab = Lab(
        LabOptions(
            name=f"pytest-{os.getpid()}-granular-off", nodes=2, run_dir=short_run_dir("gso-"), disabled_gates=(GATE,)
        ),
        log=lambda message: print(message, flush=True),
    )
    lab.start()
    try:
        applied = lab.kubectl("apply", "--server-side", "-k", str(ROOT / "kustomize" / "base"), check=False)
        assert applied.returncode == 0, applied.stderr
        yield lab
    finally:
        lab.stop()


async def _agent_of(lab: Lab, admin: Kube, node: str) -> Kube:
    """The node agent's ServiceAccount with a token bound to ``node`` (it names the node, as the
    agent Pod's projected token does)."""
    got = await admin.get_or_none(NODES, node)
    response = await admin.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/dra-nodeagent/token",
        body={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": got["metadata"]["uid"]},
            },
        },
    )
    return Kube.with_token(lab.server, response["status"]["token"], str(lab.pki.ca_cert))


async def _allocated_claim(admin: Kube, name: str, node: str) -> dict:
    claim = await admin.create(
        RESOURCE_CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu"}},
                        {"name": "nic", "exactly": {"deviceClassName": "nic"}},
                    ]
                }
            },
        },
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": DRIVER, "pool": node, "device": "gpu-0"},
                    {"request": "nic", "driver": FOREIGN, "pool": node, "device": "nic-0"},
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    return await admin.replace(RESOURCE_CLAIMS, claim, subresource="status")


def _device_status(driver: str, node: str, device: str) -> dict:
    return {"driver": driver, "pool": node, "device": device, "data": {"uuid": f"{device}-uuid"}}


async def _patch_status(agent: Kube, claim: str, status: dict) -> dict:
    return await agent.patch(
        RESOURCE_CLAIMS, claim, {"status": status}, "default", content_type=MERGE_PATCH, subresource="status"
    )


async def _policy_in_force(agent: Kube) -> None:
    """The API server reads admission policies through an informer (k8s.io/apiserver
    generic/policy_source.go): one applied a moment ago may not be enforced yet. Wait until a
    dry run of a write it refuses is refused."""

    async def refused() -> bool:
        try:
            await agent.request(
                "PATCH",
                RESOURCE_CLAIMS.path("default", "theirs", "status"),
                body={"status": {"devices": [_device_status(DRIVER, "lab-node-1", "gpu-0")]}},
                content_type=MERGE_PATCH,
                params=[("dryRun", "All")],
            )
        except ApiError as e:
            if "may not write the status of a claim allocated on node" in e.message:
                return True
            raise
        return False

    await wait_for(refused, what="the admission policy dra-operators-nodeagent-own-claims in force")


async def test_node_agent_writes_only_its_own_nodes_claims_device_status_without_the_gate(gate_off_lab):
    lab = gate_off_lab
    async with client_of(lab) as admin:
        await _allocated_claim(admin, "mine", "lab-node-0")
        theirs = await _allocated_claim(admin, "theirs", "lab-node-1")
        async with await _agent_of(lab, admin, "lab-node-0") as agent:
            await _policy_in_force(agent)
            # Its own node's claim, its own driver's device: allowed (what the agent does).
            await _patch_status(agent, "mine", {"devices": [_device_status(DRIVER, "lab-node-0", "gpu-0")]})

            # Another node's claim: refused (RBAC alone would allow it without the gate).
            with pytest.raises(ApiError) as denied:
                await _patch_status(agent, "theirs", {"devices": [_device_status(DRIVER, "lab-node-1", "gpu-0")]})
            assert "may not write the status of a claim allocated on node lab-node-1" in denied.value.message

            # Another driver's device on its own node: refused.
            with pytest.raises(ApiError) as denied:
                await _patch_status(
                    agent,
                    "mine",
                    {
                        "devices": [
                            _device_status(DRIVER, "lab-node-0", "gpu-0"),
                            _device_status(FOREIGN, "lab-node-0", "nic-0"),
                        ]
                    },
                )
            assert "may write status.devices entries of its drivers only" in denied.value.message

            # reservedFor (who may use the claim): refused.
            with pytest.raises(ApiError) as denied:
                await _patch_status(
                    agent,
                    "mine",
                    {
                        "reservedFor": [
                            {"resource": "pods", "name": "intruder", "uid": "0c5fe1b0-0000-4000-8000-000000000001"}
                        ]
                    },
                )
            assert "not its allocation or reservedFor" in denied.value.message

        after = {c["metadata"]["name"]: c["status"] for c in await admin.list(RESOURCE_CLAIMS, "default")}
        written = [{k: v for k, v in d.items() if v is not None} for d in after["mine"]["devices"]]
        assert written == [_device_status(DRIVER, "lab-node-0", "gpu-0")]
        assert "reservedFor" not in after["mine"] and "devices" not in after["theirs"]
        assert after["theirs"]["allocation"] == theirs["status"]["allocation"]
