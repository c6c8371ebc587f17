"""A template that appears after its Pods: its watch event syncs the Pods waiting for it at once
(kubernetes#135835: upstream waited out their retry backoff, up to 1,000 s, before 1.37), and the
log says so, which is what test_claims_vs_upstream's template_after_pod checks on the lab."""

import copy

import pytest
from structlog.testing import capture_logs

from operators.claims.controller import POD_PREFIX, ClaimsController
from operators.core.api.resources import PODS, RESOURCE_CLAIMS
from operators.core.machinery.workqueue import RetryableError
from tests.fakeapi import FakeApi

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "early", "namespace": "ns", "uid": "u-pod", "resourceVersion": "10"},
    "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "late"}]},
    "status": {},
}
TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "late", "namespace": "ns", "uid": "u-t", "resourceVersion": "12"},
    "spec": {"spec": {"devices": {"requests": []}}},
}


class Queue:
    """The keys the handlers add (the work queue's producer side)."""

    def __init__(self):
        self.added: list[str] = []

    def add(self, key: str) -> None:
        self.added.append(key)


def synced(logs: list[dict]) -> list[tuple[str, int]]:
    return [(e["template"], e["pods"]) for e in logs if e["event"] == "template seen, syncing the Pods waiting for it"]


async def test_the_templates_event_syncs_the_pod_that_waits_for_it_and_says_so():
    kube = FakeApi()
    kube.add(POD)
    controller = ClaimsController(kube)
    controller.queue = queue = Queue()
    controller.on_pod(copy.deepcopy(POD), False)
    with pytest.raises(RetryableError, match="not found"):
        await controller.sync_pod("ns", "early")  # no template yet: retried later, with backoff
    queue.added.clear()

    kube.add(TEMPLATE)
    with capture_logs() as logs:
        controller.on_template(copy.deepcopy(TEMPLATE), False)
    assert queue.added == [POD_PREFIX + "ns/early"]  # now, not at the retry
    assert synced(logs) == [("ns/late", 1)]


async def test_a_template_whose_pods_have_their_claims_syncs_nothing_and_stays_quiet():
    kube = FakeApi()
    kube.add(TEMPLATE)
    kube.add(POD)
    controller = ClaimsController(kube)
    controller.queue = queue = Queue()
    controller.on_template(copy.deepcopy(TEMPLATE), False)
    controller.on_pod(copy.deepcopy(POD), False)
    await controller.sync_pod("ns", "early")  # creates the claim, records it in the Pod's status
    controller.on_pod(copy.deepcopy(kube.stored(PODS, "early", "ns")), False)
    for claim in kube.objects(RESOURCE_CLAIMS, "ns"):
        controller.on_claim(copy.deepcopy(claim), False)
    queue.added.clear()

    with capture_logs() as logs:  # a relist or a label change delivers the template again
        controller.on_template(copy.deepcopy(TEMPLATE), False)
    assert queue.added == [] and synced(logs) == []
