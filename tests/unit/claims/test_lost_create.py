"""A claim create whose answer was lost (5xx, a broken connection) may have been carried out: the
claims operator looks for that claim before creating it again, per pod claim. Another claim of
the same Pod, found or created meanwhile, does not settle it."""

import copy

import pytest

from operators.claims.controller import ClaimsController
from operators.core.api.kube import ApiError
from operators.core.api.resources import PODS, RESOURCE_CLAIMS
from operators.core.machinery.workqueue import RetryableError
from tests.fakeapi import FakeApi

TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "t", "namespace": "ns", "uid": "u-t", "resourceVersion": "1"},
    "spec": {"spec": {"devices": {"requests": []}}},
}
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ns", "uid": "u-p", "resourceVersion": "10"},
    "spec": {
        "resourceClaims": [
            {"name": "a", "resourceClaimTemplateName": "t"},
            {"name": "b", "resourceClaimTemplateName": "t"},
        ]
    },
    "status": {},
}


class Kube:
    """The fake API server, where creates of pod claim "b" fail with 503 until ``healthy``; the
    API server did carry out the first one (a list shows it)."""

    def __init__(self):
        self.api = FakeApi({PODS: [POD]})
        self.healthy = False
        self.api.prepend_reactor("create", "resourceclaims", self._create)

    def _create(self, action):
        if action.obj["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "b" and not self.healthy:
            self.api.track(action)
            raise ApiError(503, {"reason": "ServiceUnavailable", "message": "etcd leader changed"})

    @property
    def created(self) -> list[str]:
        return [
            a.obj["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"]
            for a in self.api.actions_of("create", "resourceclaims")
        ]

    @property
    def lists(self) -> int:
        return len(self.api.actions_of("list", "resourceclaims"))


async def test_only_the_claim_whose_create_was_lost_is_looked_for_and_it_is_not_made_twice():
    kube = Kube()
    controller = ClaimsController(kube.api)
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    controller.on_pod(copy.deepcopy(POD), False)
    with pytest.raises(RetryableError, match="outcome unknown"):
        await controller.sync_pod("ns", "p")  # "a" created (its claim cached), "b" lost its answer
    assert controller._uncertain_creates == {"u-p": {"b"}}
    kube.healthy = True
    await controller.sync_pod("ns", "p")  # "a" is found in the cache; "b" is looked for: found
    assert kube.created == ["a", "b"] and kube.lists == 1 and controller._uncertain_creates == {}
    assert len(kube.api.objects(RESOURCE_CLAIMS)) == 2  # not made twice
