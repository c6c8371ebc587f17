"""Plain-dict access to the Kubernetes API over kubernetes-asyncio's connection handling.

kubernetes-asyncio brings kubeconfig/in-cluster loading, TLS and token refresh; the typed API
classes are not used because they drop unknown fields. Every call returns the decoded JSON.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from kubernetes_asyncio import client, config

from .resources import Resource

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status object."""

    def __init__(self, status: int, body: JSON | str, method: str = "", path: str = ""):
        self.status = status
        self.body = body if isinstance(body, dict) else {"message": str(body)}
        self.reason = self.body.get("reason", "")
        self.message = self.body.get("message", "")
        super().__init__(f"{method} {path}: {status} {self.reason}: {self.message}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def invalid(self) -> bool:
        return self.status == 422


class Kube:
    """One connection pool to one API server."""

    def __init__(self, api_client: client.ApiClient):
        self._api = api_client

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, context: str | None = None) -> "Kube":
        """From a kubeconfig (KUBECONFIG or the path given), else the in-cluster ServiceAccount."""
        configuration = client.Configuration()
        try:
            await config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        except config.ConfigException:
            if kubeconfig:
                raise
            config.load_incluster_config(client_configuration=configuration)
        return cls(client.ApiClient(configuration))

    @classmethod
    def with_token(cls, host: str, token: str, ca_file: str) -> "Kube":
        """A client that authenticates with a bearer token (for ServiceAccount-token tests)."""
        configuration = client.Configuration(host=host)
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.ssl_ca_cert = ca_file
        return cls(client.ApiClient(configuration))

    @property
    def host(self) -> str:
        return self._api.configuration.host

    async def close(self) -> None:
        await self._api.close()

    async def __aenter__(self) -> "Kube":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Iterable[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60,
    ) -> Any:
        query = [(k, v) for k, v in (params or []) if v is not None]
        response = await self._api.call_api(
            path,
            method,
            query_params=query,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )
        try:
            raw = await response.read()
        finally:
            response.release()
        text = raw.decode() if raw else ""
        try:
            data = json.loads(text) if text else {}
        except json.JSONDecodeError:
            data = text
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, data, method, path)
        return data

    # -- verbs over Resource descriptors -----------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None,
                  subresource: str | None = None) -> JSON:
        return await self.request("GET", res.path(namespace, name, subresource))

    async def get_or_none(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        try:
            return await self.get(res, name, namespace)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None, field_selector: str | None = None,
                   limit: int = 500) -> list[JSON]:
        items: list[JSON] = []
        token: str | None = None
        while True:
            page = await self.request("GET", res.path(namespace), params=[
                ("labelSelector", label_selector), ("fieldSelector", field_selector),
                ("limit", limit), ("continue", token)])
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    async def create(self, res: Resource, body: JSON, namespace: str | None = None, *,
                     field_manager: str | None = None, dry_run: bool = False) -> JSON:
        namespace = namespace or body.get("metadata", {}).get("namespace")
        return await self.request("POST", res.path(namespace), body=body, params=[
            ("fieldManager", field_manager), ("dryRun", "All" if dry_run else None)])

    async def replace(self, res: Resource, body: JSON, *, subresource: str | None = None,
                      field_manager: str | None = None) -> JSON:
        """PUT with the body's resourceVersion: a stale body gives a 409 conflict."""
        meta = body["metadata"]
        return await self.request(
            "PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body,
            params=[("fieldManager", field_manager)])

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None, *,
                    content_type: str = MERGE_PATCH, subresource: str | None = None,
                    field_manager: str | None = None) -> JSON:
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                  content_type=content_type, params=[("fieldManager", field_manager)])

    async def apply(self, res: Resource, body: JSON, *, field_manager: str, force: bool = False,
                    subresource: str | None = None) -> JSON:
        """Server-side apply (the body is sent as JSON, which is valid YAML)."""
        meta = body["metadata"]
        return await self.request(
            "PATCH", res.path(meta.get("namespace"), meta["name"], subresource), body=body,
            content_type=APPLY_PATCH,
            params=[("fieldManager", field_manager), ("force", "true" if force else None)])

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, resource_version: str | None = None,
                     grace_period_seconds: int | None = None,
                     propagation_policy: str | None = None) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", res.path(namespace, name), body=options)

    # -- discovery ---------------------------------------------------------------------------

    async def server_version(self) -> JSON:
        return await self.request("GET", "/version")

    async def served_versions(self, group: str, plural: str) -> list[str]:
        """Versions of ``group`` that serve ``plural``, the server's preferred version first."""
        try:
            info = await self.request("GET", f"/apis/{group}")
        except ApiError as e:
            if e.not_found:
                return []
            raise
        preferred = (info.get("preferredVersion") or {}).get("version")
        versions = [v["version"] for v in info.get("versions") or []]
        versions.sort(key=lambda v: v != preferred)
        served = []
        for version in versions:
            listing = await self.request("GET", f"/apis/{group}/{version}")
            if any(r.get("name") == plural for r in listing.get("resources") or []):
                served.append(version)
        return served

    async def preferred_version(self, res: Resource) -> Resource | None:
        """``res`` at the version the cluster prefers for it, or None if it is not served."""
        versions = await self.served_versions(res.group, res.plural)
        return res.with_version(versions[0]) if versions else None
