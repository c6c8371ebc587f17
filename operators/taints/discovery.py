"""What the cluster serves that the taints controller depends on: the DeviceTaintRule version
(v1 from 1.37, v1beta2 or v1alpha3 before) and whether rules have a status subresource."""

from __future__ import annotations

from ..core.api.kube import Kube
from ..core.api.resources import DEVICE_TAINT_RULES, Resource


class RuleVersionNotServed(Exception):
    """The pinned version (``DRA_TAINTS_RULE_VERSION``) is not served: start-up fails with this."""


async def discover_rules(kube: Kube, pinned: str = "") -> tuple[Resource | None, bool]:
    """The DeviceTaintRule resource at the version the cluster prefers (or the pinned one, which
    must be served), and whether it has a status subresource (not before 1.35)."""
    rules: Resource | None
    if pinned:
        served = await kube.served_versions(DEVICE_TAINT_RULES.group, DEVICE_TAINT_RULES.plural)
        if pinned not in served:
            raise RuleVersionNotServed(
                f"DRA_TAINTS_RULE_VERSION={pinned}: the cluster serves DeviceTaintRules "
                f"as {', '.join(served) or 'nothing'}"
            )
        rules = DEVICE_TAINT_RULES.with_version(pinned)
    else:
        rules = await kube.preferred_version(DEVICE_TAINT_RULES)
    if rules is None:
        return None, False
    listing = await kube.request("GET", f"/apis/{rules.group_version}")
    names = {r.get("name") for r in listing.get("resources") or []}
    return rules, f"{rules.plural}/status" in names
