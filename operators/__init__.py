"""dra-operators: the Kubernetes DRA control plane in Python on kopf."""
