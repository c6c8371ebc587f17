"""``explain``: why a Pod is pending and which device it got, claim by claim.

``analysis`` evaluates requests as the scheduler does (pure), ``story`` tells each claim's story
(pure), ``render`` prints it, ``fetch`` reads the cluster.
"""
