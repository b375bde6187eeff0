"""A small asynchronous Kubernetes API client for the controller's writes.

kopf watches and indexes; this client makes the few calls the controller needs (create,
delete, patch status, post events) on one aiohttp session. Credentials come from
`kerasjob.k8s.credentials.load` (kubeconfig or in-cluster), as for the SDK and CLI.
Every request is counted by verb and resource, for the liveness/metrics probe and benches.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from kerasjob.k8s import bounded, credentials

__all__ = ["ApiError", "KubeApi"]

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """An API call answered with a status >= 400."""

    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        self.status = status
        self.body = body
        reason = body.get("message") if isinstance(body, Mapping) else str(body)[:300]
        super().__init__(f"{method} {path}: {status} {reason}")


@dataclass
class _Auth:
    host: str
    ssl_context: ssl.SSLContext | bool
    headers: dict[str, str]


def _load_auth(kubeconfig: str | None, context: str | None) -> _Auth:
    cred = credentials.load(kubeconfig, context)
    ctx: ssl.SSLContext | bool = False  # insecure, no client certificate: aiohttp's "no TLS check"
    if cred.verify or cred.cert_file:
        ctx = ssl.create_default_context(cafile=cred.ca_file if cred.verify else None)
        if not cred.verify:  # insecure-skip-tls-verify, but a client certificate to present
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cred.cert_file:
            ctx.load_cert_chain(cred.cert_file, cred.key_file)
    headers = {"Accept": "application/json", "User-Agent": "kerasjob-operator"}
    if cred.authorization:
        headers["Authorization"] = cred.authorization
    return _Auth(host=cred.server, ssl_context=ctx, headers=headers)


class KubeApi:
    """The controller's API client. Create it inside the running event loop."""

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        *,
        concurrency: int = 32,
        timeout: float = 30.0,
    ) -> None:
        self._kubeconfig = kubeconfig
        self._context = context
        self._auth = _load_auth(kubeconfig, context)
        self._session: aiohttp.ClientSession | None = None
        self._concurrency = concurrency
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self.requests: Counter[str] = Counter()
        """Requests made, keyed by "VERB resource" (e.g. "create pods")."""

    async def _ensure(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._concurrency, ssl=self._auth.ssl_context)
            self._session = aiohttp.ClientSession(
                connector=connector, headers=self._auth.headers, timeout=self._timeout
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        count_as: str,
    ) -> Any:
        """One API call; returns the decoded JSON body or raises `ApiError`."""
        try:
            return await self._request_once(method, path, body, params, content_type, count_as)
        except ApiError as e:
            if e.status != 401:
                raise
        # Bound ServiceAccount tokens rotate: the kubelet rewrites the projected token file
        # and the old one expires. Reload credentials once and retry before giving up.
        log.info("API answered 401 Unauthorized; reloading credentials")
        await self.close()
        self._auth = _load_auth(self._kubeconfig, self._context)
        return await self._request_once(method, path, body, params, content_type, count_as)

    async def _request_once(
        self,
        method: str,
        path: str,
        body: Any,
        params: Mapping[str, str] | None,
        content_type: str,
        count_as: str,
    ) -> Any:
        session = await self._ensure()
        self.requests[count_as] += 1
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        async with session.request(
            method, self._auth.host + path, data=data, params=params, headers=headers
        ) as resp:
            text = await resp.text()
            try:
                decoded = json.loads(text) if text else None
            except json.JSONDecodeError:
                decoded = text
            if resp.status >= 400:
                raise ApiError(resp.status, method, path, decoded)
            return decoded

    # -- the calls the controller makes ------------------------------------------------

    async def create(
        self, path: str, obj: Mapping[str, Any], resource: str, *, strict: bool = False
    ) -> bool:
        """Create; False (no error) when it already exists. ``strict``: unknown and
        duplicate fields are a 400 error instead of being dropped (fieldValidation=Strict)."""
        return await self.create_object(path, obj, resource, strict=strict) is not None

    async def create_object(
        self, path: str, obj: Mapping[str, Any], resource: str, *, strict: bool = False
    ) -> Mapping[str, Any] | None:
        """Create; the created object, or None (no error) when it already exists."""
        params = {"fieldValidation": "Strict"} if strict else None
        try:
            created = await self.request(
                "POST", path, body=obj, params=params, count_as=f"create {resource}"
            )
        except ApiError as e:
            if e.status == 409:
                return None
            raise
        return created if isinstance(created, Mapping) else {}

    async def delete(
        self,
        path: str,
        resource: str,
        *,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
        propagation: str | None = None,
    ) -> bool:
        """Delete, only the incarnation ``uid`` when given; False when already gone."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if propagation:
            options["propagationPolicy"] = propagation
        try:
            await self.request("DELETE", path, body=options, count_as=f"delete {resource}")
        except ApiError as e:
            if e.status in (404, 409):  # gone, or a newer incarnation: not ours to delete
                return False
            raise
        return True

    async def merge_patch(self, path: str, patch: Mapping[str, Any], resource: str) -> Any:
        """The patched object, at most `bounded.BODY_DEPTH` levels deep."""
        written = await self.request(
            "PATCH", path, body=patch, content_type=MERGE_PATCH, count_as=f"patch {resource}"
        )
        return bounded.prune(written)


async def gather_limited(coros: list[Any], limit: int = 16) -> list[Any]:
    """Run coroutines concurrently, at most ``limit`` at a time; exceptions are returned."""
    sem = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with sem:
            return await c

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
