"""The claims operator: upstream's resourceclaim-controller in Python.

``kopf run -m operators.claims.operator`` registers its handlers; ``dra-operators run claims`` does
the same with the suite's logging. Importing this package registers nothing.
"""
