"""Kueue for the tests: the real Kueue manager (`hack/cluster/kueue.sh`) on the local cluster,
an operator running with ``--kueue``, and helpers for Kueue's objects.

* :func:`ensure_kueue` -- on the local cluster, build (cached) and start Kueue with its CRDs
  and webhooks; on another cluster (``KERASJOB_TEST_CLUSTER=current``) Kueue must already be
  installed, with KerasJob in its ``integrations.externalFrameworks``.
* :func:`kueue_operator` -- one operator per test session with ``--kueue``, watching the
  ``<KUEUE_PREFIX>-*`` namespaces only (so no other session's operator handles its jobs).
* :func:`cluster_queue` -- a ResourceFlavor, a ClusterQueue with a cpu quota and a LocalQueue
  in a namespace; deleted afterwards.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kerasjob.planner.conditions import condition_true, get_condition
from kerasjob_dev.cluster import (
    REPO_ROOT,
    Cluster,
    create_namespace,
    delete_namespace,
    wait_for,
)
from kerasjob_dev.harness import OperatorProcess, custom, install_crds, job_status

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = f"{GROUP}/queue-name"
PRIORITY_LABEL = f"{GROUP}/priority-class"
KUEUE_PREFIX = f"kq{os.getpid()}"
_operator: list[OperatorProcess] = []


#: Kueue's waitForPodsReady timeout on the local cluster (Pods on KWOK are ready in ~1 s).
PODS_READY_TIMEOUT = "20s"


#: The waitForPodsReady and feature gate settings of the Kueue this process started ([]
#: before any).
_kueue_setting: list[tuple[str, str, str]] = []


def ensure_kueue(
    cluster: Cluster,
    *,
    pods_ready_timeout: str | None = PODS_READY_TIMEOUT,
    feature_gates: str | None = None,
    device_class_mappings: str | None = None,
) -> None:
    """Kueue on the local cluster with this waitForPodsReady setting and these feature
    gates (None: kueue.sh's, with ElasticJobsViaWorkloadSlices): started once, and
    restarted when a caller asks for other settings than the running one's (the e2e test
    wants no waitForPodsReady, the integration tests 20 s; whichever ran first used to
    win). ``device_class_mappings``: kueue.sh's KUEUE_DEVICE_CLASS_MAPPINGS (DRA devices
    counted against quota; with the DynamicResourceAllocation gate)."""
    if cluster.local:
        env = cluster.env()
        env["KUEUE_PODS_READY_TIMEOUT"] = pods_ready_timeout or ""
        env["KUEUE_DEVICE_CLASS_MAPPINGS"] = device_class_mappings or ""
        if feature_gates is not None:
            env["KUEUE_FEATURE_GATES"] = feature_gates
        setting = (pods_ready_timeout or "", feature_gates or "", device_class_mappings or "")
        script = str(REPO_ROOT / "hack" / "cluster" / "kueue.sh")
        if _kueue_setting and _kueue_setting[0] != setting:
            subprocess.run([script, "down"], check=True, env=env, cwd=REPO_ROOT)
        subprocess.run([script, "up"], check=True, env=env, cwd=REPO_ROOT)
        _kueue_setting[:] = [setting]
    cluster.kubectl("get", "crd", f"workloads.{GROUP}")


def kueue_namespace(kube: Any) -> Iterator[str]:
    """A namespace of the session's Kueue operator (``<KUEUE_PREFIX>-*``) for one test,
    deleted afterwards: ``yield from kueue_namespace(kube)`` in a fixture."""
    name = create_namespace(kube, prefix=KUEUE_PREFIX)
    try:
        yield name
    finally:
        delete_namespace(kube, name)


def kueue_operator(cluster: Cluster) -> OperatorProcess:
    """This session's operator with ``--kueue`` for ``<KUEUE_PREFIX>-*`` namespaces."""
    install_crds(cluster)  # first: Kueue's manager looks the external framework's kind up
    ensure_kueue(cluster)
    if not _operator:
        op = OperatorProcess(cluster, (f"{KUEUE_PREFIX}-*",), name="kueue", extra_args=("--kueue",))
        _operator.append(op)
        atexit.register(op.stop)
        op.start()
    elif not _operator[0].alive():
        _operator[0].start()
    return _operator[0]


def _create_cluster_scoped(kube: Any, plural: str, body: dict[str, Any]) -> None:
    custom(kube).create_cluster_custom_object(GROUP, VERSION, plural, body)


def _delete_cluster_scoped(kube: Any, plural: str, name: str) -> None:
    from kubernetes.client.rest import ApiException

    try:
        custom(kube).delete_cluster_custom_object(GROUP, VERSION, plural, name)
    except ApiException as e:
        if e.status != 404:
            raise


