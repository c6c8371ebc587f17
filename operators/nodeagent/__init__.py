"""The node agent: the node's devices (NVML or a simulated inventory) as ResourceSlices,
with health taints. ``kopf run -m operators.nodeagent`` or ``dra-operators run nodeagent``."""

from . import operator  # noqa: F401  (registers the kopf handlers)
