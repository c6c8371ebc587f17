"""A template missing from the claims operator's cache is asked of the API server before the Pod
gets a FailedResourceClaimCreation Event: its watch event may trail the Pod's (seen once in the
PodGroup side-by-side scenario: template and PodGroup created back to back, a false Warning)."""

import pytest

from operators.claims.controller import ClaimsController
from operators.core.api.kube import ApiError, ConnectionLost
from operators.core.machinery.workqueue import RetryableError

TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ns", "uid": "u-t", "resourceVersion": "7"},
            "spec": {"spec": {"devices": {"requests": []}}}}


class Kube:
    """Answers GETs as the API server would: the stored object, 404, or a lost connection."""

    def __init__(self, answer):
        self.answer, self.gets = answer, []

    async def get(self, resource, name, namespace=None, subresource=None):
        self.gets.append((resource.plural, namespace, name))
        if isinstance(self.answer, Exception):
            raise self.answer
        if self.answer is None:
            raise ApiError(404, {"reason": "NotFound", "message": f'resourceclaimtemplates "{name}" not found'})
        return self.answer


async def test_a_template_the_watch_has_not_delivered_yet_is_found_and_cached():
    kube = Kube(TEMPLATE)
    controller = ClaimsController(kube)
    assert await controller._template("ns", "t") == TEMPLATE
    assert kube.gets == [("resourceclaimtemplates", "ns", "t")]
    assert controller.templates.get("ns/t") == TEMPLATE


async def test_a_template_that_does_not_exist_is_reported_missing():
    controller = ClaimsController(Kube(None))
    assert await controller._template("ns", "t") is None
    assert controller.templates.get("ns/t") is None


async def test_an_api_server_that_cannot_say_makes_the_sync_retry_without_an_event():
    for error in (ApiError(503, {"reason": "ServiceUnavailable"}), ConnectionLost("GET", "/x", OSError("reset"))):
        with pytest.raises(RetryableError):
            await ClaimsController(Kube(error))._template("ns", "t")