@contextmanager
def cluster_queue(
    kube: Any,
    namespace: str,
    *,
    cpu: str,
    memory: str | None = None,
    node_labels: dict[str, str] | None = None,
    priorities: dict[str, int] | None = None,
    extra_quota: dict[str, str] | None = None,
) -> Iterator[str]:
    """A ResourceFlavor, a ClusterQueue with ``cpu`` (and ``memory``: Pods that request
    memory need it covered) of quota, preempting lower priorities within itself, and the
    LocalQueue ``<namespace's queue>``; yields the LocalQueue's name. ``priorities``:
    WorkloadPriorityClasses to create (name -> value); ``extra_quota``: other resources the
    Pods request (Kueue admits no Workload with a resource its ClusterQueue does not cover)."""
    suffix = uuid.uuid4().hex[:6]
    flavor, cq, lq = f"kj-flavor-{suffix}", f"kj-cq-{suffix}", "team-queue"
    made: list[tuple[str, str]] = []
    quota = [("cpu", cpu)] + ([("memory", memory)] if memory else [])
    quota += list((extra_quota or {}).items())
    try:
        _create_cluster_scoped(
            kube,
            "resourceflavors",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ResourceFlavor",
                "metadata": {"name": flavor},
                "spec": {"nodeLabels": node_labels or {}},
            },
        )
        made.append(("resourceflavors", flavor))
        for name, value in (priorities or {}).items():
            _create_cluster_scoped(
                kube,
                "workloadpriorityclasses",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "WorkloadPriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                },
            )
            made.append(("workloadpriorityclasses", name))
        _create_cluster_scoped(
            kube,
            "clusterqueues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "ClusterQueue",
                "metadata": {"name": cq},
                "spec": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "resourceGroups": [
                        {
                            "coveredResources": [r for r, _ in quota],
                            "flavors": [
                                {
                                    "name": flavor,
                                    "resources": [{"name": r, "nominalQuota": q} for r, q in quota],
                                }
                            ],
                        }
                    ],
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                },
            },
        )
        made.append(("clusterqueues", cq))
        custom(kube).create_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "localqueues",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": namespace},
                "spec": {"clusterQueue": cq},
            },
        )
        yield lq
    finally:
        for plural, name in reversed(made):
            _delete_cluster_scoped(kube, plural, name)


def workload_of(kube: Any, namespace: str, job: str) -> dict[str, Any] | None:
    """The Workload the operator made for KerasJob ``job`` (by its job-name label)."""
    items = custom(kube).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "workloads", label_selector=f"kerasjob.dev/job-name={job}"
    )["items"]
    return items[0] if items else None


def wl_condition(workload: dict[str, Any] | None, type_: str) -> Mapping[str, Any] | None:
    return get_condition(((workload or {}).get("status") or {}).get("conditions") or [], type_)


def wl_true(workload: dict[str, Any] | None, type_: str) -> bool:
    return condition_true(((workload or {}).get("status") or {}).get("conditions") or [], type_)


def wait_admitted(
    cluster: Cluster,
    kube: Any,
    namespace: str,
    job: str,
    *,
    timeout: float,
    interval: float = 0.1,
    operator: OperatorProcess | None = None,
) -> dict[str, Any]:
    """Wait until KerasJob ``job``'s Workload is Admitted and return it. On a timeout the
    error says where it stuck: the job's status, every Workload of the namespace with its
    conditions, the operator's log tail and Kueue's lines about the namespace."""
    try:
        return wait_for(
            lambda: (wl := workload_of(kube, namespace, job)) and wl_true(wl, "Admitted") and wl,
            timeout=timeout,
            interval=interval,
            what=f"{job}'s Workload admitted",
        )
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{_explain(cluster, kube, namespace, job, operator)}") from None


def _explain(
    cluster: Cluster, kube: Any, namespace: str, job: str, operator: OperatorProcess | None
) -> str:
    out: list[str] = []
    try:
        out.append(f"job {job} status: {job_status(kube, namespace, job)}")
        items = custom(kube).list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")[
            "items"
        ]
        for wl in items:
            conditions = [
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                for c in (wl.get("status") or {}).get("conditions") or []
            ]
            out.append(f"Workload {wl['metadata']['name']}: {conditions}")
        if not items:
            out.append(f"no Workload in {namespace}")
    except Exception as e:  # a diagnosis must not hide the timeout it explains
        out.append(f"(reading the job and its Workloads failed: {e.__class__.__name__}: {e})")
    if operator is not None:
        out.append(f"operator log:\n{operator.log_tail(40)}")
    kueue_log = cluster.kubeconfig.parent / "logs" / "kueue.log"
    if cluster.local and kueue_log.exists():
        mine = [
            line for line in kueue_log.read_text(errors="replace").splitlines() if namespace in line
        ]
        out.append(f"Kueue's log about {namespace}:\n" + "\n".join(mine[-30:]))
    return "\n".join(out)
