"""pools.slices_by_node: the slices a Node's ``gather_pools`` takes, indexed once for all Nodes."""

from operators.core.dra.pools import gather_pools, slices_by_node


def node(name: str, labels: dict | None = None) -> dict:
    return {"metadata": {"name": name, "labels": labels or {}}}


def slice_(name: str, pool: str, generation: int = 1, **spec) -> dict:
    devices = [{"name": f"{name}-d{i}"} for i in range(2)]
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": "d.example.com",
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": 2},
            "devices": devices,
            **spec,
        },
    }


SELECTOR = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}]}
SLICES = [
    slice_("n1-a", "n1", nodeName="n1"),
    slice_("shared-all-a", "shared", allNodes=True),
    slice_("n2-a", "n2", nodeName="n2"),
    slice_("rack-a", "rack", nodeSelector=SELECTOR),
    slice_("n1-b", "n1", nodeName="n1"),
    slice_("shared-all-b", "shared", allNodes=True),
    slice_("n1-old", "n1", generation=0, nodeName="n1"),
    slice_("n3-a", "n3", nodeName="n3"),
]


def pool_view(pools) -> list:
    return [(p.driver, p.name, [s["metadata"]["name"] for s in p.slices]) for p in pools]


def test_each_node_gets_the_pools_it_would_get_from_every_slice():
    slices_for = slices_by_node(SLICES)
    for n in (node("n1", {"rack": "a"}), node("n2"), node("n3", {"rack": "a"}), node("n9")):
        name = n["metadata"]["name"]
        assert pool_view(gather_pools(n, slices_for(name))) == pool_view(gather_pools(n, SLICES)), name


def test_a_node_gets_its_own_and_the_shared_slices_in_the_order_given():
    names = [s["metadata"]["name"] for s in slices_by_node(SLICES)("n1")]
    assert names == ["n1-a", "shared-all-a", "rack-a", "n1-b", "shared-all-b", "n1-old"]
