"""Which Nodes a Pod may use and which Nodes a ResourceSlice's devices reach, as the scheduler
decides it (pure functions over plain dicts).

- ``node_selector_matches``: ``nodeaffinity.NewNodeSelector(...).Match``
  (k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go): terms are ORed,
  a term's requirements ANDed, a term without requirements matches nothing.
- ``pod_node_problem``: the scheduler's filters that run before DynamicResources and depend on
  the Node alone: NodeUnschedulable, NodeName, TaintToleration, NodeAffinity
  (k8s.io/kubernetes/pkg/scheduler/framework/plugins/*). Resources, ports, volumes and
  inter-Pod rules are not looked at.
- ``node_matches``: ``NodeMatches`` of the structured allocator
  (k8s.io/dynamic-resource-allocation/structured/internal/experimental/pools_experimental.go).
"""

from __future__ import annotations

import json
from typing import Any

from .tolerations import describe_taint, untolerated

Obj = dict[str, Any]

UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _requirement_matches(requirement: Obj, values_of: dict[str, str]) -> bool:
    key, operator = requirement.get("key", ""), requirement.get("operator", "")
    values = requirement.get("values") or []
    present = key in values_of
    value = values_of.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        try:
            have, bound = int(value or ""), int(values[0])
        except (ValueError, IndexError):
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def node_selector_matches(selector: Obj | None, node: Obj) -> bool:
    """``v1.NodeSelector`` against a Node (labels, and the field ``metadata.name``)."""
    if selector is None:
        return False
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions, match_fields = term.get("matchExpressions") or [], term.get("matchFields") or []
        if not expressions and not match_fields:
            continue
        if all(_requirement_matches(r, labels) for r in expressions) and all(
            _requirement_matches(r, fields) for r in match_fields
        ):
            return True
    return False


def node_matches(node: Obj | None, node_name: str, all_nodes: bool, selector: Obj | None) -> bool:
    """``NodeMatches``: a node name, all nodes, or a node selector (in that order)."""
    if node_name:
        return node is not None and node["metadata"]["name"] == node_name
    if all_nodes:
        return True
    if selector is not None:
        return node is not None and node_selector_matches(selector, node)
    return False


def slice_node_selection(spec: Obj) -> str:
    """How a slice names its nodes, for messages."""
    if spec.get("nodeName"):
        return f"node {spec['nodeName']}"
    if spec.get("allNodes"):
        return "all nodes"
    if spec.get("nodeSelector") is not None:
        return "a node selector"
    if spec.get("perDeviceNodeSelection"):
        return "per-device node selection"
    return "no node"


def device_reaches(spec: Obj, device: Obj, node: Obj) -> bool:
    """Whether a device of this slice can be used on ``node`` (the slice's node selection, or
    the device's own with ``perDeviceNodeSelection``)."""
    return node_matches(node, *_selection(spec, device))


def _selection(spec: Obj, device: Obj) -> tuple[str, bool, Obj | None]:
    """The node name, all-nodes flag and node selector that apply to a device of this slice."""
    where = device if spec.get("perDeviceNodeSelection") else spec
    return where.get("nodeName") or "", bool(where.get("allNodes")), where.get("nodeSelector")


class NodeReach:
    """``device_reaches`` over a list of Nodes at once: the names of those a device reaches, in
    the list's order. A node-local slice (nearly all of them) is answered by its node's name, an
    all-nodes one by the whole list, a node selector once per distinct selector; looping over
    every Node for every device made ``kubectl dra explain`` grow with Nodes times devices
    (bench/RESULTS.md, issue 32)."""

    def __init__(self, nodes: list[Obj]):
        self.nodes = nodes
        self.names = tuple(n["metadata"]["name"] for n in nodes)
        self._known = set(self.names)
        self._by_selector: dict[str, tuple[str, ...]] = {}

    def of(self, spec: Obj, device: Obj) -> tuple[str, ...]:
        name, all_nodes, selector = _selection(spec, device)
        if name:
            return (name,) if name in self._known else ()
        if all_nodes:
            return self.names
        if selector is None:
            return ()
        key = json.dumps(selector, sort_keys=True)
        if key not in self._by_selector:
            self._by_selector[key] = tuple(
                n["metadata"]["name"] for n in self.nodes if node_selector_matches(selector, n)
            )
        return self._by_selector[key]


def pod_node_problem(pod: Obj, node: Obj) -> str | None:
    """Why the scheduler's node filters reject ``node`` for ``pod``, or None."""
    spec = pod.get("spec") or {}
    node_spec = node.get("spec") or {}
    name = node["metadata"]["name"]
    tolerations = spec.get("tolerations") or []
    # NodeUnschedulable (node_unschedulable.go)
    if node_spec.get("unschedulable") and untolerated([UNSCHEDULABLE_TAINT], tolerations):
        return f"node {name} is unschedulable (cordoned)"
    # NodeName (node_name.go)
    if spec.get("nodeName") and spec["nodeName"] != name:
        return f"the Pod's nodeName is {spec['nodeName']}"
    # TaintToleration (taint_toleration.go): the first untolerated NoSchedule/NoExecute taint
    if taints := untolerated(node_spec.get("taints") or [], tolerations):
        return f"node {name} has the taint {describe_taint(taints[0])} that the Pod does not tolerate"
    # NodeAffinity (node_affinity.go): nodeSelector, then required node affinity
    labels = node["metadata"].get("labels") or {}
    for key, value in (spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"node {name} does not match the Pod's nodeSelector {key}={value}"
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is not None and not node_selector_matches(required, node):
        return f"node {name} does not match the Pod's required node affinity"
    return None
