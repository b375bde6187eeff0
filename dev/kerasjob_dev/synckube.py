"""The dev tools' Kubernetes API client: the SDK's transport, under the names they use.

The demo, the end-to-end tests and the benches need a dozen calls (Pods, jobs, logs,
evictions) on plain dicts. They use `kerasjob.sdk.transport.Transport`, the SDK's own
client: one set of credentials (`kerasjob.k8s.credentials`), one pod-log reader, one error
mapping (`kerasjob.sdk.errors`; ``ApiError.status`` is the HTTP status).
"""

from __future__ import annotations

from kerasjob.k8s.paths import pod_path
from kerasjob.sdk.errors import ApiError
from kerasjob.sdk.logs import pod_log_text
from kerasjob.sdk.transport import MERGE, STRATEGIC_MERGE, Transport
from kerasjob_contract import TRAINER_CONTAINER

__all__ = ["MERGE", "STRATEGIC_MERGE", "ApiError", "Kube", "lookup", "pod_path"]


class Kube(Transport):
    """`Transport` with the dev tools' User-Agent and the SDK's pod-log reader."""

    def __init__(self, kubeconfig: str | None = None) -> None:
        super().__init__(kubeconfig, None, user_agent="kerasjob-dev")

    def pod_log(
        self,
        namespace: str,
        pod: str,
        container: str = TRAINER_CONTAINER,
        tail_lines: int | None = None,
    ) -> str:
        """The container's log now (its last `tail_lines` lines); "" before it has one
        (`kerasjob.sdk.logs.pod_log_text`)."""
        return pod_log_text(self, namespace, pod, container, tail_lines)


_PATHS = {
    "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
    "PersistentVolume": "/api/v1/persistentvolumes/{name}",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps/{name}",
    "Secret": "/api/v1/namespaces/{ns}/secrets/{name}",
}


def lookup(kube: Kube):
    """A `Lookup` (kind, namespace, name) -> object | None backed by the API server."""
    from urllib.parse import quote

    def get(kind: str, namespace: str, name: str) -> dict | None:
        return kube.get(_PATHS[kind].format(ns=quote(namespace), name=quote(name)))

    return get
