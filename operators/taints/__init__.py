"""The taints operator: upstream's device-taint-eviction-controller in Python, with guard rails.

``kopf run -m operators.taints`` registers its handlers; ``dra-operators run taints`` does the same
with the suite's logging. ``dra-operators taints preview`` (``operators.taints.preview``) only reads.
"""

from . import operator  # noqa: F401  (registers the kopf handlers)
