"""Fixtures for tests on the lab: one control plane per test session, a namespace per test.

kwok manages the lab's Nodes; they carry no kwok taint, so test Pods need no toleration.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from operators.core.kube import ApiError, Kube
from operators.core.resources import NAMESPACES, SERVICE_ACCOUNTS, Resource
from operators.lab import Lab, LabOptions

from .operator_process import OperatorProcess

from .waiting import wait_for

LAB_NODES = 2


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Lab:
    """A lab of our own for this session, torn down at the end (and killed with pytest if it dies)."""
    run_dir = tmp_path_factory.mktemp("lab")
    lab = Lab(LabOptions(name=f"pytest-{os.getpid()}", nodes=LAB_NODES, run_dir=run_dir),
              log=lambda message: print(message, flush=True))
    lab.start()
    try:
        yield lab
    finally:
        lab.stop()


@pytest.fixture(scope="session")
async def kube(lab: Lab) -> Kube:
    client = await Kube.connect(str(lab.kubeconfig))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps cluster-scoped names (drivers, nodes, classes) apart per test."""
    return uuid.uuid4().hex[:6]


@pytest.fixture
async def namespace(kube: Kube, unique: str) -> str:
    name = f"t-{unique}"
    await kube.create(NAMESPACES, {"metadata": {"name": name}})
    # The ServiceAccount admission plugin rejects Pods until the controller made "default".
    await wait_for(lambda: kube.get_or_none(SERVICE_ACCOUNTS, "default", name),
                   timeout=30, what=f"ServiceAccount {name}/default")
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

    def __init__(self, lab: Lab, operators: dict[str, "OperatorProcess"]):
        self.lab = lab
        self.operators = operators
        self.mode = "none"

    def use(self, mode: str) -> None:
        if mode == self.mode:
            return
        for operator in self.operators.values():
            operator.stop()
        if self.lab.upstream_controllers != (mode == "upstream"):
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
    switch = Controllers(lab, {"claims": OperatorProcess(["claims"], lab.kubeconfig, logs),
                               "taints": OperatorProcess(["taints"], lab.kubeconfig, logs)})
    try:
        yield switch
    finally:
        switch.stop()
