"""How the session splits over two pytest-xdist workers (`make test` runs ``-n 2 --dist loadgroup``).

Most integration tests share one lab (conftest in tests/integration); a few modules start labs of
their own (faults, real nodes, the deployed image). Each group runs in one worker, so the shared lab
is started once and the own-lab modules run one after the other beside it: two streams of about
equal length instead of one. Without xdist the markers do nothing and everything runs in order.
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
    return "own-labs" if item.path.name in OWN_LABS or "unit" in item.path.parts else "shared-lab"


# First: xdist's worker reads the marks in its own hook of the same name (it appends the group
# to each node id there). tests/unit/test_xdist_groups.py checks that the groups hold.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
