"""A Pod whose sync failed is read afresh before the next: what unblocks it (its template) can
reach the claims operator before the Pod's own later change. The lab showed it once in
test_claims_vs_upstream's status_entry_without_name: the Pod's status said "no claim needed"
before the template was created, the template's event came first, and a claim was created."""

import copy

import pytest

from operators.claims.controller import ClaimsController
from operators.core.api.kube import ApiError
from operators.core.machinery.workqueue import RetryableError
from tests.fakeapi import FakeApi

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "skipper", "namespace": "ns", "uid": "u-pod", "resourceVersion": "10"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "later"}]},
    "status": {},
}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "later", "namespace": "ns", "uid": "u-t", "resourceVersion": "12"},
    "spec": {"spec": {"devices": {"requests": []}}},
}


class Kube(FakeApi):
    """The fake API server; ``created`` lists the plural of every create, ``unavailable`` makes
    GETs of Pods fail with 503."""

    def __init__(self):
        super().__init__()
        self.unavailable = False
        self.prepend_reactor("get", "pods", self._get_pod)

    def _get_pod(self, action):
        if self.unavailable:
            raise ApiError(503, {"reason": "ServiceUnavailable", "message": "etcd leader changed"})

    @property
    def created(self) -> list[tuple[str, dict]]:
        return [(a.resource, a.obj) for a in self.actions_of("create")]


async def test_a_status_written_before_the_template_is_seen_although_the_template_came_first():
    kube = Kube()
    controller = ClaimsController(kube)
    kube.add(POD)
    controller.on_pod(copy.deepcopy(POD), False)
    with pytest.raises(RetryableError, match="not found"):
        await controller.sync_pod("ns", "skipper")  # no template yet: a Warning Event and a retry
    assert [plural for plural, _ in kube.created] == ["events"]

    # Then, in this order on the API server: the Pod's status says no claim is needed, the
    # template is created. Only the template's watch event has arrived.
    kube.add(
        {
            **POD,
            "metadata": {**POD["metadata"], "resourceVersion": "11"},
            "status": {"resourceClaimStatuses": [{"name": "gpu"}]},
        }
    )
    kube.add(TEMPLATE)
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    await controller.sync_pod("ns", "skipper")
    assert [plural for plural, _ in kube.created] == ["events"], kube.created  # no claim
    assert controller.pods.get("ns/skipper")["status"]["resourceClaimStatuses"] == [{"name": "gpu"}]


async def test_a_pod_that_synced_fine_is_not_read_again():
    kube = Kube()
    controller = ClaimsController(kube)
    kube.add(TEMPLATE)
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    controller.on_pod(copy.deepcopy(POD), False)  # the API server has no such Pod: a GET would say so
    await controller.sync_pod("ns", "skipper")
    assert [plural for plural, _ in kube.created] == ["resourceclaims"]
    assert kube.actions_of("get", "pods") == []


async def test_an_api_server_that_cannot_answer_the_reread_makes_the_sync_retry_and_read_again():
    kube = Kube()
    controller = ClaimsController(kube)
    controller.on_pod(copy.deepcopy(POD), False)
    with pytest.raises(RetryableError):
        await controller.sync_pod("ns", "skipper")  # no template: the Pod is now stale

    kube.unavailable = True
    with pytest.raises(RetryableError, match="get pod ns/skipper"):
        await controller.sync_pod("ns", "skipper")
    assert "u-pod" in controller._stale_pods  # still to be read before the next try

    kube.unavailable = False  # the API server answers again: a new Pod by that name (another UID)
    kube.add({**POD, "metadata": {**POD["metadata"], "uid": "u-other"}})
    kube.add(TEMPLATE)
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    await controller.sync_pod("ns", "skipper")  # not this Pod any more: its own events will bring it
    assert [plural for plural, _ in kube.created] == ["events"] and "u-pod" not in controller._stale_pods
