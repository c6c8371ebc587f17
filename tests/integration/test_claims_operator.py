"""The claims operator on its own: bad input, length limits, the real scheduler across nodes,
restarts under load, and scale."""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections import Counter

from operators.claims.decisions import POD_CLAIM_ANNOTATION
from operators.core.api.resources import (
    EVENTS,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
)

from . import objects
from .claims_env import ClaimsEnv
from .waiting import wait_for


def tmpl(name: str) -> dict[str, str]:
    return {"resourceClaimTemplateName": name}


async def _events(kube, namespace: str, reason: str) -> list[dict]:
    return [e for e in await kube.list(EVENTS, namespace) if e.get("reason") == reason]


async def test_missing_template_is_reported_and_claim_follows_the_template(kube, controllers, unique):
    controllers.use("ours")
    async with ClaimsEnv(kube, f"mt{unique}") as env:
        await env.pod("waiting", {"gpu": tmpl("not-yet")})
        await env.wait_event("FailedResourceClaimCreation")
        [event] = await _events(kube, env.namespace, "FailedResourceClaimCreation")
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == "waiting"
        assert event["source"]["component"] == "resource_claim"
        assert 'PodResourceClaim gpu: resource claim template "not-yet"' in event["message"]
        assert "create it in namespace" in event["message"]
        await env.template("not-yet")
        claim = await env.claim_of("waiting", "gpu")
        await env.wait_running("waiting")
        await env.wait_claim(claim, lambda c: c.get("status", {}).get("allocation"), "allocated")
        metrics = controllers.operators["claims"].metrics()
        assert re.search(
            r'dynamic_resource_allocation_resource_claims\{admin_access="false",allocated="true",'
            r'source="resource_claim_template"\} [1-9]',
            metrics,
        ), metrics
        assert re.search(
            r'dynamic_resource_allocation_resourceclaim_creates_total\{admin_access="false",'
            r'owner_api_group="",owner_api_kind="Pod",status="success"\} [1-9]',
            metrics,
        ), metrics


async def test_claim_the_api_server_rejects_gets_its_message_in_an_event(kube, controllers, unique):
    controllers.use("ours")
    operator = controllers.operators["claims"]
    async with ClaimsEnv(kube, f"rj{unique}") as env:
        admin_label = {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}}
        await kube.patch(NAMESPACES, env.namespace, admin_label)
        template = objects.resource_claim_template("admin", env.device_class)
        template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = True
        await kube.create(RESOURCE_CLAIM_TEMPLATES, template, env.namespace)
        # The namespace loses its admin label: the template stays, its claims are now invalid.
        await kube.patch(
            NAMESPACES, env.namespace, {"metadata": {"labels": {"resource.kubernetes.io/admin-access": None}}}
        )
        await env.pod("monitor", {"gpu": tmpl("admin")})
        await env.wait_event("FailedResourceClaimCreation")
        events = await _events(kube, env.namespace, "FailedResourceClaimCreation")
        assert len(events) == 1, [(e["message"], e.get("count")) for e in events]
        [event] = events
        assert (
            "admin access to devices requires the `resource.kubernetes.io/admin-access: true` label" in event["message"]
        )
        metrics = operator.metrics()
        assert re.search(
            r'dynamic_resource_allocation_resourceclaim_creates_total\{admin_access="true",'
            r'owner_api_group="",owner_api_kind="Pod",status="failure"\} [1-9]',
            metrics,
        ), metrics
        # Retries with backoff repeat the same Event: counted, not duplicated.
        await asyncio.sleep(3)
        assert len(await _events(kube, env.namespace, "FailedResourceClaimCreation")) == 1
        await kube.patch(NAMESPACES, env.namespace, admin_label)
        claim = await env.claim_of("monitor", "gpu")
        assert claim.startswith("monitor-gpu-")


async def test_names_at_their_length_limits(kube, controllers, unique):
    controllers.use("ours")
    async with ClaimsEnv(kube, f"ln{unique}") as env:
        await env.template("t")
        pod_name = "p" * 253  # a Pod name is a DNS subdomain
        pod_claim = "c" * 63  # a pod claim name is a DNS label
        await env.pod(pod_name, {pod_claim: tmpl("t")})
        claim_name = await env.claim_of(pod_name, pod_claim)
        # 253*57//318 = 45 and 63*57//318 = 11, plus a hyphen and 5 random characters.
        assert re.fullmatch("p" * 45 + "-" + "c" * 11 + "[a-z0-9]{5}", claim_name), claim_name
        await env.wait_running(pod_name)


