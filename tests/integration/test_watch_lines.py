"""Pods without claims cost the claims and taints operators no JSON decoding: their watch lines
are dropped before they are parsed (core/machinery/watch.py). The danger of dropping is an informer
that hears nothing while the API server's resourceVersion moves on: its stale-watch check would
fail liveness and restart the operator in any cluster busy with other Pods. Here the check looks
every second (DRA_WATCH_SILENCE=4) while only plain Pods change, for four times that long."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

from operators.core.api.resources import NAMESPACES, PODS, RESOURCE_CLAIMS

from . import objects
from .claims_env import ClaimsEnv
from .operator_process import OperatorProcess
from .waiting import wait_for

SILENCE = 4.0


def _health(op: OperatorProcess) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{op.liveness_port}/healthz", timeout=5) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {"error": e.read().decode(errors="replace")}


def _total(health: dict, key: str) -> int:
    return sum(v.get(key, 0) for v in health.values() if isinstance(v, dict))


def _cached_claims(op: OperatorProcess) -> int:
    """The claims the operator has cached (its dynamic_resource_allocation_resource_claims gauge)."""
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in op.metrics().splitlines()
            if line.startswith("dynamic_resource_allocation_resource_claims{")
        )
    )


def _skipped(health: dict) -> int:
    return _total(health, "watch_lines_skipped")


async def test_plain_pods_are_not_parsed_and_the_watch_stays_alive(lab, kube, controllers, tmp_path, unique):
    controllers.use("none")
    op = OperatorProcess(["claims", "taints"], lab.kubeconfig, tmp_path, env={"DRA_WATCH_SILENCE": str(SILENCE)})
    op.start()
    try:
        async with ClaimsEnv(kube, f"wl{unique}") as env:
            status, before = _health(op)
            assert status == 200, before
            # Only plain Pods change, for 4 x DRA_WATCH_SILENCE: created, then deleted.
            deadline, n, seen = time.monotonic() + 4 * SILENCE, 0, []
            while time.monotonic() < deadline:
                name = f"plain-{n}"
                await kube.create(
                    PODS,
                    {**objects.pod(name, {}), "spec": {**objects.pod(name, {})["spec"], "schedulerName": "none"}},
                    env.namespace,
                )
                if n >= 3:
                    await kube.delete(PODS, f"plain-{n - 3}", env.namespace)
                n += 1
                seen.append(_health(op))
                assert op.proc.poll() is None, op.tail()
                await asyncio.sleep(0.25)
            await asyncio.sleep(SILENCE / 2)  # one more round of the stale check
            seen.append(_health(op))
            failed = [h for s, h in seen if s != 200]
            assert not failed, failed[:3]
            assert "silent for" not in op.log.read_text()
            # Both operators' Pod watches dropped the plain Pods' lines unparsed.
            assert _skipped(seen[-1][1]) - _skipped(before) >= 2 * n, (seen[-1][1], n)

            # And a Pod with a claim is still seen at once.
            await env.template("t")
            await env.pod("with-claim", {"gpu": {"resourceClaimTemplateName": "t"}}, scheduler="none")
            await env.claim_of("with-claim", "gpu")
            assert not op.errors(), op.errors()[:5]
    finally:
        op.stop()


async def test_every_watch_starts_where_its_list_ended(lab, kube, controllers, tmp_path, unique):
    """Each informer's reflector opens its watch at the resourceVersion of the start-up LIST
    (core/machinery/watch.py): every watch is open soon after start, and a claim deleted right
    after the operator listed it is seen to go (no second listing, no gap between the two)."""
    controllers.use("none")
    namespace = f"watch-start-{unique}"
    await kube.create(NAMESPACES, {"metadata": {"name": namespace}})
    op = OperatorProcess(["claims"], lab.kubeconfig, tmp_path)
    try:
        await kube.create(RESOURCE_CLAIMS, objects.resource_claim("early", "watch-start.example.com"), namespace)
        op.start()
        watches = 4  # resourceclaims, resourceclaimtemplates, podgroups, pods

        async def open_() -> bool:
            status, health = _health(op)
            return status == 200 and _total(health, "watching") >= watches

        async def describe() -> str:
            return f"healthz {_health(op)}"

        await wait_for(open_, timeout=60, what=f"the claims operator's {watches} watches open", describe=describe)
        cached = _cached_claims(op)
        await kube.delete(RESOURCE_CLAIMS, "early", namespace)

        async def gone() -> bool:
            return _cached_claims(op) == cached - 1

        await wait_for(gone, timeout=30, what="the deleted claim gone from the cache", describe=describe)
        assert not op.errors(), op.errors()[:5]
    finally:
        op.stop()
        await kube.delete(NAMESPACES, namespace)
