"""API paths of the objects kerasjob reads and writes, built in one place (names and
namespaces are URL-quoted) for the operator's client, the SDK and the tools."""

from __future__ import annotations

from urllib.parse import quote

from kerasjob import API_GROUP, API_VERSION, PLURAL


def _core(namespace: str, resource: str, name: str | None, sub: str | None = None) -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/{resource}"
    if name:
        path += f"/{quote(name)}"
    return f"{path}/{sub}" if sub else path


def pod_path(namespace: str, name: str | None = None, sub: str = "") -> str:
    return _core(namespace, "pods", name, sub)


def service_path(namespace: str, name: str | None = None) -> str:
    return _core(namespace, "services", name)


def configmap_path(namespace: str, name: str | None = None) -> str:
    return _core(namespace, "configmaps", name)


def secret_path(namespace: str, name: str) -> str:
    """A Secret: the operator only reads the one a job's checkpoint.credentials names."""
    return _core(namespace, "secrets", name)


def events_path(namespace: str) -> str:
    return _core(namespace, "events", None)


def network_policy_path(namespace: str, name: str | None = None) -> str:
    path = f"/apis/networking.k8s.io/v1/namespaces/{quote(namespace)}/networkpolicies"
    return f"{path}/{quote(name)}" if name else path


def job_path(namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
    """A KerasJob (or, without a name, the collection; without a namespace, all of them)."""
    path = f"/apis/{API_GROUP}/{API_VERSION}"
    path += f"/namespaces/{quote(namespace)}/{PLURAL}" if namespace else f"/{PLURAL}"
    if name:
        path += f"/{quote(name)}"
    return f"{path}/{subresource}" if subresource else path


def priority_class_path(name: str | None = None) -> str:
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    return f"{path}/{quote(name)}" if name else path


# Kueue's objects (the operator's Kueue integration: `kueue`, `kueue.sync`).
KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"


def workload_path(namespace: str, name: str | None = None, subresource: str = "") -> str:
    path = f"{KUEUE_API}/namespaces/{quote(namespace)}/workloads"
    if name:
        path += f"/{quote(name)}"
    return f"{path}/{subresource}" if subresource else path


def resource_flavor_path(name: str) -> str:
    return f"{KUEUE_API}/resourceflavors/{quote(name)}"


def workload_priority_class_path(name: str) -> str:
    return f"{KUEUE_API}/workloadpriorityclasses/{quote(name)}"


# Native gang scheduling (`gang`, `gang.sync`): Kubernetes' own Workload and PodGroup.
SCHEDULING_API = "/apis/scheduling.k8s.io/v1alpha2"


def scheduling_workload_path(namespace: str, name: str | None = None) -> str:
    path = f"{SCHEDULING_API}/namespaces/{quote(namespace)}/workloads"
    return f"{path}/{quote(name)}" if name else path


def pod_group_path(namespace: str, name: str | None = None) -> str:
    path = f"{SCHEDULING_API}/namespaces/{quote(namespace)}/podgroups"
    return f"{path}/{quote(name)}" if name else path
