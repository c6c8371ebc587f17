"""The claims operator: upstream's resourceclaim-controller in Python.

``kopf run -m operators.claims`` registers its handlers; ``dra-operators run claims`` does the same
with the suite's logging.
"""

from . import operator  # noqa: F401  (registers the kopf handlers)
