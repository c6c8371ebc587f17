"""Every example in config/examples, applied as a user would, on the lab with the operators and
simulated node agents running: each Pod ends up holding the device the example promises."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from operators.core.resources import DEVICE_TAINT_RULES, NAMESPACES, PODS, RESOURCE_CLAIMS, SERVICE_ACCOUNTS

from .operator_process import OperatorProcess
from .waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
INVENTORY = ROOT / "kustomize" / "overlays" / "simulated-devices" / "inventory.yaml"
DRIVER = "gpu.sim.dra-operators.dev"


@pytest.fixture(scope="module")
def simulated_nodes(lab, controllers, tmp_path_factory):
    """A simulated node agent with the kind inventory on each lab node, and the DeviceClasses."""
    controllers.use("ours")
    result = lab.kubectl("apply", "--server-side", "-f", str(ROOT / "config" / "deviceclasses"), check=False)
    assert result.returncode == 0, result.stderr
    logs = tmp_path_factory.mktemp("example-agents")
    agents = []
    for node in ("lab-node-0", "lab-node-1"):
        agent = OperatorProcess(["nodeagent"], lab.kubeconfig, logs, env={
            "NODE_NAME": node, "DRA_NODEAGENT_BACKEND": "simulated", "DRA_NODEAGENT_INVENTORY": str(INVENTORY),
            "DRA_NODEAGENT_KUBELET_PLUGIN": "false", "DRA_NODEAGENT_SYNC_DELAY": "1"})
        agent.log = logs / f"agent-{node}.log"
        agent.start()
        agents.append(agent)
    yield
    for agent in agents:
        agent.stop()


async def apply_example(lab, kube, name: str, unique: str) -> str:
    namespace = f"ex-{name[:20]}-{unique}"
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    await wait_for(lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", namespace), what="default ServiceAccount")
    result = lab.kubectl("apply", "-n", namespace, "-f", str(EXAMPLES / name), check=False)
    assert result.returncode == 0, result.stderr
    return namespace


async def running_with_claims(kube, namespace: str, pods: list[str]) -> dict[str, list[dict]]:
    """Wait until the Pods run; return each Pod's allocation results."""
    results = {}
    for name in pods:
        pod = await wait_for(lambda: _running(kube, namespace, name), timeout=60, what=f"Pod {name} Running")
        claims = []
        for pod_claim in pod["spec"]["resourceClaims"]:
            claim_name = pod_claim.get("resourceClaimName") or next(
                s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"] if s["name"] == pod_claim["name"])
            claims.append(await kube.get(RESOURCE_CLAIMS, claim_name, namespace))
        results[name] = [r for c in claims for r in c["status"]["allocation"]["devices"]["results"]]
        assert all(r["driver"] == DRIVER and r["pool"] == pod["spec"]["nodeName"] for r in results[name])
    return results


async def _running(kube, namespace, name):
    pod = await kube.get_or_none(PODS, name, namespace)
    return pod if pod and pod["status"].get("phase") == "Running" else None


async def test_basic_template(lab, kube, simulated_nodes, unique):
    ns = await apply_example(lab, kube, "basic-template", unique)
    [result] = (await running_with_claims(kube, ns, ["basic"]))["basic"]
    assert result["request"] == "gpu"


async def test_shared_claim(lab, kube, simulated_nodes, unique):
    ns = await apply_example(lab, kube, "shared-claim", unique)
    results = await running_with_claims(kube, ns, ["shared-a", "shared-b"])
    assert results["shared-a"] == results["shared-b"]
    claim = await kube.get(RESOURCE_CLAIMS, "shared-gpu", ns)
    assert {r["name"] for r in claim["status"]["reservedFor"]} == {"shared-a", "shared-b"}


async def test_cel_selector(lab, kube, simulated_nodes, unique):
    ns = await apply_example(lab, kube, "cel-selector", unique)
    [result] = (await running_with_claims(kube, ns, ["cel-selector"]))["cel-selector"]
    assert result["device"] == "gpu-1"


async def test_prioritized_list(lab, kube, simulated_nodes, unique):
    ns = await apply_example(lab, kube, "prioritized-list", unique)
    [result] = (await running_with_claims(kube, ns, ["prioritized"]))["prioritized"]
    assert result["request"] == "gpu/half" and "-part-" in result["device"]


async def test_consumable_capacity(lab, kube, simulated_nodes, unique):
    ns = await apply_example(lab, kube, "consumable-capacity", unique)
    results = await running_with_claims(kube, ns, ["capacity-small", "capacity-large"])
    small, large = results["capacity-small"][0], results["capacity-large"][0]
    if small["pool"] == large["pool"]:
        assert small["device"] == large["device"] and small["shareID"] != large["shareID"]
    assert small["consumedCapacity"]["memory"] == "8Gi" and large["consumedCapacity"]["memory"] == "16Gi"


async def test_admin_access(lab, kube, simulated_nodes):
    result = lab.kubectl("apply", "-f", str(EXAMPLES / "admin-access"), check=False)
    assert result.returncode == 0, result.stderr
    try:
        [found] = (await running_with_claims(kube, "dra-example-admin", ["gpu-monitor"]))["gpu-monitor"]
        assert found["adminAccess"] is True and found["device"] == "gpu-0"
    finally:
        await kube.delete(NAMESPACES, "dra-example-admin")


async def test_taints_and_tolerations(lab, kube, simulated_nodes, unique):
    ns = await apply_example(lab, kube, "taints-tolerations", unique)
    try:
        [result] = (await running_with_claims(kube, ns, ["tolerating"]))["tolerating"]
        assert result["device"] == "gpu-3"
        assert result["tolerations"][0]["key"] == "example.dra-operators.dev/maintenance"
        await asyncio.sleep(3)  # the taints operator has seen it by now: the tolerating Pod stays
        pod = await kube.get(PODS, "tolerating", ns)
        assert pod["status"]["phase"] == "Running" and not pod["metadata"].get("deletionTimestamp")
        assert not any(c["type"] == "DisruptionTarget" for c in pod["status"].get("conditions") or [])
    finally:
        rules = await kube.preferred_version(DEVICE_TAINT_RULES)
        await kube.delete(rules, "maintenance-gpu-3")
