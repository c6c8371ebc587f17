"""A claim create whose answer was lost (5xx, a broken connection) may have been carried out: the
claims operator looks for that claim before creating it again, per pod claim. Another claim of
the same Pod, found or created meanwhile, does not settle it."""

import copy

import pytest

from operators.claims.controller import ClaimsController
from operators.core.api.kube import ApiError
from operators.core.machinery.workqueue import RetryableError

TEMPLATE = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "ns", "uid": "u-t", "resourceVersion": "1"},
            "spec": {"spec": {"devices": {"requests": []}}}}
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "ns", "uid": "u-p", "resourceVersion": "10"},
       "spec": {"resourceClaims": [{"name": "a", "resourceClaimTemplateName": "t"},
                                   {"name": "b", "resourceClaimTemplateName": "t"}]}, "status": {}}


class Kube:
    """Creates of pod claim "b" fail with 503 until ``healthy``; the API server did carry out
    the first one (``lists`` shows it)."""

    def __init__(self):
        self.created: list[str] = []
        self.lists = 0
        self.healthy = False
        self.carried_out: list[dict] = []

    async def create(self, resource, body, namespace=None):
        which = body["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"]
        claim = {**body, "metadata": {**body["metadata"], "name": f"p-{which}-{len(self.created)}",
                                      "namespace": "ns", "uid": f"u-c-{len(self.created)}", "resourceVersion": "20"}}
        self.created.append(which)
        if which == "b" and not self.healthy:
            self.carried_out.append(claim)
            raise ApiError(503, {"reason": "ServiceUnavailable", "message": "etcd leader changed"})
        return claim

    async def list(self, resource, namespace=None, keep=None, **_):
        self.lists += 1
        return [c for c in self.carried_out if keep is None or keep(c)]

    async def request(self, method, path, **_):  # the Pod's status patch
        return {**POD, "metadata": {**POD["metadata"], "resourceVersion": "11"}}


async def test_only_the_claim_whose_create_was_lost_is_looked_for_and_it_is_not_made_twice():
    kube = Kube()
    controller = ClaimsController(kube)
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    controller.on_pod(copy.deepcopy(POD), False)
    with pytest.raises(RetryableError, match="outcome unknown"):
        await controller.sync_pod("ns", "p")  # "a" created (its claim cached), "b" lost its answer
    assert controller._uncertain_creates == {"u-p": {"b"}}
    kube.healthy = True
    await controller.sync_pod("ns", "p")  # "a" is found in the cache; "b" is looked for: found
    assert kube.created == ["a", "b"] and kube.lists == 1 and controller._uncertain_creates == {}
