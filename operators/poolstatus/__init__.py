"""The poolstatus operator: upstream's resourcepoolstatusrequest-controller (KEP-5677) in Python.

``kopf run -m operators.poolstatus.operator`` registers its handlers; ``dra-operators run poolstatus``
does the same with the suite's logging. Importing this package registers nothing.
"""
