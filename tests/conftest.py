"""How the session splits over two pytest-xdist workers (`make test` runs ``-n 2 --dist loadgroup``).

Each module of the shared lab's tests (conftest in tests/integration; each worker starts its own
shared lab) is a group of its own: its module fixtures (a comparison run against upstream's
controllers, simulated node agents) are built once, and the modules spread over both workers. The
modules that start labs of their own with real nodes (kubelet, containerd, bridges) form one
group and run one after the other, never two at once; they go first, as the longest group, so
that the shorter ones fill the other worker meanwhile. The unit tests are one more group.
Without xdist the markers do nothing and everything runs in order.
"""

from __future__ import annotations

import pytest

# Modules whose tests never touch the shared lab (each starts the labs it needs), and the unit tests.
OWN_LABS = {
    "test_chaos.py",
    "test_lab_faults.py",
    "test_real_node.py",
    "test_image.py",
    "test_lab_deploy.py",
    "test_nodeagent_claim_status_policy.py",
    "test_lab_node_namespaces.py",
}


def group_of(item: pytest.Item) -> str:
    if "unit" in item.path.parts:
        return "unit"
    if item.path.name in OWN_LABS:
        return "own-labs"
    return item.path.name


# First: xdist's worker reads the marks in its own hook of the same name (it appends the group
# to each node id there). tests/unit/test_xdist_groups.py checks that the groups hold.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A stable sort: the own-lab modules first (xdist hands out groups in collection order).
    items.sort(key=lambda item: group_of(item) != "own-labs")
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
