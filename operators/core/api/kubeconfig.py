"""Where the API server is and how to authenticate to it: a kubeconfig, or the Pod's ServiceAccount.

This is the part of kubernetes-asyncio (and of client-go's ``clientcmd`` and ``rest.InClusterConfig``)
the suite uses, kept here so that no operator process imports that package: kopf imports
kubernetes-asyncio's 768 generated model classes whenever it is installed (about 45 MiB of every
process), and we never used more of it than this.

Supported, with client-go's semantics:

- KUBECONFIG as a list of files merged as kubectl merges them (the first file to set a name wins,
  ``current-context`` from the first file that has one); ``~/.kube/config`` without it;
- per cluster: ``server``, ``certificate-authority`` (a path, relative to its file) or
  ``-data``, ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``;
- per user: ``token``, ``tokenFile`` (read again each minute), ``client-certificate``/``-key``
  (paths or ``-data``), ``username``/``password``, and ``exec`` credential plugins
  (client.authentication.k8s.io v1 and v1beta1, cached until ``expirationTimestamp``, run
  again after a 401);
- in a Pod: ``KUBERNETES_SERVICE_HOST``/``_PORT``, the ServiceAccount token (re-read each
  minute, as client-go's ``CachedFileTokenSource`` does: bound tokens rotate) and ``ca.crt``.

Not supported: ``auth-provider`` (gcp, azure, oidc; removed from kubectl in 1.26 in favour of
exec plugins): the error says so.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..dra.metatime import parse_time

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_PERIOD = 60.0  # client-go re-reads a token file after a minute
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT = 60.0


class KubeconfigError(ValueError):
    """The configuration cannot be used; the message names the file, the entry and the fix."""


class Credentials:
    """What goes into each request's Authorization header; the TLS client certificate, if any,
    sits in the SSL context instead. ``refresh`` after a 401 (a rotated token, an expired exec
    credential)."""

    async def headers(self) -> dict[str, str]:
        return {}

    def refresh(self) -> None:
        """Forget any cached credential; the next ``headers`` fetches a fresh one."""


@dataclass
class StaticToken(Credentials):
    token: str

    async def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@dataclass
class BasicAuth(Credentials):
    username: str
    password: str

    async def headers(self) -> dict[str, str]:
        raw = f"{self.username}:{self.password}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


@dataclass
class TokenFile(Credentials):
    """A token read from a file, read again after ``period`` seconds (rotation)."""

    path: Path
    period: float = TOKEN_FILE_PERIOD
    _token: str = ""
    _read_at: float = -1e9

    async def headers(self) -> dict[str, str]:
        if not self._token or time.monotonic() - self._read_at >= self.period:
            try:
                self._token = self.path.read_text().strip()
            except OSError as e:
                if not self._token:
                    raise KubeconfigError(f"cannot read the token file {self.path}: {e}") from e
            self._read_at = time.monotonic()
        return {"Authorization": f"Bearer {self._token}"}

    def refresh(self) -> None:
        self._read_at = -1e9


@dataclass
class ExecPlugin(Credentials):
    """An exec credential plugin (KEP-541), run when there is no unexpired credential."""

    command: str
    args: list[str]
    env: dict[str, str]
    api_version: str
    base_dir: Path
    cluster_info: dict[str, Any] | None = None
    ssl_context: ssl.SSLContext | None = None  # receives a client certificate the plugin returns
    timeout: float = EXEC_TIMEOUT  # a plugin that hangs (waiting for a browser, a lock) is killed
    _token: str = ""
    _expires: datetime.datetime | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def headers(self) -> dict[str, str]:
        async with self._lock:
            if not self._valid():
                await self._run()
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def refresh(self) -> None:
        self._expires = datetime.datetime.min.replace(tzinfo=datetime.UTC)

    def _valid(self) -> bool:
        if self._expires is None:
            return bool(self._token)
        return datetime.datetime.now(datetime.UTC) < self._expires

    async def _run(self) -> None:
        spec: dict[str, Any] = {"interactive": False}
        if self.cluster_info is not None:
            spec["cluster"] = self.cluster_info
        info = {"apiVersion": self.api_version, "kind": "ExecCredential", "spec": spec}
        command = self.command
        if os.sep in command and not os.path.isabs(command):
            command = str(self.base_dir / command)  # client-go: relative to the kubeconfig's directory
        try:
            # In a thread: subprocess.run kills a plugin that outlives the timeout.
            done = await asyncio.to_thread(
                subprocess.run,
                [command, *self.args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                env={**os.environ, **self.env, "KUBERNETES_EXEC_INFO": json.dumps(info)},
                timeout=self.timeout,
                check=False,
            )
        except (subprocess.TimeoutExpired, OSError) as e:
            raise KubeconfigError(
                f"exec credential plugin {self.command!r} could not run: {type(e).__name__}: {e}"
            ) from e
        out, err = done.stdout, done.stderr
        if done.returncode != 0:
            raise KubeconfigError(
                f"exec credential plugin {self.command!r} exited with {done.returncode}: "
                f"{err.decode(errors='replace').strip()[:500]}"
            )
        try:
            status = json.loads(out)["status"]
        except (ValueError, KeyError, TypeError) as e:
            raise KubeconfigError(
                f"exec credential plugin {self.command!r} printed no ExecCredential with a status: {out[:200]!r}"
            ) from e
        self._token = status.get("token") or ""
        expires = status.get("expirationTimestamp")
        self._expires = parse_time(expires) if expires else None
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if cert and key and self.ssl_context is not None:
            _load_client_certificate(self.ssl_context, cert.encode(), key.encode())
        if not self._token and not cert:
            raise KubeconfigError(
                f"exec credential plugin {self.command!r} returned neither a token nor a client certificate"
            )


@dataclass
class ClusterConfig:
    """One API server and how to talk to it."""

    host: str
    ssl_context: ssl.SSLContext | None = None  # None: plain HTTP
    credentials: Credentials = field(default_factory=Credentials)
    tls_server_name: str | None = None
    proxy: str | None = None
    source: str = ""  # where it came from, for messages
    namespace: str = "default"


def load(kubeconfig: str | None = None, context: str | None = None) -> ClusterConfig:
    """From ``kubeconfig`` (a path, or a list as KUBECONFIG holds), else KUBECONFIG, else
    ~/.kube/config; else, inside a Pod, its ServiceAccount."""
    files = kubeconfig_files(kubeconfig)
    if kubeconfig or any(p.exists() for p in files):
        return from_kubeconfig(files, context)
    try:
        return in_cluster()
    except KubeconfigError as e:
        raise KubeconfigError(f"no kubeconfig ({', '.join(map(str, files))} does not exist) and {e}") from None


def kubeconfig_files(kubeconfig: str | None = None) -> list[Path]:
    listed = kubeconfig or os.environ.get("KUBECONFIG")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


@dataclass
class _Merged:
    current: str | None = None
    contexts: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    clusters: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)


def _merge(files: list[Path]) -> _Merged:
    merged = _Merged()
    for path in files:
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except FileNotFoundError:
            continue  # kubectl skips listed files that do not exist
        except (OSError, yaml.YAMLError) as e:
            raise KubeconfigError(f"{path}: {e}") from e
        if not isinstance(data, Mapping):
            raise KubeconfigError(f"{path}: not a kubeconfig (a YAML mapping with clusters, users and contexts)")
        merged.current = merged.current or data.get("current-context") or None
        for kind, into in (("contexts", merged.contexts), ("clusters", merged.clusters), ("users", merged.users)):
            for entry in data.get(kind) or []:
                if isinstance(entry, Mapping) and entry.get("name") is not None:
                    into.setdefault(str(entry["name"]), (entry.get(kind[:-1]) or {}, path.parent))
    return merged


def context_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of ``context`` (or the current one), as kubectl picks it; ``default`` when
    the kubeconfig sets none or cannot be read."""
    try:
        merged = _merge(kubeconfig_files(kubeconfig))
    except KubeconfigError:
        return "default"
    entry, _ = merged.contexts.get(context or merged.current or "", ({}, Path()))
    return entry.get("namespace") or "default"


