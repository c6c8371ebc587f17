"""kopf configured as the frame the operators run in, and nothing more.

kopf runs each operator's start-up, clean-up and liveness probe; it watches nothing (the
informers' reflectors do, ``machinery.watch``), so it adds no finalizer, no annotation and no
status of its own to any object, and posts no Events (the operators post Events with
upstream's reasons themselves).
"""

from __future__ import annotations

import kopf


def quiet(settings: kopf.OperatorSettings) -> None:
    settings.posting.enabled = False
    settings.peering.standalone = True  # HA is a Lease (leader election), not kopf peering
    # No watching of CustomResourceDefinitions for new resources: nothing is served by kopf, and
    # the operators' RBAC grants nothing on CRDs.
    settings.scanning.disabled = True
