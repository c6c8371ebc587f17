"""kopf's own connection, sent where the operators' API client goes.

kopf keeps a connection of its own beside ``Kube`` (at start it reads the API server's discovery).
Its service-account login names the server ``https://kubernetes.default.svc``, a name only cluster
DNS resolves; without DNS (a node agent starting on a booting node before CoreDNS runs, the lab's
real nodes) kopf gives up after nine attempts, about a minute, and stops the whole process. In a
Pod the server is the one client-go's ``rest.InClusterConfig`` takes, and ``core.api.kubeconfig``
too: ``KUBERNETES_SERVICE_HOST`` and ``KUBERNETES_SERVICE_PORT``. Outside a Pod, kopf reads the
kubeconfig as ``Kube`` does (``KUBECONFIG``, else ``~/.kube/config``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from ..api.kubeconfig import kubeconfig_files

Login = Callable[..., kopf.ConnectionInfo | None]


def in_cluster_server(env: Mapping[str, str]) -> str | None:
    """``https://HOST:PORT`` of the API server's Service, from a Pod's environment (None outside one)."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        return None
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def connection(
    settings: kopf.OperatorSettings,
    *,
    env: Mapping[str, str] = os.environ,
    service_account: Login = kopf.login_with_service_account,
    kubeconfig: Login = kopf.login_with_kubeconfig,
    **kwargs: Any,
) -> kopf.ConnectionInfo | None:
    """kopf's login handler: the kubeconfig where ``Kube`` would read one, else the Pod's
    ServiceAccount at the Service's address."""
    if env.get("KUBECONFIG") or any(path.exists() for path in kubeconfig_files()):
        return kubeconfig(settings=settings, **kwargs)
    info = service_account(settings=settings, **kwargs)
    server = in_cluster_server(env)
    if info is None or server is None:
        return info
    return dataclasses.replace(info, server=server)