def from_kubeconfig(files: list[Path], context: str | None = None) -> ClusterConfig:
    where = os.pathsep.join(map(str, files))
    if not any(p.exists() for p in files):
        raise KubeconfigError(f"{where}: no such file")
    merged = _merge(files)
    name = context or merged.current
    if not name:
        raise KubeconfigError(f"{where}: no current-context; set one (kubectl config use-context) or name a context")
    if name not in merged.contexts:
        raise KubeconfigError(f"{where}: context {name!r} not found (known: {', '.join(sorted(merged.contexts))})")
    ctx, _ = merged.contexts[name]
    cluster_name, user_name = ctx.get("cluster"), ctx.get("user")
    if cluster_name not in merged.clusters:
        raise KubeconfigError(f"{where}: context {name!r} names cluster {cluster_name!r}, which is not defined")
    cluster, cluster_dir = merged.clusters[cluster_name]
    user, user_dir = merged.users.get(user_name, ({}, Path())) if user_name is not None else ({}, Path())
    host = str(cluster.get("server") or "").rstrip("/")
    if not host:
        raise KubeconfigError(f"{where}: cluster {cluster_name!r} has no server")
    context_ssl = _ssl_context(host, cluster, cluster_dir, user, user_dir, where)
    return ClusterConfig(
        host=host,
        ssl_context=context_ssl,
        credentials=_credentials(user, user_dir, user_name, cluster, context_ssl, where),
        tls_server_name=cluster.get("tls-server-name"),
        proxy=cluster.get("proxy-url"),
        source=where,
        namespace=ctx.get("namespace") or "default",
    )


