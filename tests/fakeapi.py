"""One fake Kubernetes API for the unit tests, shaped after client-go's fake clientset
(k8s.io/client-go/testing: ``Fake``, ``ObjectTracker``, ``Action``, ``PrependReactor``).

It answers every method the controllers call on ``operators.core.api.kube.Kube`` (``request``,
``get``, ``get_or_none``, ``list``, ``list_with_version``, ``create``, ``replace``, ``patch``,
``apply``, ``delete``, and the discovery helpers) from an object tracker keyed by resource,
namespace and name, as an API server would:

- every write gets the next ``resourceVersion`` (one counter for the whole fake, as etcd's);
  a created object gets a ``uid`` and ``creationTimestamp``, ``generateName`` is honoured;
- failures are ``ApiError`` with the Status body kube-apiserver sends: 404 NotFound, 409
  AlreadyExists, 409 Conflict for a stale ``resourceVersion`` or a failed UID precondition;
- a PUT or patch of ``status`` changes only the status, one of the object keeps the stored
  status (resources with a status subresource); an object with finalizers is only marked
  deleted, and goes once its last finalizer is removed;
- ``pods/<name>/eviction`` deletes the Pod (with the eviction's preconditions).

Every call is recorded in ``actions`` before anything else happens (client-go's
``Fake.Invokes``), and reactors run before the tracker: ``prepend_reactor(verb, plural, fn)``
(``"*"`` matches any) puts ``fn`` first. A reactor gets the ``Action`` and returns None or
``(False, ...)`` to pass it on (it may change ``action.obj`` first, as upstream's generateName
reactor does), ``(True, obj)`` to answer with ``obj``, or raises (an ``ApiError``, a
``ConnectionLost``) to fail the call. A reactor may be a coroutine function: it is awaited (to
hold a call until a test lets it go).

Verbs are client-go's: get, list, create, update, patch, delete. ``apply`` is a patch with
``patch_type == APPLY_PATCH``; the eviction of a Pod is a create of subresource "eviction".
"""

from __future__ import annotations

import copy
import inspect
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from operators.core.api import resources as r
from operators.core.api.kube import APPLY_PATCH, JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, ApiError, DerivedVerbs
from operators.core.api.resources import Resource

JSON = dict[str, Any]

CREATION_TIMESTAMP = "2026-01-01T00:00:00Z"
DELETION_TIMESTAMP = "2026-01-01T00:00:01Z"

# The resources a test may name by kind (``FakeApi.add(obj)`` without a resource).
KNOWN: dict[str, Resource] = {
    "Namespace": r.NAMESPACES,
    "Node": r.NODES,
    "Pod": r.PODS,
    "Event": r.EVENTS,
    "ServiceAccount": r.SERVICE_ACCOUNTS,
    "Lease": r.LEASES,
    "PodDisruptionBudget": r.POD_DISRUPTION_BUDGETS,
    "DeviceClass": r.DEVICE_CLASSES,
    "ResourceClaim": r.RESOURCE_CLAIMS,
    "ResourceClaimTemplate": r.RESOURCE_CLAIM_TEMPLATES,
    "ResourceSlice": r.RESOURCE_SLICES,
    "DeviceTaintRule": r.DEVICE_TAINT_RULES,
    "PodGroup": r.POD_GROUPS,
    "ResourcePoolStatusRequest": r.RESOURCE_POOL_STATUS_REQUESTS,
}
# Resources whose status is a subresource: a write of the object leaves the status alone.
STATUS_SUBRESOURCE = {
    "pods",
    "nodes",
    "resourceclaims",
    "devicetaintrules",
    "podgroups",
    "resourcepoolstatusrequests",
    "poddisruptionbudgets",
    "namespaces",
}
# Lists of objects merged by these keys in strategic merge and apply patches (listType=map).
MERGE_KEYS = {
    "conditions": "type",
    "resourceClaimStatuses": "name",
    "reservedFor": "uid",
    "containerStatuses": "name",
    "ownerReferences": "uid",
}


# -- Status errors, as k8s.io/apimachinery/pkg/api/errors builds them ----------------------------


