"""The node agent: the node's devices (NVML or a simulated inventory) as ResourceSlices,
with health taints. ``kopf run -m operators.nodeagent.operator`` or ``dra-operators run nodeagent``
registers its handlers; importing this package registers nothing."""