def in_cluster(directory: Path = SERVICE_ACCOUNT_DIR, env: Mapping[str, str] = os.environ) -> ClusterConfig:
    """client-go's ``rest.InClusterConfig``."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError("not running in a Pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT unset)")
    token = directory / "token"
    if not token.exists():
        raise KubeconfigError(f"no ServiceAccount token at {token} (automountServiceAccountToken off?)")
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    host = f"[{host}]" if ":" in host else host
    namespace_file = directory / "namespace"
    namespace = namespace_file.read_text().strip() if namespace_file.exists() else "default"
    return ClusterConfig(
        host=f"https://{host}:{port}",
        ssl_context=context,
        credentials=TokenFile(token),
        source="in-cluster ServiceAccount",
        namespace=namespace,
    )


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path, where: str) -> bytes | None:
    if entry.get(f"{key}-data"):
        try:
            return base64.b64decode(entry[f"{key}-data"], validate=True)
        except ValueError as e:
            raise KubeconfigError(f"{where}: {key}-data is not base64: {e}") from e
    if entry.get(key):
        path = Path(os.path.expanduser(str(entry[key])))
        path = path if path.is_absolute() else base / path
        try:
            return path.read_bytes()
        except OSError as e:
            raise KubeconfigError(f"{where}: {key} {path}: {e}") from e
    return None


def _ssl_context(
    host: str, cluster: Mapping[str, Any], cluster_dir: Path, user: Mapping[str, Any], user_dir: Path, where: str
) -> ssl.SSLContext | None:
    if not host.startswith("https://"):
        return None
    ca = (
        None
        if cluster.get("insecure-skip-tls-verify")
        else _data_or_file(cluster, "certificate-authority", cluster_dir, where)
    )
    # The system's CAs only when the cluster names none (loading them costs about 30 ms).
    context = ssl.create_default_context(cadata=ca.decode(errors="replace")) if ca else ssl.create_default_context()
    if cluster.get("insecure-skip-tls-verify"):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert = _data_or_file(user, "client-certificate", user_dir, where)
    key = _data_or_file(user, "client-key", user_dir, where)
    if cert is not None and key is not None:
        try:
            _load_client_certificate(context, cert, key)
        except ssl.SSLError as e:
            raise KubeconfigError(f"{where}: the client certificate or key cannot be loaded: {e}") from e
    return context


def _load_client_certificate(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """``load_cert_chain`` reads files only: a private temporary file, removed at once."""
    with tempfile.TemporaryDirectory(prefix="dra-operators-tls-") as scratch:
        pem = Path(scratch) / "client.pem"
        pem.touch(mode=0o600)
        pem.write_bytes(cert.rstrip(b"\n") + b"\n" + key)
        context.load_cert_chain(str(pem))


def _credentials(
    user: Mapping[str, Any],
    user_dir: Path,
    name: Any,
    cluster: Mapping[str, Any],
    context: ssl.SSLContext | None,
    where: str,
) -> Credentials:
    if user.get("auth-provider"):
        provider = (user["auth-provider"] or {}).get("name", "?")
        raise KubeconfigError(
            f"{where}: user {name!r} uses auth-provider {provider!r}, which is not supported "
            "(kubectl dropped auth providers in 1.26); use an exec credential plugin instead"
        )
    if user.get("token"):
        return StaticToken(str(user["token"]))
    if user.get("tokenFile"):
        path = Path(os.path.expanduser(str(user["tokenFile"])))
        return TokenFile(path if path.is_absolute() else user_dir / path)
    if user.get("exec"):
        spec = user["exec"]
        version = spec.get("apiVersion")
        if version not in EXEC_API_VERSIONS:
            raise KubeconfigError(
                f"{where}: user {name!r}: exec apiVersion {version!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
            )
        if not spec.get("command"):
            raise KubeconfigError(f"{where}: user {name!r}: exec has no command")
        info = None
        if spec.get("provideClusterInfo"):
            info = {
                "server": cluster.get("server"),
                "tls-server-name": cluster.get("tls-server-name"),
                "insecure-skip-tls-verify": bool(cluster.get("insecure-skip-tls-verify")),
                "certificate-authority-data": cluster.get("certificate-authority-data"),
                "proxy-url": cluster.get("proxy-url"),
            }
            info = {k: v for k, v in info.items() if v}
        return ExecPlugin(
            command=str(spec["command"]),
            args=[str(a) for a in spec.get("args") or []],
            env={str(e["name"]): str(e.get("value", "")) for e in spec.get("env") or []},
            api_version=version,
            base_dir=user_dir,
            cluster_info=info,
            ssl_context=context,
        )
    if user.get("username") is not None and user.get("password") is not None:
        return BasicAuth(str(user["username"]), str(user["password"]))
    return Credentials()