def qualified(res: Resource) -> str:
    """``plural.group`` (just the plural for the core group), as error messages name a resource."""
    return f"{res.plural}.{res.group}" if res.group else res.plural


def status_error(
    code: int,
    reason: str,
    message: str,
    res: Resource | None = None,
    name: str = "",
    method: str = "",
    path: str = "",
    **details: Any,
) -> ApiError:
    body: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if res is not None or name or details:
        body["details"] = {
            k: v
            for k, v in {
                "name": name,
                "group": res.group if res else None,
                "kind": res.plural if res else None,
                **details,
            }.items()
            if v
        }
    return ApiError(code, body, method, path)


def not_found(res: Resource, name: str) -> ApiError:
    """``errors.NewNotFound``."""
    return status_error(404, "NotFound", f'{qualified(res)} "{name}" not found', res, name)


def already_exists(res: Resource, name: str) -> ApiError:
    """``errors.NewAlreadyExists``."""
    return status_error(409, "AlreadyExists", f'{qualified(res)} "{name}" already exists', res, name)


def conflict(
    res: Resource,
    name: str,
    why: str = "the object has been modified; please apply your changes to the latest version and try again",
) -> ApiError:
    """``errors.NewConflict``."""
    return status_error(
        409, "Conflict", f'Operation cannot be fulfilled on {qualified(res)} "{name}": {why}', res, name
    )


def invalid(res: Resource, name: str, why: str) -> ApiError:
    return status_error(422, "Invalid", f'{qualified(res)} "{name}" is invalid: {why}', res, name)


def service_unavailable(message: str = "etcd leader changed") -> ApiError:
    return status_error(503, "ServiceUnavailable", message)


def internal_error(message: str = "an error on the server has prevented the request from succeeding") -> ApiError:
    return status_error(500, "InternalError", message)


def too_many_requests(message: str = "Too many requests", retry_after: int | None = None) -> ApiError:
    extra = {"retryAfterSeconds": retry_after} if retry_after else {}
    return status_error(429, "TooManyRequests", message, **extra)


# -- actions and reactors ------------------------------------------------------------------------


@dataclass
class Action:
    """One call, as client-go's ``testing.Action`` (verb, resource, namespace, subresource, ...)."""

    verb: str
    resource: str  # the plural
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    obj: Any = None  # the body of a create or update, the patch of a patch
    patch_type: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def matches(self, verb: str, resource: str) -> bool:
        return verb in ("*", self.verb) and resource in ("*", self.resource)

    @property
    def key(self) -> str:
        """``verb resource[/subresource] [ns/]name``: what a test asserts a sequence of."""
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        who = "/".join(p for p in (self.namespace, self.name) if p)
        return f"{self.verb} {what}" + (f" {who}" if who else "")


Reactor = Callable[[Action], Any]


