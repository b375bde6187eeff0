"""kopf glue: indices, event handlers and the operator's lifecycle. Thin by design.

- ``kerasjob_bodies``: every KerasJob, keyed by (namespace, name).
- ``kerasjob_pods``: a `PodView` of every child Pod, keyed by its job's (namespace, name).
- ``kerasjob_services`` and (with the NetworkPolicy on) ``kerasjob_network_policies``: a
  `ChildView` of each job's Service and NetworkPolicy (name, version, the spec fields the
  operator sets), so that a missing one, or one whose spec someone changed, is seen without
  a request (`Controller.child_changed`, `running.recreate_children`,
  `housekeeping.restore_children`).
- Any event of a KerasJob or of a child Pod puts the job's key into the controller's queue.

Only event and index handlers are used, so kopf adds no finalizer and no annotation to
KerasJobs or Pods: a KerasJob can be deleted while the operator is down (the garbage
collector removes its children through their owner references), and all state lives in
the API server (``status`` of each KerasJob).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from kerasjob import API_GROUP, API_VERSION, PLURAL
from kerasjob.api import labels as lbl
from kerasjob.api import plain
from kerasjob.config import OperatorConfig
from kerasjob.control import metrics
from kerasjob.control.controller import Controller
from kerasjob.control.observed import child_view
from kerasjob.integrations.gang.sync import GangSync
from kerasjob.integrations.integration import Integration
from kerasjob.integrations.kueue.sync import KueueSync
from kerasjob.k8s import bounded, credentials
from kerasjob.k8s.kube import KubeApi
from kerasjob.manifests.runtimes import default_images
from kerasjob.planner.podview import pod_view

log = logging.getLogger("kerasjob.control.handlers")

_JOB_FIELDS = ("apiVersion", "kind", "metadata", "spec", "status")
WORKLOADS_INDEX = "kerasjob_workloads"
POD_GROUPS_INDEX = "kerasjob_pod_groups"
GANG_WORKLOADS_INDEX = "kerasjob_gang_workloads"
SERVICES_INDEX = "kerasjob_services"
POLICIES_INDEX = "kerasjob_network_policies"


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf computes a deep-copied "essence" of every object on every event, for change
    handlers. We have none (only event and index handlers), so skip it: it was the largest
    share of the operator's CPU per Pod event."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: Any) -> None:
        return None


@kopf.index(API_GROUP, API_VERSION, PLURAL)
async def kerasjob_bodies(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    # At most bounded.BODY_DEPTH levels: a job nested deeper is failed by validation, and
    # nothing downstream ever walks more than that.
    copy = bounded.plain_copy(body)
    return {(namespace, name): {k: copy[k] for k in _JOB_FIELDS if k in copy}}


@kopf.index("pods", labels={lbl.JOB_NAME: kopf.PRESENT})
async def kerasjob_pods(namespace: str | None, body: kopf.Body, **_: Any) -> Any:
    view = pod_view(body)
    if view is None:
        return None
    return {(namespace, view.job_name): view}


@kopf.index("services", labels={lbl.JOB_NAME: kopf.PRESENT}, id=SERVICES_INDEX)
async def kerasjob_services(namespace: str | None, labels: Any, body: kopf.Body, **_: Any) -> Any:
    return {(namespace, labels[lbl.JOB_NAME]): child_view("Service", body)}


@kopf.on.event("services", labels={lbl.JOB_NAME: kopf.PRESENT})
async def service_event(
    namespace: str | None, labels: Any, type: str | None, uid: str | None, memo: Any, **_: Any
) -> None:
    key = (namespace or "", labels[lbl.JOB_NAME])
    memo.controller.child_changed(key, "Service", gone=type == "DELETED", uid=uid)


def register_network_policies() -> None:
    """With the per-job NetworkPolicy (the default): index them, and wake the job on each
    change, so that one deleted is made again (`running.recreate_children`) and one changed
    is patched back (`housekeeping.restore_children`)."""
    labels = {lbl.JOB_NAME: kopf.PRESENT}

    @kopf.index("networking.k8s.io", "v1", "networkpolicies", labels=labels, id=POLICIES_INDEX)
    async def kerasjob_network_policies(
        namespace: str | None, labels: Any, body: kopf.Body, **_: Any
    ) -> Any:
        return {(namespace, labels[lbl.JOB_NAME]): child_view("NetworkPolicy", body)}

    @kopf.on.event("networking.k8s.io", "v1", "networkpolicies", labels=labels)
    async def network_policy_event(
        namespace: str | None,
        labels: Any,
        type: str | None,
        uid: str | None,
        memo: Any,
        **_: Any,
    ) -> None:
        key = (namespace or "", labels[lbl.JOB_NAME])
        memo.controller.child_changed(key, "NetworkPolicy", gone=type == "DELETED", uid=uid)


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
async def job_event(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    memo.controller.notify((namespace or "", name))


@kopf.on.event("pods", labels={lbl.JOB_NAME: kopf.PRESENT})
async def pod_event(
    namespace: str | None,
    name: str,
    uid: str | None,
    labels: Mapping[str, str],
    memo: Any,
    **_: Any,
) -> None:
    memo.controller.pod_changed((namespace or "", labels[lbl.JOB_NAME]), name, uid)


def register_kueue() -> None:
    """With Kueue (``--kueue``): index the Workloads the operator creates (labelled with
    their job's name) and wake the job on each change of its Workload."""
    from kerasjob.integrations import kueue

    labels = {lbl.JOB_NAME: kopf.PRESENT}

    @kopf.index(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, labels=labels, id=WORKLOADS_INDEX)
    async def kerasjob_workloads(namespace: str | None, body: kopf.Body, **_: Any) -> Any:
        job = (body.get("metadata", {}).get("labels") or {}).get(lbl.JOB_NAME)
        fields = ("apiVersion", "kind", "metadata", "spec", "status")
        return {(namespace, job): {k: plain(body.get(k)) for k in fields if k in body}}

    @kopf.on.event(kueue.GROUP, kueue.VERSION, kueue.WORKLOADS, labels=labels)
    async def workload_event(namespace: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
        job = (body.get("metadata", {}).get("labels") or {}).get(lbl.JOB_NAME)
        if job:
            memo.controller.notify((namespace or "", job))


def register_gang() -> None:
    """With native gang scheduling (``--gang-scheduling``): index the PodGroups and
    scheduling Workloads the operator creates (labelled with their job's name); a change of a
    PodGroup (the scheduler's PodGroupScheduled verdict) wakes its job."""
    from kerasjob.integrations import gang

    labels = {lbl.JOB_NAME: kopf.PRESENT}
    fields = ("apiVersion", "kind", "metadata", "spec", "status")

    def _job(body: kopf.Body) -> Any:
        return (body.get("metadata", {}).get("labels") or {}).get(lbl.JOB_NAME)

    @kopf.index(gang.GROUP, gang.VERSION, gang.PODGROUPS, labels=labels, id=POD_GROUPS_INDEX)
    async def kerasjob_pod_groups(namespace: str | None, body: kopf.Body, **_: Any) -> Any:
        return {(namespace, _job(body)): {k: plain(body.get(k)) for k in fields if k in body}}

    @kopf.index(gang.GROUP, gang.VERSION, gang.WORKLOADS, labels=labels, id=GANG_WORKLOADS_INDEX)
    async def kerasjob_gang_workloads(namespace: str | None, body: kopf.Body, **_: Any) -> Any:
        return {(namespace, _job(body)): {"metadata": plain(body.get("metadata"))}}

    @kopf.on.event(gang.GROUP, gang.VERSION, gang.PODGROUPS, labels=labels)
    async def pod_group_event(namespace: str | None, body: kopf.Body, memo: Any, **_: Any) -> None:
        job = _job(body)
        if job:
            memo.controller.notify((namespace or "", job))


@kopf.on.login()
def login(memo: Any, settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    """kopf's watches use the same credentials as the controller's writes (`--kubeconfig`)."""
    config: OperatorConfig = memo.get("config") or OperatorConfig()
    cred = credentials.load(config.kubeconfig, config.context)
    return kopf.ConnectionInfo(
        server=cred.server,
        ca_path=cred.ca_file,
        insecure=not cred.verify,
        scheme="Bearer" if cred.token else None,
        token=cred.token,
        certificate_path=cred.cert_file,
        private_key_path=cred.key_file,
        trust_env=settings.networking.trust_env,
    )


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: Any, **kwargs: Any) -> None:
    # kopf passes every index as a keyword argument named after it (empty until listed).
    bodies: kopf.Index[Any, Any] = kwargs["kerasjob_bodies"]
    children_pods: kopf.Index[Any, Any] = kwargs["kerasjob_pods"]
    config: OperatorConfig = memo.get("config") or OperatorConfig()
    # We post our own, meaningful events; kopf's per-handler events would be noise.
    settings.posting.enabled = False
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    # kopf lists a resource whole at start and again whenever a watch cannot be resumed
    # (410 Gone: e.g. the API server closed a watch it found too slow, under load). A listing
    # of 2,400 Pods was 11.5 MB of text held three times and 56 MiB decoded, most of the
    # operator's peak memory at 300 jobs (tracemalloc); in pages of 500, as client-go's
    # reflectors list, it is a fifth of that at a time.
    settings.watching.chunk_size = 500
    # Exact namespace names need no namespace scanning, and the namespaced RBAC of the chart
    # grants none: without this kopf retries forbidden cluster-wide LISTs, logging errors.
    if config.namespaces and not any(set(ns) & set("*?[]!") for ns in config.namespaces):
        settings.scanning.disabled = True
    api = KubeApi(config.kubeconfig, config.context)
    integrations: list[Integration] = []
    if WORKLOADS_INDEX in kwargs:  # Kueue (`register_kueue`)
        integrations.append(KueueSync(api, bodies, kwargs[WORKLOADS_INDEX], config))
    if config.gang_scheduling:
        pod_groups, workloads = kwargs[POD_GROUPS_INDEX], kwargs[GANG_WORKLOADS_INDEX]
        integrations.append(GangSync(api, pod_groups, workloads))
    children = {"Service": kwargs[SERVICES_INDEX]}
    if POLICIES_INDEX in kwargs:  # `register_network_policies`
        children["NetworkPolicy"] = kwargs[POLICIES_INDEX]
    controller = Controller(config, api, bodies, children_pods, integrations, children)
    memo.controller = controller
    memo.controller_task = asyncio.create_task(controller.run(), name="kerasjob-controller")
    if config.metrics_port is not None:
        memo.metrics_runner = await metrics.serve(controller, config.metrics_port)
    log.info(
        "kerasjob controller started (%d workers, default images %s)",
        config.workers,
        ", ".join(f"{b}: {image}" for b, image in default_images(config).items()),
    )


@kopf.on.cleanup()
async def cleanup(memo: Any, **_: Any) -> None:
    controller: Controller | None = memo.get("controller")
    if controller is not None:
        await controller.stop()
    runner = memo.get("metrics_runner")
    if runner is not None:
        await runner.cleanup()


@kopf.on.probe(id="apiRequests")
async def api_requests(memo: Any, **_: Any) -> dict[str, int]:
    """Requests the controller made, by verb and resource (kopf's watches not included)."""
    controller: Controller | None = memo.get("controller")
    return dict(controller.api.requests) if controller is not None else {}


@kopf.on.probe(id="reconciles")
async def reconciles(memo: Any, **_: Any) -> int:
    controller: Controller | None = memo.get("controller")
    return controller.reconciles if controller is not None else 0
