"""The lab: a real Kubernetes control plane (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager, kwok) started as local processes on 127.0.0.1."""

from .cluster import Lab, LabOptions

__all__ = ["Lab", "LabOptions"]
