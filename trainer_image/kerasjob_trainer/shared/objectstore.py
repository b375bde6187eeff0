"""A bucket as the trainer uses it: small objects by key, listed by prefix, and one write
that only creates (the fence every commit stands on).

Two stores, each through the client its users already trust: S3 and S3-compatible
stores through `obstore` (Rust's object_store: SigV4, any endpoint, path-style or virtual
hosts, `mode="create"` is S3's conditional `If-None-Match: *`); GCS through
`google-cloud-storage` (`if_generation_match=0`). Both answer a second create of the same
key with a refusal (412 on the wire), checked against versitygw and fake-gcs-server.

    store = open_store(Location.parse("s3://bucket/prefix"), endpoint="http://127.0.0.1:7070")
    store.put("a/b", b"...", create_only=True)   # True: created; False: it existed
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
from collections.abc import Mapping
from typing import Any, Protocol

SCHEMES = ("s3", "gs")


@dataclasses.dataclass(frozen=True)
class Location:
    """`<scheme>://<bucket>/<prefix>` (prefix without leading or trailing slashes)."""

    scheme: str
    bucket: str
    prefix: str = ""

    @classmethod
    def parse(cls, url: str) -> Location:
        scheme, sep, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        if not sep or scheme not in SCHEMES or not bucket:
            raise ValueError(
                f"a bucket location is s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX], not {url!r}"
            )
        return cls(scheme, bucket, prefix.strip("/"))

    def key(self, *parts: str) -> str:
        """The object key of `parts` under this location's prefix."""
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.prefix}".rstrip("/")


class ObjectStore(Protocol):
    """Keys are full object keys (`Location.key`)."""

    def put(self, key: str, data: bytes, *, create_only: bool = False) -> bool:
        """Write `key`; with `create_only`, only when it does not exist (False: it did)."""
        ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        ...

    def list(self, prefix: str) -> list[str]:
        """Every key under `prefix` (a "directory": give it a trailing slash)."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key` (gone already is fine)."""
        ...


class S3Store:
    """S3 or an S3-compatible store through obstore."""

    def __init__(self, location: Location, **options: Any) -> None:
        from obstore.store import S3Store as _S3

        self._store = _S3(location.bucket, **options)

    def put(self, key: str, data: bytes, *, create_only: bool = False) -> bool:
        import obstore
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            obstore.put(self._store, key, data, mode="create" if create_only else "overwrite")
        except (AlreadyExistsError, PreconditionError):
            return False
        return True

    def get(self, key: str) -> bytes | None:
        import obstore

        try:
            return bytes(obstore.get(self._store, key).bytes())
        except FileNotFoundError:  # obstore's NotFoundError is one
            return None

    def list(self, prefix: str) -> list[str]:
        import obstore

        return [m["path"] for batch in obstore.list(self._store, prefix) for m in batch]

    def delete(self, key: str) -> None:
        import obstore

        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self._store, key)


class GcsStore:
    """GCS (or its emulator, `endpoint`) through google-cloud-storage."""

    def __init__(
        self, location: Location, endpoint: str | None = None, patience_s: float | None = None
    ) -> None:
        from google.api_core.retry import Retry
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY

        if endpoint:  # an emulator: no Google credentials
            from google.auth.credentials import AnonymousCredentials

            client = storage.Client(
                project="kerasjob",
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
                client_options={"api_endpoint": endpoint},
            )
        else:
            client = storage.Client()
        self._bucket = client.bucket(location.bucket)
        # Every call's retries end after `patience_s` (the library's default: 120 s).
        self._calls: dict[str, Any] = {}
        if patience_s is not None:
            retry: Retry = DEFAULT_RETRY.with_deadline(patience_s)
            self._calls = {"retry": retry, "timeout": (min(5.0, patience_s), 120.0)}

    def put(self, key: str, data: bytes, *, create_only: bool = False) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        blob = self._bucket.blob(key)
        try:
            blob.upload_from_string(
                data, if_generation_match=0 if create_only else None, **self._calls
            )
        except PreconditionFailed:
            return False
        return True

    def get(self, key: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return bytes(self._bucket.blob(key).download_as_bytes(**self._calls))
        except NotFound:
            return None

    def list(self, prefix: str) -> list[str]:
        blobs = self._bucket.client.list_blobs(self._bucket, prefix=prefix, **self._calls)
        return [b.name for b in blobs]

    def delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        with contextlib.suppress(NotFound):
            self._bucket.blob(key).delete(**self._calls)


def s3_options(
    env: Mapping[str, str],
    endpoint: str | None,
    region: str | None,
    path_style: bool,
    patience_s: float | None = None,
) -> dict[str, Any]:
    """obstore's S3 options: the endpoint and addressing the job names, the credentials of
    the standard AWS variables (from a Secret the job names, or none: the Pod's identity);
    with `patience_s`, retries end after that long (obstore's default: 3 minutes)."""
    options: dict[str, Any] = {"region": region or env.get("AWS_REGION") or "us-east-1"}
    if patience_s is not None:
        options["retry_config"] = {
            "max_retries": 10,
            "retry_timeout": datetime.timedelta(seconds=patience_s),
        }
        options["client_options"] = {"connect_timeout": f"{min(5.0, patience_s)}s"}
    if endpoint:
        options["endpoint"] = endpoint
        options["allow_http"] = endpoint.startswith("http://")
    options["virtual_hosted_style_request"] = not path_style
    for var, name in (
        ("AWS_ACCESS_KEY_ID", "access_key_id"),
        ("AWS_SECRET_ACCESS_KEY", "secret_access_key"),
        ("AWS_SESSION_TOKEN", "token"),
    ):
        if env.get(var):
            options[name] = env[var]
    return options


def open_store(
    location: Location,
    *,
    endpoint: str | None = None,
    region: str | None = None,
    path_style: bool = False,
    env: Mapping[str, str] | None = None,
    patience_s: float | None = None,
) -> ObjectStore:
    """The store of `location` (its scheme's client, imported only now); with `patience_s`,
    a request that keeps failing (the store unreachable) gives up after about that long."""
    if location.scheme == "s3":
        options = s3_options(env or os.environ, endpoint, region, path_style, patience_s)
        return S3Store(location, **options)
    return GcsStore(location, endpoint, patience_s)