async def test_real_scheduler_allocates_across_nodes(kube, controllers, unique, cluster_objects):
    controllers.use("ours")
    async with ClaimsEnv(kube, f"sc{unique}", devices=2) as env:
        # A second pool on the other node: four Pods need both nodes.
        await cluster_objects.create(
            RESOURCE_SLICES,
            objects.resource_slice(
                f"slice2-{env.token}", env.driver, "lab-node-1", [objects.device("gpu-0"), objects.device("gpu-1")]
            ),
        )
        await env.template("t")
        for i in range(4):
            await env.pod(f"w{i}", {"gpu": tmpl("t")})
        used = set()
        for i in range(4):
            pod = await env.wait_running(f"w{i}")
            claim = await env.wait_claim(
                await env.claim_of(f"w{i}", "gpu"), lambda c: c.get("status", {}).get("allocation"), "allocated"
            )
            [result] = claim["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == pod["spec"]["nodeName"], "device must come from the Pod's node"
            used.add((result["pool"], result["device"]))
        assert len(used) == 4


async def _burst(kube, env: ClaimsEnv, count: int, prefix: str = "b") -> None:
    for i in range(count):
        await env.pod(f"{prefix}{i:03d}", {"gpu": tmpl("t")})


async def _all_running_with_one_claim_each(kube, env: ClaimsEnv, count: int, timeout: float) -> None:
    async def done() -> bool:
        pods = await kube.list(PODS, env.namespace)
        return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)

    await wait_for(done, timeout=timeout, interval=1, what=f"{count} Pods Running", describe=env.describe)
    claims = await kube.list(RESOURCE_CLAIMS, env.namespace)
    owners = Counter(
        (c["metadata"]["ownerReferences"][0]["uid"], c["metadata"]["annotations"][POD_CLAIM_ANNOTATION]) for c in claims
    )
    assert len(owners) == count and set(owners.values()) == {1}, (
        f"duplicates: {[k for k, v in owners.items() if v > 1]}"
    )
    pods = await kube.list(PODS, env.namespace)
    names = {c["metadata"]["name"] for c in claims}
    assert all(p["status"]["resourceClaimStatuses"][0]["resourceClaimName"] in names for p in pods)


async def _delete_all_and_expect_no_claim(kube, env: ClaimsEnv, timeout: float) -> None:
    await kube.request("DELETE", PODS.path(env.namespace))
    await env.wait_no_claims(timeout=timeout)


async def test_restart_under_load_never_duplicates_or_leaks(kube, controllers, unique, cluster_objects):
    """R1: 20 SIGKILLs spread over two bursts of 200 template Pods."""
    controllers.use("ours")
    operator = controllers.operators["claims"]
    count, rounds, kills_per_round = 200, 2, 10
    async with ClaimsEnv(kube, f"rs{unique}", devices=100) as env:
        await cluster_objects.create(
            RESOURCE_SLICES,
            objects.resource_slice(
                f"slice2-{env.token}", env.driver, "lab-node-1", [objects.device(f"gpu-{i}") for i in range(100)]
            ),
        )
        await env.template("t")
        rng = random.Random(unique)
        for round_ in range(rounds):
            burst = asyncio.create_task(_burst(kube, env, count, prefix=f"r{round_}-"))
            for _ in range(kills_per_round):
                await asyncio.sleep(rng.uniform(0.2, 1.5))
                operator.kill()
                await asyncio.to_thread(operator.start)
            await burst
            await _all_running_with_one_claim_each(kube, env, count, timeout=240)
            await _delete_all_and_expect_no_claim(kube, env, timeout=240)
        assert operator.starts >= 1 + rounds * kills_per_round
        assert not operator.errors(), operator.errors()[:5]


