"""A fake API server and fake kopf indices for driving `Controller` without a cluster.

`FakeCluster` keeps KerasJobs, Pods, Services and Events with one resourceVersion counter
and answers the calls the controller makes through `KubeApi` (`FakeApi`, one per operator):
conditional status merge patches (409 on a stale resourceVersion), conditional merge
patches of a Service's or NetworkPolicy's spec, idempotent creates,
deletes with a UID precondition, the one-name Pod LIST of `observed.index_behind`. Each
operator's indices are plain dicts (`FakeIndex`) that change only when the test delivers the
watch (`sync`), so a test decides exactly how stale each operator's view is. Node-side
changes (a Pod starts, a kubelet finishes a graceful delete, KWOK deletes by name) are test
steps too.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import aiohttp

from kerasjob.api import labels
from kerasjob.control.observed import child_view
from kerasjob.k8s.kube import ApiError
from kerasjob.k8s.workqueue import Key
from kerasjob.planner.podview import PodView, pod_view

NS = "ns"
PVC = {"persistentVolumeClaim": {"claimName": "shared"}}
FAR_FUTURE = "2099-01-01T00:00:00Z"
_uids = itertools.count(1)


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 JSON merge patch, in place."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def _split(path: str) -> tuple[str, str, str | None, str | None]:
    """(namespace, resource, name, subresource) of an API path."""
    parts = path.strip("/").split("/")
    i = parts.index("namespaces")
    ns, rest = parts[i + 1], parts[i + 2 :]
    return ns, rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)


class FakeCluster:
    def __init__(self) -> None:
        self.rv = 0
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.network_policies: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.terminating_namespace = False
        self.down = False  # the API server is unreachable
        #: Answers a create with this error instead (an admission or validation refusal).
        self.refuse: Callable[[str, Mapping[str, Any]], ApiError | None] | None = None
        #: Secrets by name (what GET answers; a Secret missing here is a 404); None: the
        #: operator may not read Secrets (403).
        self.secrets: dict[str, dict[str, Any]] | None = {}
        self.log: list[str] = []
        #: The Pod watch: (resourceVersion, Pod name, UID) of every change, in order.
        self.pod_events: list[tuple[int, str, str]] = []

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        if obj.get("kind") != "KerasJob":
            meta = obj["metadata"]
            self.pod_events.append((self.rv, meta["name"], str(meta.get("uid", ""))))

    def _removed(self, name: str, uid: str) -> None:
        self.rv += 1
        self.pod_events.append((self.rv, name, uid))

    # -- test steps ------------------------------------------------------------------------

    def add_job(self, name: str = "job", workers: int = 2, **spec: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "kerasjob.dev/v1alpha1",
            "kind": "KerasJob",
            "metadata": {
                "name": name,
                "namespace": NS,
                "uid": f"job-{next(_uids)}",
                "generation": 1,
            },
            "spec": {"workers": workers, "checkpoint": {"volume": PVC}, **spec},
        }
        self._bump(body)
        self.jobs[name] = body
        return body

    def run_pods(self) -> None:
        """Every Pod not being deleted starts and becomes Ready (a kubelet's status update)."""
        for pod in self.pods.values():
            if pod["metadata"].get("deletionTimestamp") or pod["status"].get("phase") == "Running":
                continue
            pod["status"] = {
                "phase": "Running",
                "podIP": "10.0.0.1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "trainer", "ready": True, "restartCount": 0, "state": {"running": {}}}
                ],
            }
            self._bump(pod)

    def user_deletes(self, name: str) -> str:
        """`kubectl delete pod`: graceful; the Pod is Terminating until `kubelet_finishes`."""
        pod = self.pods[name]
        # Far ahead: the operator's force delete of stuck Pods never fires in these tests.
        pod["metadata"]["deletionTimestamp"] = FAR_FUTURE
        self._bump(pod)
        self.log.append(f"user deleted {name} {pod['metadata']['uid']}")
        return str(pod["metadata"]["uid"])

    def kubelet_finishes(self, name: str, uid: str) -> bool:
        """The node removes a terminated Pod, by UID precondition as a real kubelet does."""
        pod = self.pods.get(name)
        if pod is None or pod["metadata"]["uid"] != uid:
            return False
        del self.pods[name]
        self._removed(name, uid)
        return True

    def kubelet_sweeps(self) -> int:
        """Every Terminating Pod is removed (by UID), as a node finishing graceful deletes."""
        gone = [
            (n, p["metadata"]["uid"])
            for n, p in self.pods.items()
            if p["metadata"].get("deletionTimestamp")
        ]
        return sum(self.kubelet_finishes(n, u) for n, u in gone)

    def delete_by_name(self, name: str) -> bool:
        """What KWOK v0.8.0's pod-delete stage does: DELETE by name, grace 0, no UID
        precondition -- it removes whichever incarnation holds the name now."""
        pod = self.pods.pop(name, None)
        if pod is None:
            return False
        self._removed(name, pod["metadata"]["uid"])
        self.log.append(f"deleted by name {name} {pod['metadata']['uid']}")
        return True

    def delete_child(self, resource: str, name: str) -> None:
        """`kubectl delete service|networkpolicy NAME` (a clean-up, a GitOps prune)."""
        del self._children(resource)[name]
        self.rv += 1

    def edit_child(self, resource: str, name: str, spec: Mapping[str, Any]) -> None:
        """`kubectl patch service|networkpolicy NAME --type=merge` of its spec (someone
        loosening the policy, editing the selector)."""
        body = self._children(resource)[name]
        _merge(body.setdefault("spec", {}), spec)
        self._bump(body)

    def _children(self, resource: str) -> dict[str, dict[str, Any]]:
        return {"services": self.services, "networkpolicies": self.network_policies}[resource]

    def status(self, job: str = "job") -> dict[str, Any]:
        return self.jobs[job].get("status") or {}

    def restarts(self, job: str = "job") -> dict[str, int]:
        return dict(self.status(job).get("restarts") or {})

    # -- the API the controller calls ------------------------------------------------------

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        """A job's status, or a Service's or NetworkPolicy's spec (409 on a stale
        resourceVersion; an unchanged object keeps its version, as the API server's)."""
        _, resource, name, sub = _split(path)
        if resource in ("services", "networkpolicies"):
            store, part = self._children(resource), "spec"
        else:
            assert resource == "kerasjobs" and sub == "status", path
            store, part = self.jobs, "status"
        obj = store.get(name or "")
        if obj is None:
            raise ApiError(404, "PATCH", path, {"reason": "NotFound"})
        want = (patch.get("metadata") or {}).get("resourceVersion")
        if want is not None and want != obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "PATCH", path, {"reason": "Conflict"})
        before = copy.deepcopy(obj.get(part))
        _merge(obj.setdefault(part, {}), patch.get(part) or {})
        if part == "status" or obj[part] != before:
            self._bump(obj)
        return copy.deepcopy(obj)

    def create(self, path: str, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """The created object; None when the name is taken (the API's 409)."""
        ns, resource, _, _ = _split(path)
        if self.terminating_namespace:
            raise ApiError(
                403,
                "POST",
                path,
                {
                    "message": f"unable to create new content in "
                    f"namespace {ns} because it is being terminated"
                },
            )
        if resource == "events":
            self.events.append(copy.deepcopy(dict(obj)))
            return dict(obj)
        refusal = self.refuse(resource, obj) if self.refuse is not None else None
        if refusal is not None:
            raise refusal
        store = {
            "pods": self.pods,
            "services": self.services,
            "networkpolicies": self.network_policies,
        }[resource]
        name = obj["metadata"]["name"]
        if name in store:
            return None
        body = copy.deepcopy(dict(obj))
        kinds = {"pods": "Pod", "services": "Service", "networkpolicies": "NetworkPolicy"}
        body.setdefault("kind", kinds[resource])
        body["metadata"]["uid"] = f"{resource}-{next(_uids)}"
        body.setdefault("status", {"phase": "Pending"})
        self._bump(body)
        store[name] = body
        if resource == "pods":
            self.log.append(f"created {name} {body['metadata']['uid']}")
        return copy.deepcopy(body)

    def delete(self, path: str, uid: str | None, grace: int | None) -> bool:
        _, resource, name, _ = _split(path)
        if resource == "kerasjobs":
            return self.jobs.pop(name or "", None) is not None
        pod = self.pods.get(name or "")
        if pod is None or (uid and pod["metadata"]["uid"] != uid):
            return False
        if grace == 0:
            del self.pods[name or ""]
            self._removed(name or "", pod["metadata"]["uid"])
        else:
            pod["metadata"]["deletionTimestamp"] = FAR_FUTURE
            self._bump(pod)
        return True

    def list_pods(self, field_selector: str) -> dict[str, Any]:
        name = field_selector.removeprefix("metadata.name=")
        return {"items": [copy.deepcopy(p) for n, p in self.pods.items() if n == name]}


class FakeApi:
    """The `KubeApi` calls the controller makes, answered by a `FakeCluster`."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.calls: list[str] = []
        #: Pod and Service creates made without fieldValidation=Strict.
        self.loose_creates: list[str] = []
        #: Runs while a status patch is awaited (a watch event handled meanwhile).
        self.during_patch: Callable[[], None] | None = None
        #: Runs once a create was answered, before the controller reads the answer (with the
        #: resource's name: a watch event handled meanwhile).
        self.after_create: Callable[[str], None] | None = None

    def _reachable(self) -> None:
        if self.cluster.down:
            raise aiohttp.ClientConnectionError("Cannot connect to host: Connection refused")

    async def merge_patch(self, path: str, patch: Mapping[str, Any], resource: str) -> Any:
        self.calls.append(f"patch {resource}")
        self._reachable()
        if self.during_patch is not None:
            self.during_patch()
        return self.cluster.merge_patch(path, patch)

    async def create(
        self, path: str, obj: Mapping[str, Any], resource: str, *, strict: bool = False
    ) -> bool:
        return await self.create_object(path, obj, resource, strict=strict) is not None

    async def create_object(
        self, path: str, obj: Mapping[str, Any], resource: str, *, strict: bool = False
    ) -> Mapping[str, Any] | None:
        self.calls.append(f"create {resource}")
        self._reachable()
        if not strict and resource != "events":
            self.loose_creates.append(resource)
        created = self.cluster.create(path, obj)
        if self.after_create is not None:
            self.after_create(resource)
        return created

    async def delete(
        self,
        path: str,
        resource: str,
        *,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
        propagation: str | None = None,
    ) -> bool:
        self.calls.append(f"delete {resource}")
        self._reachable()
        return self.cluster.delete(path, uid, grace_period_seconds)

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        count_as: str,
        **_: Any,
    ) -> Any:
        self.calls.append(count_as)
        self._reachable()
        if path == "/readyz":
            return "ok"
        if method == "GET" and "/secrets/" in path:
            name = path.rsplit("/", 1)[1]
            if self.cluster.secrets is None:
                raise ApiError(403, method, path, {"reason": "Forbidden"})
            if name not in self.cluster.secrets:
                raise ApiError(404, method, path, {"reason": "NotFound"})
            return copy.deepcopy(self.cluster.secrets[name])
        assert params is not None, (method, path)
        if method == "POST" and params.get("dryRun") == "All":
            if self.cluster.terminating_namespace:
                self.cluster.create(path, {})  # raises the admission's 403
            return {}
        assert method == "GET", (method, path)
        return self.cluster.list_pods(params["fieldSelector"])

    async def close(self) -> None:
        pass


class FakeIndex(Mapping[Key, list[Any]]):
    """A kopf index: a snapshot that changes only when `sync` delivers the watch."""

    def __init__(self) -> None:
        self._data: dict[Key, list[Any]] = {}
        self.delivered = 0  # the resourceVersion up to which watch events were delivered

    def __getitem__(self, key: Key) -> list[Any]:
        return self._data[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def replace(self, data: dict[Key, list[Any]]) -> None:
        self._data = data


def sync_jobs(index: FakeIndex, cluster: FakeCluster) -> None:
    index.replace({(NS, n): [copy.deepcopy(b)] for n, b in cluster.jobs.items()})


def sync_pods(
    index: FakeIndex, cluster: FakeCluster, on_event: Callable[[str, str], None] | None = None
) -> None:
    """Deliver the Pod watch: the index becomes the cluster's Pods, and ``on_event`` hears
    the name and UID of every change since the last delivery (also of Pods created and
    deleted in between, which the index never shows)."""
    if on_event is not None:
        for rv, name, uid in cluster.pod_events:
            if rv > index.delivered:
                on_event(name, uid)
    index.delivered = cluster.rv
    out: dict[Key, list[PodView]] = {}
    for body in cluster.pods.values():
        view = pod_view(body)
        if view is not None:
            job = body["metadata"]["labels"][labels.JOB_NAME]
            out.setdefault((NS, job), []).append(view)
    index.replace(out)


def sync_children(
    index: FakeIndex, store: Mapping[str, Mapping[str, Any]], on_change: Callable[[Key], None]
) -> None:
    """Deliver a Service or NetworkPolicy watch: the index becomes ``store`` (a `ChildView`
    of each, by the job label), and ``on_change`` hears the key of each job whose child
    came, went or changed."""
    out: dict[Key, list[Any]] = {}
    for body in store.values():
        job = body["metadata"]["labels"][labels.JOB_NAME]
        out.setdefault((NS, job), []).append(child_view(body["kind"], body))
    changed = {
        key
        for key in set(out) | set(index)
        if {v.resource_version for v in out.get(key, ())}
        != {v.resource_version for v in index.get(key, ())}
    }
    index.replace(out)
    for key in sorted(changed):
        on_change(key)
