"""Which device metadata API versions (KEP-5304) a kubelet plugin may write, as upstream's helper
decides it (k8s.io/dynamic-resource-allocation@v0.37.1, kubeletplugin/draplugin.go, Start with
``EnableDeviceMetadata``): only known versions, and never without the latest one, so a consumer
built against the newest API always finds its version in the stream."""

from __future__ import annotations

GROUP = "metadata.resource.k8s.io"
V1BETA1, V1ALPHA1 = "v1beta1", "v1alpha1"
VERSIONS = (V1BETA1, V1ALPHA1)  # newest first
LATEST = V1BETA1


def parse_versions(text: str) -> tuple[str, ...]:
    """``"v1beta1,v1alpha1"`` -> the versions in the order given; "" and "off" -> none."""
    if text.strip().lower() == "off":
        return ()
    return tuple(v.strip() for v in text.split(",") if v.strip())


def check_versions(versions: tuple[str, ...]) -> str | None:
    """Why upstream's helper would refuse to start with these versions, or None."""
    unknown = [v for v in versions if v not in VERSIONS]
    if unknown:
        return f"{', '.join(map(repr, unknown))} is not a metadata version (known: {', '.join(VERSIONS)})"
    if len(set(versions)) != len(versions):
        return "a version is listed twice"
    if versions and LATEST not in versions:
        return f"the latest metadata version {LATEST} must be among them"
    return None
