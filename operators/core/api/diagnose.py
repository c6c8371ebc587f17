"""What went wrong when an operator could not start, in words a user can act on (pure).

An operator that cannot start exits non-zero with one message instead of a traceback: which
API server it tried (the address from the kubeconfig), what happened, and what to check.
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence

import aiohttp

from .kube import ApiError, ConnectionLost


def _short(text: object, limit: int = 300) -> str:
    """One line, at most ``limit`` characters (an HTML page answered instead of JSON stays short)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _where(kubeconfig: str | None) -> str:
    return f"KUBECONFIG ({kubeconfig})" if kubeconfig else "the in-cluster ServiceAccount configuration"


def kubeconfig_problem(kubeconfig: str | None, error: BaseException, missing: Sequence[str] = ()) -> str:
    """The kubeconfig (or the in-cluster configuration) could not be loaded; ``missing``: the
    files of KUBECONFIG that do not exist."""
    if kubeconfig and missing:
        return (
            f"KUBECONFIG={kubeconfig}: no such file {', '.join(missing)}; point KUBECONFIG at the cluster's "
            "kubeconfig file, or unset it inside a Pod (the ServiceAccount is used then)"
        )
    if kubeconfig:
        return (
            f"KUBECONFIG={kubeconfig} cannot be loaded: {type(error).__name__}: {error}; it must be a "
            "kubeconfig file (YAML with clusters, users and a current context)"
        )
    return (
        f"KUBECONFIG is not set and the in-cluster configuration cannot be loaded ({error}); "
        "set KUBECONFIG to a kubeconfig file, or run inside a Pod with a ServiceAccount"
    )


def start_failure(name: str, error: BaseException, host: str | None, kubeconfig: str | None) -> str:
    """Why operator ``name`` could not start and what to check, for the exit message."""
    server = f"the API server at {host}" if host else "the API server"
    prefix = f"{name} could not start: "
    if isinstance(error, ConnectionLost):
        cause = error.cause
        if isinstance(cause, aiohttp.ClientConnectorCertificateError) or isinstance(
            getattr(cause, "os_error", None), ssl.SSLCertVerificationError
        ):
            return (
                prefix + f"{server} presented a certificate that does not verify ({_short(cause)}); check the "
                f"server address and certificate-authority data in {_where(kubeconfig)}"
            )
        return (
            prefix + f"cannot reach {server} ({error.method} {error.path}: "
            f"{type(cause).__name__}: {_short(cause or 'no answer')}); check that the cluster is running and that "
            f"{_where(kubeconfig)} names its address and port, and that no proxy or firewall is in the way"
        )
    if isinstance(error, ApiError):
        what = _short(error)
        if error.status == 401:
            return (
                prefix + f"{server} does not accept our credentials ({what}); check the user (token or "
                f"client certificate) in {_where(kubeconfig)}"
            )
        if error.status == 403:
            return (
                prefix + f"{server} forbids it ({what}); grant the operator's RBAC (kustomize/base has "
                "one ServiceAccount and role per operator)"
            )
        if error.reason == "BadResponse" or (error.status == 404 and not isinstance(error.body.get("kind"), str)):
            return (
                prefix + f"{server} did not answer like a Kubernetes API server ({what}); check the "
                f"server address in {_where(kubeconfig)}"
            )
        if error.status == 404:
            return (
                prefix + f"{server} does not serve it ({what}); the operators need Kubernetes 1.34 or "
                "newer with resource.k8s.io/v1 (DRA) enabled"
            )
        return prefix + f"{server} answered {what}"
    return prefix + f"{type(error).__name__}: {_short(error, 1000)}"
