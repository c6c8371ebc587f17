"""How the session splits over three pytest-xdist workers (`make test` runs ``-n 3 --dist
loadgroup --no-loadscope-reorder``).

Each module of the shared lab's tests (conftest in tests/integration; each worker starts its own
shared lab) is a group of its own: its module fixtures (a comparison run against upstream's
controllers, simulated node agents) are built once, and the modules spread over the workers. The
modules that start labs of their own with real nodes (kubelet, containerd, bridges) form one
group and run one after the other, never two at once. Each unit-test module is a group too.

xdist hands the groups out in the order they are collected (``--no-loadscope-reorder``; its
default orders them by number of tests, which put the unit tests first and the slowest modules,
those with one or a few long tests, last, where they left one worker alone for minutes). So the
longest go first (``MODULE_SECONDS``), and the unit modules, many and short, come last and fill
whichever worker is free. Without xdist the markers do nothing and everything runs in order.
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


# Seconds each group took in `make test` (build/test-report.xml, rounded), for the groups that
# take a minute or more; any other integration module counts 10 s a test. Only the order of the
# session depends on these: a stale figure costs minutes of wall time, never a result.
MODULE_SECONDS = {
    "own-labs": 750,
    "test_podgroup_vs_upstream.py": 270,
    "test_taints_operator.py": 200,
    "test_examples.py": 190,
    "test_leader_election.py": 170,
    "test_binding.py": 150,
    "test_claims_vs_upstream.py": 150,
    "test_claims_operator.py": 140,
    "test_explain.py": 120,
    "test_startup_memory.py": 90,
    "test_api_outage.py": 90,
    "test_bad_input.py": 80,
    "test_nodeagent.py": 60,
    "test_kubelet_plugin.py": 60,
}


def group_of(item: pytest.Item) -> str:
    if "unit" in item.path.parts:
        return "unit/" + item.path.name
    if item.path.name in OWN_LABS:
        return "own-labs"
    return item.path.name


def session_order(items: list[pytest.Item]) -> list[str]:
    """The groups, longest first; the unit modules last, in collection order."""
    tests: dict[str, int] = {}
    for item in items:
        tests[group_of(item)] = tests.get(group_of(item), 0) + 1

    def seconds(group: str) -> float:
        if group.startswith("unit/"):
            return 0.0
        return MODULE_SECONDS.get(group, 10.0 * tests[group])

    return sorted(tests, key=seconds, reverse=True)  # a stable sort: ties keep collection order


# First: xdist's worker reads the marks in its own hook of the same name (it appends the group
# to each node id there). tests/unit/test_xdist_groups.py checks that the groups hold.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {group: i for i, group in enumerate(session_order(items))}
    items.sort(key=lambda item: rank[group_of(item)])  # stable: a module's tests keep their order
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
