"""The DeviceClasses shipped in config/ name the node agent's default drivers and are accepted
by the API server."""

from pathlib import Path

import yaml

from operators.core.api.resources import DEVICE_CLASSES
from operators.nodeagent.operator import DEFAULT_DRIVERS

CONFIG = Path(__file__).resolve().parents[2] / "config" / "deviceclasses"


def _classes() -> list[dict]:
    return [doc for path in sorted(CONFIG.glob("*.yaml")) for doc in yaml.safe_load_all(path.read_text()) if doc]


async def test_device_classes_match_defaults_and_validate(kube):
    classes = _classes()
    expressions = " ".join(s["cel"]["expression"] for c in classes for s in c["spec"]["selectors"])
    for driver in DEFAULT_DRIVERS.values():
        assert f"device.driver == '{driver}'" in expressions
    for body in classes:
        # Under a name of its own: other tests on the shared lab may have applied the class
        # already, and a dry-run create of an existing name is refused (409) before validation.
        name = f"check-{body['metadata']['name']}"
        created = await kube.create(
            DEVICE_CLASSES, {**body, "metadata": {**body["metadata"], "name": name}}, dry_run=True
        )
        assert created["metadata"]["name"] == name and created["spec"] == body["spec"]
