"""A small synchronous Kubernetes API client on plain dicts (urllib3).

The SDK, the CLI and the dev tools (demo, e2e tests, benches) speak JSON to the API server
through this one class. Credentials come from `kerasjob.k8s.credentials.load`,
as for the operator; errors are the typed ones of `kerasjob.sdk.errors`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import urllib3

from kerasjob import PLURAL
from kerasjob.k8s import credentials
from kerasjob.sdk.errors import (
    ConfigurationError,
    NotFoundError,
    UnreachableError,
    from_response,
)

log = logging.getLogger(__name__)

JSON = "application/json"
MERGE = "application/merge-patch+json"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"

_KIND_OF_RESOURCE = {
    PLURAL: "KerasJob",
    "pods": "Pod",
    "configmaps": "ConfigMap",
    "events": "Event",
    "namespaces": "Namespace",
}


def _kind_of(path: str) -> str:
    """The kind a request path is about, for error messages ("/.../pods/x/log" -> Pod)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    for part in reversed(parts):
        if part in _KIND_OF_RESOURCE:
            return _KIND_OF_RESOURCE[part]
    return "object"


def _namespace_of(path: str) -> str | None:
    parts = path.split("/")
    return parts[parts.index("namespaces") + 1] if "namespaces" in parts[:-1] else None


class Transport:
    """HTTP to one API server with one set of credentials (reloaded once after a 401)."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        user_agent: str = "kerasjob-sdk",
    ) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.user_agent = user_agent
        self._load()

    def _load(self) -> None:
        try:
            cred = credentials.load(self.kubeconfig, self.context)
        except credentials.CredentialsError as e:
            raise ConfigurationError(f"no usable kubeconfig: {e}") from None
        self.base = cred.server
        self.headers = {"Accept": JSON, "User-Agent": self.user_agent}
        if cred.authorization:
            self.headers["Authorization"] = cred.authorization
        self.pool = urllib3.PoolManager(
            num_pools=2,
            maxsize=16,
            cert_reqs="CERT_REQUIRED" if cred.verify else "CERT_NONE",
            ca_certs=cred.ca_file,
            cert_file=cred.cert_file,
            key_file=cred.key_file,
            retries=False,
        )

    def url(self, path: str, query: dict[str, Any] | None = None) -> str:
        url = self.base + path
        if query:
            url += "?" + urlencode({k: v for k, v in query.items() if v is not None})
        return url

    def _send(
        self, method: str, url: str, *, extra_headers: dict[str, str] | None = None, **kwargs: Any
    ) -> urllib3.BaseHTTPResponse:
        for attempt in (1, 2):
            headers = {**self.headers, **(extra_headers or {})}
            try:
                resp = self.pool.request(method, url, headers=headers, **kwargs)
            except (urllib3.exceptions.HTTPError, OSError) as e:
                raise UnreachableError(
                    f"cannot reach the API server {self.base}: {type(e).__name__}"
                ) from None
            if resp.status != 401 or attempt == 2:
                return resp
            # Bound ServiceAccount tokens rotate on disk: reload once, then retry.
            log.info("API answered 401 Unauthorized; reloading credentials")
            resp.drain_conn()
            self._load()
        raise AssertionError("unreachable")  # pragma: no cover

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float = 15.0,
    ) -> dict[str, Any]:
        """One call; the decoded JSON body, or a typed `ApiError`."""
        data = None
        extra: dict[str, str] = {}
        if body is not None:
            data = json.dumps(body).encode()
            extra["Content-Type"] = content_type
        resp = self._send(
            method, self.url(path, query), body=data, timeout=timeout, extra_headers=extra
        )
        text = resp.data.decode(errors="replace")
        if resp.status >= 400:
            raise from_response(
                resp.status, text, kind=_kind_of(path), namespace=_namespace_of(path)
            )
        return json.loads(text) if text else {}

    def get(self, path: str, **query: Any) -> dict[str, Any] | None:
        """GET, with None for a missing object."""
        try:
            return self.request("GET", path, query=query or None)
        except NotFoundError:
            return None

    def lines(
        self, path: str, *, query: dict[str, Any] | None = None, read_timeout: float | None = None
    ) -> Iterator[str]:
        """A streamed text response (a followed log), line by line, until the server ends it."""
        resp = self._send(
            "GET",
            self.url(path, query),
            preload_content=False,
            timeout=urllib3.Timeout(connect=10, read=read_timeout),
            extra_headers={"Accept": "*/*"},
        )
        try:
            if resp.status >= 400:
                raise from_response(
                    resp.status, resp.data, kind=_kind_of(path), namespace=_namespace_of(path)
                )
            buf = b""
            try:
                for chunk in resp.stream(65536, decode_content=True):
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        yield line.decode(errors="replace")
            except (urllib3.exceptions.HTTPError, OSError):
                pass  # the kubelet or API server ended the stream: the caller decides
            if buf:
                yield buf.decode(errors="replace")
        finally:
            resp.release_conn()

    def watch(self, path: str, *, timeout_s: int, **query: Any) -> Iterator[dict[str, Any]]:
        """Watch events ({"type", "object"}) until the server ends the stream."""
        q = {**query, "watch": "true", "timeoutSeconds": timeout_s, "allowWatchBookmarks": "true"}
        for line in self.lines(path, query=q, read_timeout=timeout_s + 30):
            if line.strip():
                yield json.loads(line)