async def _scale_run(kube, controllers, mode: str, token: str, nodes: list[str], pods: int) -> float:
    controllers.use(mode)
    per_node = pods // len(nodes)
    async with ClaimsEnv(kube, token, devices=0) as env:
        for node in nodes:
            await kube.create(
                RESOURCE_SLICES,
                objects.resource_slice(
                    f"{node}-{token}", env.driver, node, [objects.device(f"gpu-{i}") for i in range(per_node)]
                ),
            )
        await env.template("t")
        started = time.monotonic()
        await _burst(kube, env, pods)
        await _all_running_with_one_claim_each(kube, env, pods, timeout=600)
        running = time.monotonic() - started
        await _delete_all_and_expect_no_claim(kube, env, timeout=600)
        total = time.monotonic() - started
        for node in nodes:
            await kube.delete(RESOURCE_SLICES, f"{node}-{token}")
        print(f"scale[{mode}]: {pods} Pods running in {running:.1f}s, all gone with their claims after {total:.1f}s")
        return total


async def test_scale_500_pods_on_10_nodes(lab, kube, controllers, unique):
    """500 Pods at once: every one Running with exactly one claim, none left after deletion. How
    fast against upstream's controller is a benchmark (`make bench`), not a test."""
    nodes = [f"scale-{unique}-{i}" for i in range(10)]
    for node in nodes:
        lab.create_node(node)
    for node in nodes:
        await asyncio.to_thread(lab.wait_node_schedulable, node)
    try:
        await _scale_run(kube, controllers, "ours", f"so{unique}", nodes, 500)
    finally:
        for node in nodes:
            lab.api("DELETE", f"/api/v1/nodes/{node}")


async def test_status_updates_send_raw_fields_back_as_they_are_stored(lab, kube, controllers, unique, tmp_path):
    """A shared claim whose allocation carries an opaque config written by kubectl (compact JSON,
    `<` and `&` escaped, UTF-8) and whose status.devices a driver wrote: when one Pod is done the
    operator updates the status with the allocation kept. The API server compares raw fields byte
    for byte (allocation is immutable; a status.devices change needs resourceclaims/driver), so
    the update passes only if they go back exactly as they were read (core/api/wirejson.py)."""
    import json

    import yaml

    controllers.use("ours")
    operator = controllers.operators["claims"]
    async with ClaimsEnv(kube, f"rw{unique}") as env:
        claim = objects.resource_claim("shared", env.device_class)
        claim["spec"]["devices"]["config"] = [
            {
                "requests": ["gpu"],
                "opaque": {
                    "driver": env.driver,
                    "parameters": {"kind": "Config", "note": "<x & y>", "owner": "équipe"},
                },
            }
        ]
        manifest = tmp_path / "claim.yaml"
        manifest.write_text(yaml.safe_dump(claim, allow_unicode=True))
        created = lab.kubectl("create", "-n", env.namespace, "-f", str(manifest), check=False)
        assert created.returncode == 0, created.stderr
        # One Pod after the other: two reservations at once race (the second PUT meets a 409 and is
        # retried, as upstream's), and that retry is not what this test looks for.
        await env.pod("a", {"gpu": {"resourceClaimName": "shared"}})
        await env.wait_claim("shared", lambda c: len(c["status"].get("reservedFor") or []) == 1, "reserved for a")
        await env.pod("b", {"gpu": {"resourceClaimName": "shared"}})
        await env.wait_running("a")
        await env.wait_running("b")
        allocated = await env.wait_claim(
            "shared", lambda c: len(c["status"].get("reservedFor") or []) == 2, "reserved for a and b"
        )
        [result] = allocated["status"]["allocation"]["devices"]["results"]
        await kube.apply(
            RESOURCE_CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "shared", "namespace": env.namespace},
                "status": {
                    "devices": [
                        {
                            "driver": result["driver"],
                            "pool": result["pool"],
                            "device": result["device"],
                            "data": {"uuid": "GPU-1", "note": "a<b"},
                        }
                    ]
                },
            },
            field_manager=env.driver,
            force=True,
            subresource="status",
        )
        await env.finish("a")
        done = await env.wait_claim(
            "shared",
            lambda c: [r["name"] for r in c["status"].get("reservedFor") or []] == ["b"],
            "reserved for b only",
        )
        assert done["status"]["allocation"] == allocated["status"]["allocation"]
        assert done["status"]["devices"][0]["data"] == {"uuid": "GPU-1", "note": "a<b"}
        failures = [
            line
            for line in operator.log.read_text().splitlines()
            if "sync failed" in line and f"{env.namespace}/shared" in line
        ]
        assert not failures, "\n".join(failures)
        assert (
            json.dumps(done["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"], ensure_ascii=False)
            == '{"kind": "Config", "note": "<x & y>", "owner": "équipe"}'
        )
