"""A minimal Kubernetes API client on plain dicts.

The demo and the end-to-end tests need a dozen calls (Pods, jobs, logs, evictions). Working on the
JSON the API server speaks keeps status building and volume resolution pure functions of
dicts, and avoids depending on the generated client's model classes. Credentials come from
the kubeconfig through `kerasjob.kube.client_configuration`, as for the operator.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import urllib3

from kerasjob.kube import client_configuration

log = logging.getLogger(__name__)

STRATEGIC_MERGE = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: str) -> None:
        try:
            message = json.loads(body).get("message", body)
        except ValueError:
            message = body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")
        self.status = status


class Kube:
    def __init__(self, kubeconfig: str | None = None) -> None:
        cfg = client_configuration(kubeconfig, None)
        self.base = cfg.host.rstrip("/")
        self.headers = {"Accept": "application/json", "User-Agent": "kerasjob-dev"}
        token = cfg.get_api_key_with_prefix("BearerToken") or cfg.get_api_key_with_prefix(
            "authorization"
        )
        if token:
            self.headers["Authorization"] = token
        self.pool = urllib3.PoolManager(
            num_pools=2,
            maxsize=8,
            cert_reqs="CERT_REQUIRED" if cfg.verify_ssl else "CERT_NONE",
            ca_certs=cfg.ssl_ca_cert,
            cert_file=cfg.cert_file,
            key_file=cfg.key_file,
            retries=False,
        )

    def _url(self, path: str, query: dict[str, Any] | None) -> str:
        url = self.base + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        return url

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 15.0,
    ) -> dict:
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        resp = self.pool.request(
            method, self._url(path, query), body=data, headers=headers, timeout=timeout
        )
        text = resp.data.decode(errors="replace")
        if resp.status >= 400:
            raise ApiError(resp.status, method, path, text)
        return json.loads(text) if text else {}

    def get(self, path: str, **query: Any) -> dict | None:
        """GET, with None for 404."""
        try:
            return self.request("GET", path, query=query or None)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def pod_log(self, namespace: str, pod: str, container: str = "trainer") -> str:
        """The current container's log, as `kubectl logs` shows it ("" when there is none
        yet, or the API server or kubelet cannot be reached)."""
        try:
            resp = self.pool.request(
                "GET",
                f"{self.base}{pod_path(namespace, pod, 'log')}?container={container}",
                headers={**self.headers, "Accept": "*/*"},
                timeout=10,
            )
        except OSError:
            return ""
        return resp.data.decode(errors="replace") if resp.status == 200 else ""

    def watch(self, path: str, *, timeout_s: int, **query: Any) -> Iterator[dict]:
        """Watch events ({"type", "object"}) until the server ends the stream."""
        q = {**query, "watch": "true", "timeoutSeconds": timeout_s, "allowWatchBookmarks": "true"}
        resp = self.pool.request(
            "GET",
            self._url(path, q),
            headers=self.headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=timeout_s + 30),
        )
        try:
            if resp.status >= 400:
                raise ApiError(resp.status, "WATCH", path, resp.data.decode(errors="replace"))
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"
    return f"{path}/{sub}" if sub else path


_PATHS = {
    "PersistentVolumeClaim": "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
    "PersistentVolume": "/api/v1/persistentvolumes/{name}",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps/{name}",
    "Secret": "/api/v1/namespaces/{ns}/secrets/{name}",
}


def lookup(kube: Kube):
    """A `Lookup` (kind, namespace, name) -> object | None backed by the API server."""

    def get(kind: str, namespace: str, name: str) -> dict | None:
        return kube.get(_PATHS[kind].format(ns=quote(namespace), name=quote(name)))

    return get
