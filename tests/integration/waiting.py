"""Waiting for cluster state in tests, with failure messages that show what the cluster had."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from operators.core.api.kube import ApiError, Kube
from operators.core.api.resources import EVENTS, PODS, RESOURCE_CLAIMS, Resource


async def describe_namespace(kube: Kube, namespace: str) -> str:
    """Pods, claims and Events of ``namespace``, compactly, for a failure message."""
    lines = [f"--- namespace {namespace}"]
    for res in (PODS, RESOURCE_CLAIMS):
        for obj in await kube.list(res, namespace):
            meta, status = obj["metadata"], obj.get("status", {})
            lines.append(f"{res.plural}/{meta['name']}: status={json.dumps(status, sort_keys=True)[:1500]}")
    for event in await kube.list(EVENTS, namespace):
        obj = event.get("involvedObject", {})
        lines.append(
            f"event {event.get('type')} {event.get('reason')} {obj.get('kind')}/{obj.get('name')}: "
            f"{event.get('message')}"
        )
    return "\n".join(lines)


async def wait_for(
    check: Callable[[], Awaitable[Any]],
    *,
    timeout: float = 60.0,
    interval: float = 0.25,
    what: str = "condition",
    describe: Callable[[], Awaitable[str]] | None = None,
) -> Any:
    """Poll ``check`` until it returns something truthy, and return that.

    On timeout, fail with ``what``, the last value or error seen, and ``describe()``.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await check()
            if last:
                return last
        except ApiError as e:
            last = e
        if time.monotonic() > deadline:
            context = await describe() if describe else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}\n{context}")
        await asyncio.sleep(interval)


async def wait_for_object(
    kube: Kube,
    res: Resource,
    name: str,
    namespace: str | None,
    predicate: Callable[[dict], Any],
    *,
    timeout: float = 60.0,
    what: str | None = None,
) -> dict:
    """Wait until the object exists and ``predicate(obj)`` holds; return the object."""

    async def check() -> dict | None:
        obj = await kube.get_or_none(res, name, namespace)
        return obj if obj is not None and predicate(obj) else None

    async def describe() -> str:
        obj = await kube.get_or_none(res, name, namespace)
        text = f"{res.plural}/{name}: {json.dumps(obj, sort_keys=True)[:4000]}"
        return text + ("\n" + await describe_namespace(kube, namespace) if namespace else "")

    return await wait_for(check, timeout=timeout, what=what or f"{res.plural}/{name}", describe=describe)


async def wait_gone(
    kube: Kube, res: Resource, name: str, namespace: str | None = None, *, timeout: float = 120.0
) -> None:
    """Wait until the object is gone from the API (a deletion finished, finalizers and all)."""

    async def gone() -> bool:
        return await kube.get_or_none(res, name, namespace) is None

    where = f"{namespace}/" if namespace else ""
    await wait_for(gone, timeout=timeout, what=f"{res.plural}/{where}{name} gone")
