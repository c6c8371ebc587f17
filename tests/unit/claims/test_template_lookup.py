"""A template missing from the claims operator's cache is asked of the API server before the Pod
gets a FailedResourceClaimCreation Event: its watch event may trail the Pod's (seen once in the
PodGroup side-by-side scenario: template and PodGroup created back to back, a false Warning)."""

import pytest

from operators.claims.controller import ClaimsController
from operators.core.api.kube import ApiError, ConnectionLost
from operators.core.api.resources import RESOURCE_CLAIM_TEMPLATES
from operators.core.machinery.workqueue import RetryableError
from tests.fakeapi import FakeApi

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "t", "namespace": "ns", "uid": "u-t", "resourceVersion": "7"},
    "spec": {"spec": {"devices": {"requests": []}}},
}


def api(answer) -> FakeApi:
    """The API server holding ``answer`` (or nothing, None), or failing every GET with it."""
    fake = FakeApi()
    if isinstance(answer, Exception):
        fake.fail("get", "*", answer)
    elif answer is not None:
        fake.add(answer, RESOURCE_CLAIM_TEMPLATES)
    return fake


def gets(fake: FakeApi) -> list[tuple]:
    return [(a.resource, a.namespace, a.name) for a in fake.actions_of("get")]


async def test_a_template_the_watch_has_not_delivered_yet_is_found_and_cached():
    kube = api(TEMPLATE)
    controller = ClaimsController(kube)
    assert await controller._template("ns", "t") == TEMPLATE
    assert gets(kube) == [("resourceclaimtemplates", "ns", "t")]
    assert controller.templates.get("ns/t") == TEMPLATE


async def test_a_template_that_does_not_exist_is_reported_missing():
    controller = ClaimsController(api(None))
    assert await controller._template("ns", "t") is None
    assert controller.templates.get("ns/t") is None


async def test_an_api_server_that_cannot_say_makes_the_sync_retry_without_an_event():
    for error in (ApiError(503, {"reason": "ServiceUnavailable"}), ConnectionLost("GET", "/x", OSError("reset"))):
        with pytest.raises(RetryableError):
            await ClaimsController(api(error))._template("ns", "t")