class FakeApi(DerivedVerbs):
    """An in-memory API server for one test; ``FakeApi(objects)`` starts with them stored."""

    def __init__(self, objects: Iterable[JSON] | dict[Resource, Iterable[JSON]] = ()):
        self._objects: dict[tuple[str, str, str], JSON] = {}
        self._resources: dict[str, Resource] = {res.plural: res for res in KNOWN.values()}
        self._rv = itertools.count(1)
        self._uids = itertools.count(1)
        self._generated = itertools.count(1)
        self.resource_version = 0
        self.actions: list[Action] = []
        self.reactors: list[tuple[str, str, Reactor]] = []
        if isinstance(objects, dict):
            for res, objs in objects.items():
                for obj in objs:
                    self.add(obj, res)
        else:
            for obj in objects:
                self.add(obj)

    # -- reactors and recorded actions (client-go's Fake) --

    def prepend_reactor(self, verb: str, plural: str, fn: Reactor) -> None:
        self.reactors.insert(0, (verb, plural, fn))

    def add_reactor(self, verb: str, plural: str, fn: Reactor) -> None:
        self.reactors.append((verb, plural, fn))

    def fail(self, verb: str, plural: str, error: BaseException, times: int | None = None) -> None:
        """A reactor that raises ``error`` (the next ``times`` matching calls, or all of them)."""
        left = [times]

        def reactor(action: Action):
            if left[0] is not None:
                if left[0] <= 0:
                    return None
                left[0] -= 1
            raise error

        self.prepend_reactor(verb, plural, reactor)

    def clear_actions(self) -> None:
        self.actions.clear()

    def actions_of(self, verb: str = "*", plural: str = "*") -> list[Action]:
        return [a for a in self.actions if a.matches(verb, plural)]

    def action_keys(self, *, skip: Iterable[str] = ("events",)) -> list[str]:
        """``verb resource name`` of every action, in order (Events left out unless asked for)."""
        skip = set(skip)
        return [a.key for a in self.actions if a.resource not in skip]

    # -- the tracker (client-go's ObjectTracker) --

    def register(self, res: Resource) -> None:
        self._resources[res.plural] = res

    def _fake_resource(self, obj: JSON, res: Resource | None) -> Resource:
        if res is not None:
            self.register(res)
            return res
        kind = obj.get("kind")
        if kind not in KNOWN:
            raise ValueError(f"cannot tell the resource of a {kind!r}: pass it")
        return KNOWN[kind]

    def add(self, obj: JSON, res: Resource | None = None) -> JSON:
        """Store ``obj`` as it is (a copy), giving it a uid and resourceVersion if it has none."""
        res = self._fake_resource(obj, res)
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        if not meta.get("resourceVersion"):
            meta["resourceVersion"] = self._fake_next_rv()
        else:
            self._fake_bump_past(meta["resourceVersion"])
        self._objects[self._fake_key(res, meta.get("namespace"), meta["name"])] = obj
        return copy.deepcopy(obj)

    def stored(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        """What the API server holds now (a copy), or None."""
        obj = self._objects.get(self._fake_key(res, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, res: Resource, namespace: str | None = None) -> list[JSON]:
        """Every stored object of ``res`` (in ``namespace``), by namespace and name."""
        found = [
            (k, o)
            for k, o in self._objects.items()
            if k[0] == res.plural and (namespace is None or k[1] == (namespace if res.namespaced else ""))
        ]
        return [copy.deepcopy(o) for _, o in sorted(found, key=lambda item: item[0])]

    def remove(self, res: Resource, name: str, namespace: str | None = None) -> None:
        """Take an object away behind the controllers' backs (nothing recorded)."""
        self._objects.pop(self._fake_key(res, namespace, name), None)

    def _fake_key(self, res: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
        return res.plural, (namespace or "") if res.namespaced else "", name

    def _fake_next_rv(self) -> str:
        self.resource_version = next(self._rv)
        return str(self.resource_version)

    def _fake_bump_past(self, rv: Any) -> None:
        try:
            value = int(rv)
        except (TypeError, ValueError):
            return
        while self.resource_version < value:
            self.resource_version = next(self._rv)

    # -- the Kube interface ----------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None, subresource: str | None = None) -> JSON:
        return await self._fake_do(res, Action("get", res.plural, namespace, name, subresource))

    async def list_with_version(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        keep: Callable[[JSON], bool] | None = None,
        trim: Callable[[JSON], JSON] | None = None,
    ) -> tuple[list[JSON], str]:
        answer = await self._fake_do(
            res,
            Action(
                "list",
                res.plural,
                namespace,
                params={"labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit},
            ),
        )
        items = [i for i in answer.get("items") or [] if keep is None or keep(i)]
        if trim is not None:
            items = [trim(i) for i in items]
        return items, (answer.get("metadata") or {}).get("resourceVersion", "")

    async def create(
        self,
        res: Resource,
        body: JSON,
        namespace: str | None = None,
        *,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> JSON:
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        return await self._fake_do(
            res,
            Action(
                "create",
                res.plural,
                namespace,
                (body.get("metadata") or {}).get("name"),
                obj=copy.deepcopy(body),
                params={"fieldManager": field_manager, "dryRun": dry_run},
            ),
        )

    async def replace(
        self, res: Resource, body: JSON, *, subresource: str | None = None, field_manager: str | None = None
    ) -> JSON:
        meta = body["metadata"]
        return await self._fake_do(
            res,
            Action(
                "update",
                res.plural,
                meta.get("namespace"),
                meta["name"],
                subresource,
                obj=copy.deepcopy(body),
                params={"fieldManager": field_manager},
            ),
        )

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> JSON:
        return await self._fake_do(
            res,
            Action(
                "patch",
                res.plural,
                namespace,
                name,
                subresource,
                copy.deepcopy(patch),
                content_type,
                {"fieldManager": field_manager},
            ),
        )

    async def apply(
        self, res: Resource, body: JSON, *, field_manager: str, force: bool = False, subresource: str | None = None
    ) -> JSON:
        meta = body["metadata"]
        return await self._fake_do(
            res,
            Action(
                "patch",
                res.plural,
                meta.get("namespace"),
                meta["name"],
                subresource,
                copy.deepcopy(body),
                APPLY_PATCH,
                {"fieldManager": field_manager, "force": force},
            ),
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> JSON:
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v}
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if preconditions:
            options["preconditions"] = preconditions
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        return await self._fake_do(res, Action("delete", res.plural, namespace, name, obj=options))

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Iterable[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60,
        retry: bool = True,
        raw: bool = False,
        stop_at: str | None = None,
    ) -> Any:
        """A raw call by path: parsed into the same actions as the verbs above."""
        query = {k: v for k, v in (params or []) if v is not None}
        if path == "/version":
            return {"major": "1", "minor": "37", "gitVersion": "v1.37.1"}
        res, namespace, name, subresource = self._fake_parse(path)
        verb = {
            "GET": "get" if name else "list",
            "POST": "create",
            "PUT": "update",
            "PATCH": "patch",
            "DELETE": "delete",
        }[method]
        if verb == "create" and name and not subresource:
            raise status_error(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        action = Action(
            verb,
            res.plural,
            namespace,
            name,
            subresource,
            copy.deepcopy(body),
            content_type if verb == "patch" else None,
            query,
        )
        if verb == "patch" and content_type == APPLY_PATCH:
            action.params["force"] = query.get("force") == "true"
        return await self._fake_do(res, action)

    def _fake_parse(self, path: str) -> tuple[Resource, str | None, str | None, str | None]:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[0] == "api":
            group_version, rest = parts[1], parts[2:]
        elif parts[0] == "apis":
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            raise status_error(404, "NotFound", f"the server could not find the requested resource ({path})")
        namespace = None
        if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
            namespace, rest = rest[1], rest[2:]
        plural, name, subresource = (rest + [None, None])[:3]
        res = self._resources.get(plural)
        if res is None:
            res = Resource(group_version, plural, namespace is not None)
        elif res.group_version != group_version:
            res = res.with_version(group_version.rpartition("/")[2])
        return res, namespace, name, subresource

    # -- discovery ---------------------------------------------------------------------------

    async def server_version(self) -> JSON:
        return await self.request("GET", "/version")

    async def served_versions(self, group: str, plural: str) -> list[str]:
        return [res.version for res in self._resources.values() if res.group == group and res.plural == plural]

    async def preferred_version(self, res: Resource) -> Resource | None:
        served = await self.served_versions(res.group, res.plural)
        return res.with_version(served[0]) if served else None

    # -- what Kube has besides the verbs --

    def without_retries(self) -> FakeApi:
        return self

    def for_leader_election(self) -> FakeApi:
        return self

    async def close(self) -> None:
        pass

    # -- dispatch ----------------------------------------------------------------------------

    def track(self, action: Action) -> Any:
        """Carry ``action`` out on the tracker, past the reactors and unrecorded: for a reactor
        that lets the call happen and then fails or delays its answer (client-go's
        ``ObjectReaction``)."""
        action = copy.deepcopy(action)
        return getattr(self, f"_tracker_{action.verb}")(self._resources[action.resource], action)

    async def _fake_do(self, res: Resource, action: Action) -> Any:
        self.actions.append(action)
        for verb, plural, reactor in list(self.reactors):
            if not action.matches(verb, plural):
                continue
            answer = reactor(action)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is None:
                continue
            handled, obj = answer[0], answer[1] if len(answer) > 1 else None
            if handled:
                return copy.deepcopy(obj)
        return getattr(self, f"_tracker_{action.verb}")(res, action)

    def _fake_stored_or_404(self, res: Resource, action: Action) -> JSON:
        obj = self._objects.get(self._fake_key(res, action.namespace, action.name))
        if obj is None:
            raise not_found(res, action.name)
        return obj

    def _tracker_get(self, res: Resource, action: Action) -> JSON:
        return copy.deepcopy(self._fake_stored_or_404(res, action))

    def _tracker_list(self, res: Resource, action: Action) -> JSON:
        selector = _label_selector(action.params.get("labelSelector"))
        items = [
            o
            for o in self.objects(res, action.namespace)
            if all((o["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        ]
        return {
            "kind": "List",
            "apiVersion": res.group_version,
            "items": items,
            "metadata": {"resourceVersion": str(self.resource_version)},
        }

    def _tracker_create(self, res: Resource, action: Action) -> JSON:
        if action.subresource == "eviction" and res.plural == "pods":
            return self._fake_evict(res, action)
        if action.subresource:
            raise status_error(404, "NotFound", f"subresource {action.subresource} of {res.plural} cannot be created")
        obj = action.obj
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise invalid(res, "", "metadata.name: Required value: name or generateName is required")
            meta["name"] = f"{meta['generateName']}{next(self._generated):05d}"
        if res.namespaced:
            if not action.namespace:
                raise invalid(res, meta["name"], "metadata.namespace: Required value")
            meta["namespace"] = action.namespace
        key = self._fake_key(res, action.namespace, meta["name"])
        if key in self._objects:
            raise already_exists(res, meta["name"])
        if meta.get("resourceVersion"):
            raise invalid(res, meta["name"], "metadata.resourceVersion: Invalid value: must be empty on create")
        meta["uid"] = f"uid-{next(self._uids)}"
        meta.setdefault("creationTimestamp", CREATION_TIMESTAMP)
        if action.params.get("dryRun"):
            return copy.deepcopy(obj)
        meta["resourceVersion"] = self._fake_next_rv()
        self._objects[key] = obj
        return copy.deepcopy(obj)

    def _fake_check_preconditions(
        self, res: Resource, stored: JSON, name: str, uid: str | None, rv: str | None
    ) -> None:
        meta = stored["metadata"]
        if uid and uid != meta.get("uid"):
            raise conflict(
                res, name, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}"
            )
        if rv and rv != meta.get("resourceVersion"):
            raise conflict(res, name)

    def _fake_write(
        self, res: Resource, key: tuple[str, str, str], old: JSON, new: JSON, subresource: str | None
    ) -> JSON:
        """Store ``new`` over ``old``: only the status for the status subresource, everything but
        the status for the object; a deleted object goes with its last finalizer."""
        if subresource == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
        elif subresource:
            raise status_error(404, "NotFound", f"subresource {subresource} of {res.plural} is not served")
        else:
            merged = new
            meta = merged.setdefault("metadata", {})
            for kept in ("uid", "creationTimestamp", "deletionTimestamp", "namespace", "name"):
                if kept in old["metadata"]:
                    meta[kept] = old["metadata"][kept]
            if "deletionTimestamp" not in old["metadata"]:
                meta.pop("deletionTimestamp", None)  # only a delete sets it
            if res.plural in STATUS_SUBRESOURCE:
                if "status" in old:
                    merged["status"] = copy.deepcopy(old["status"])
                else:
                    merged.pop("status", None)
        if merged == old:  # a no-op write does not change the resourceVersion
            return copy.deepcopy(old)
        merged["metadata"]["resourceVersion"] = self._fake_next_rv()
        if merged["metadata"].get("deletionTimestamp") and not merged["metadata"].get("finalizers"):
            del self._objects[key]
        else:
            self._objects[key] = merged
        return copy.deepcopy(merged)

    def _tracker_update(self, res: Resource, action: Action) -> JSON:
        old = self._fake_stored_or_404(res, action)
        meta = action.obj.get("metadata") or {}
        self._fake_check_preconditions(res, old, action.name, meta.get("uid"), meta.get("resourceVersion"))
        return self._fake_write(
            res, self._fake_key(res, action.namespace, action.name), old, action.obj, action.subresource
        )

    def _tracker_patch(self, res: Resource, action: Action) -> JSON:
        key = self._fake_key(res, action.namespace, action.name)
        old = self._objects.get(key)
        patch = action.obj
        if isinstance(patch, (str, bytes)):
            patch = json.loads(patch)
        if old is None:
            if action.patch_type == APPLY_PATCH and not action.subresource:
                return self._tracker_create(
                    res, Action("create", res.plural, action.namespace, action.name, obj=copy.deepcopy(patch))
                )
            raise not_found(res, action.name)
        if action.patch_type == JSON_PATCH:
            new = _json_patch(res, action.name, old, patch)
        else:
            meta = (patch or {}).get("metadata") or {}
            self._fake_check_preconditions(res, old, action.name, meta.get("uid"), meta.get("resourceVersion"))
            by_key = action.patch_type in (STRATEGIC_PATCH, APPLY_PATCH)
            new = _merge(copy.deepcopy(old), patch, by_key)
        return self._fake_write(res, key, old, new, action.subresource)

    def _tracker_delete(self, res: Resource, action: Action) -> JSON:
        key = self._fake_key(res, action.namespace, action.name)
        old = self._fake_stored_or_404(res, action)
        preconditions = (action.obj or {}).get("preconditions") or {}
        self._fake_check_preconditions(
            res, old, action.name, preconditions.get("uid"), preconditions.get("resourceVersion")
        )
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return copy.deepcopy(old)
            marked = copy.deepcopy(old)
            marked["metadata"]["deletionTimestamp"] = DELETION_TIMESTAMP
            marked["metadata"]["resourceVersion"] = self._fake_next_rv()
            self._objects[key] = marked
            return copy.deepcopy(marked)
        del self._objects[key]
        return copy.deepcopy(old)

    def _fake_evict(self, res: Resource, action: Action) -> JSON:
        options = (action.obj or {}).get("deleteOptions") or {}
        self._tracker_delete(res, Action("delete", res.plural, action.namespace, action.name, obj=options))
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}


# -- patches ------------------------------------------------------------------------------------


def _label_selector(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    return dict(term.split("=", 1) for term in text.replace("==", "=").split(",") if "=" in term)


def _merge(target: Any, patch: Any, by_key: bool, field_name: str = "") -> Any:
    """RFC 7386 merge patch; with ``by_key`` (strategic merge, apply) lists named in
    ``MERGE_KEYS`` are merged item by item on their key, as listType=map."""
    if isinstance(patch, list) and by_key and field_name in MERGE_KEYS and isinstance(target, list):
        key = MERGE_KEYS[field_name]
        merged = [copy.deepcopy(item) for item in target]
        for item in patch:
            index = next(
                (
                    i
                    for i, old in enumerate(merged)
                    if isinstance(old, dict) and isinstance(item, dict) and old.get(key) == item.get(key)
                ),
                None,
            )
            if index is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[index] = _merge(merged[index], item, by_key)
        return merged
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for name, value in patch.items():
        if value is None:
            target.pop(name, None)
        else:
            target[name] = _merge(target.get(name), value, by_key, name)
    return target


def _json_patch(res: Resource, name: str, obj: JSON, operations: list[JSON]) -> JSON:
    """RFC 6902: add, remove, replace and test (what the suite sends)."""
    doc = copy.deepcopy(obj)
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op.get("value"):
                raise invalid(
                    res,
                    name,
                    f"the server rejected our request due to an error in our request: "
                    f"test operation for path {op['path']} failed",
                )
        elif kind == "remove":
            del parent[int(last) if isinstance(parent, list) else last]
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op["value"]))
                else:
                    parent[index] = copy.deepcopy(op["value"])
            else:
                parent[last] = copy.deepcopy(op["value"])
        else:
            raise invalid(res, name, f"unsupported JSON patch operation {kind}")
    return doc
