"""Fixtures for tests on the lab: one control plane per test session, a namespace per test.

kwok manages the lab's Nodes; they carry no kwok taint, so test Pods need no toleration.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from operators.core.api.kube import ApiError, Kube
from operators.core.api.resources import NAMESPACES, SERVICE_ACCOUNTS, Resource
from operators.lab import Lab

from .labs import client_of, running_lab
from .operator_process import OperatorProcess
from .waiting import wait_for

LAB_NODES = 2


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    """A lab of our own for this session, torn down at the end (and killed with pytest if it dies)."""
    with running_lab("", tmp_path_factory.mktemp("lab"), nodes=LAB_NODES) as lab:
        yield lab


@pytest.fixture(scope="module")
def fault_lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Lab:
    """A lab of this test module's own, to break without disturbing the session's ``lab``:

    - ``fault_lab.restart(component, downtime=0.0, kill=False)``: etcd, kube-apiserver,
      kube-controller-manager, kube-scheduler, kwok or toxiproxy, same ports and data;
    - ``fault_lab.compact()``: etcd compacted and kube-apiserver restarted, so watches from
      older resourceVersions get 410 Gone;
    - ``fault_lab.net``: faults between clients given ``fault_lab.kubeconfig_via_proxy(identity)``
      (or ``fault_lab.via_proxy(any_kubeconfig)``) and kube-apiserver: ``cut()``,
      ``refuse(seconds)``, ``black_hole(seconds)``, ``latency(ms, jitter, seconds)``, ``heal()``,
      and the context managers ``refusing()``, ``black_holed()``, ``slowed(ms)``.

    One Node (``lab-node-0``); the lab, and any fault a test leaves behind, ends with the module.
    """
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    with running_lab(f"-{module}", tmp_path_factory.mktemp(f"fault-lab-{module}"), nodes=1) as lab:
        yield lab


@pytest.fixture(scope="session")
async def kube(lab: Lab) -> Kube:
    async with client_of(lab) as client:
        yield client


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps cluster-scoped names (drivers, nodes, classes) apart per test."""
    return uuid.uuid4().hex[:6]


@pytest.fixture
async def namespace(kube: Kube, unique: str) -> str:
    name = f"t-{unique}"
    await kube.create(NAMESPACES, {"metadata": {"name": name}})
    # The ServiceAccount admission plugin rejects Pods until the controller made "default".
    await wait_for(
        lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", name), timeout=30, what=f"ServiceAccount {name}/default"
    )
    yield name
    await kube.delete(NAMESPACES, name)


class ClusterObjects:
    """Cluster-scoped objects a test created, deleted when it ends."""

    def __init__(self, kube: Kube):
        self.kube = kube
        self.created: list[tuple[Resource, str]] = []

    async def create(self, res: Resource, body: dict) -> dict:
        obj = await self.kube.create(res, body)
        self.created.append((res, obj["metadata"]["name"]))
        return obj

    async def cleanup(self) -> None:
        for res, name in reversed(self.created):
            try:
                await self.kube.delete(res, name)
            except ApiError as e:
                if not e.not_found:
                    raise


@pytest.fixture
async def cluster_objects(kube: Kube) -> ClusterObjects:
    objects = ClusterObjects(kube)
    yield objects
    await objects.cleanup()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


class Controllers:
    """Which claim/taint controllers run: upstream's (inside kube-controller-manager), ours
    (operator processes), or none. Never both at once."""

    def __init__(self, lab: Lab, operators: dict[str, OperatorProcess]):
        self.lab = lab
        self.operators = operators
        self.mode = "none"

    def use(self, mode: str, fresh: bool = False) -> None:
        """``fresh``: restart the chosen controllers even when they already run, so that their
        metrics count only what follows (kube-controller-manager stays up across test modules
        otherwise, its counters holding what earlier modules did)."""
        if mode == self.mode and not fresh:
            return
        for operator in self.operators.values():
            operator.stop()
        if fresh and mode == "upstream" or self.lab.upstream_controllers != (mode == "upstream"):
            self.lab.restart_controller_manager(upstream_controllers=mode == "upstream")
        if mode == "ours":
            for operator in self.operators.values():
                operator.start()
        self.mode = mode

    def stop(self) -> None:
        for operator in self.operators.values():
            operator.stop()


@pytest.fixture(scope="session")
def controllers(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Controllers:
    logs = tmp_path_factory.mktemp("operator-logs")
    switch = Controllers(
        lab,
        {
            "claims": OperatorProcess(["claims"], lab.kubeconfig, logs),
            "taints": OperatorProcess(["taints"], lab.kubeconfig, logs),
        },
    )
    try:
        yield switch
    finally:
        switch.stop()
