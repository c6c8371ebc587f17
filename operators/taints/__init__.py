"""The taints operator: upstream's device-taint-eviction-controller in Python, with guard rails.

``kopf run -m operators.taints.operator`` registers its handlers; ``dra-operators run taints`` does
the same with the suite's logging. Importing this package registers nothing, so that
``dra-operators taints preview`` (``operators.taints.preview``) only reads.
"""
