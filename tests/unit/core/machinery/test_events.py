"""EventRecorder.post: a sync does not wait for its Event; Events go out in order, a failing one
does not stop the others, and a full queue drops new ones (as client-go's broadcaster)."""

import asyncio

import pytest
from structlog.testing import capture_logs

from operators.core.api.resources import EVENTS
from operators.core.machinery import events
from operators.core.machinery.events import NORMAL, EventRecorder
from tests.fakeapi import FakeApi, status_error


class SlowKube(FakeApi):
    """Answers each create only when the test lets it; the third create fails. ``created``:
    the reasons of the Events as their creates were answered."""

    def __init__(self):
        super().__init__()
        self.created: list[str] = []
        self.gate = asyncio.Event()
        self.prepend_reactor("create", "events", self._create)
        self.prepend_reactor("patch", "events", self._patch)

    async def _create(self, action):
        await self.gate.wait()
        if len(self.created) == 2 and action.obj["reason"] == "Third":
            self.created.append("failed")
            raise RuntimeError("API server said no")
        self.created.append(action.obj["reason"])

    def _patch(self, action):
        raise AssertionError("no repeat in these tests")


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}}


async def test_post_returns_before_the_request_and_events_go_out_in_order():
    kube = SlowKube()
    recorder = EventRecorder(kube, "test")
    for i, reason in enumerate(("First", "Second", "Third", "Fourth")):
        recorder.post(pod(f"p{i}"), NORMAL, reason, "message")
    await asyncio.sleep(0)
    assert kube.created == []  # nobody waited for an answer
    kube.gate.set()
    await recorder.flush()
    assert kube.created == ["First", "Second", "failed", "Fourth"]
    assert sorted(e["reason"] for e in kube.objects(EVENTS)) == ["First", "Fourth", "Second"]
    # A later post starts a new sender.
    recorder.post(pod("p9"), NORMAL, "Fifth", "message")
    await recorder.flush()
    assert kube.created[-1] == "Fifth"


async def test_a_full_queue_drops_new_events(monkeypatch):
    monkeypatch.setattr(events, "MAX_QUEUED", 3)
    kube = SlowKube()
    recorder = EventRecorder(kube, "test")
    for i in range(5):
        recorder.post(pod(f"p{i}"), NORMAL, f"R{i}", "message")
    # The sender took the first one off the queue only once it ran: three queued, two dropped.
    assert recorder.dropped == 2
    kube.gate.set()
    await recorder.flush()
    assert kube.created == ["R0", "R1", "R2"]


def forbidden(terminating: bool):
    """kube-apiserver's refusals: NamespaceLifecycle's for a namespace being deleted (with its
    cause), and RBAC's."""
    if terminating:
        message = "unable to create new content in namespace ns because it is being terminated"
        causes = [{"type": "NamespaceTerminating", "message": message, "field": "metadata.namespace"}]
        return status_error(403, "Forbidden", f'events "e" is forbidden: {message}', causes=causes)
    return status_error(403, "Forbidden", 'events is forbidden: User "x" cannot create resource "events"')


@pytest.mark.parametrize(("terminating", "level"), [(True, "debug"), (False, "warning")])
async def test_an_event_into_a_terminating_namespace_is_not_a_warning(terminating, level):
    kube = FakeApi()

    def refuse(action):
        raise forbidden(terminating)

    kube.prepend_reactor("create", "events", refuse)
    recorder = EventRecorder(kube, "test")
    with capture_logs() as logs:
        await recorder.event(pod("p"), NORMAL, "DeviceTaintManagerEviction", "message")
    [line] = [entry for entry in logs if entry["event"] == "could not post event"]
    assert line["log_level"] == level
    assert "403" in line["error"]
