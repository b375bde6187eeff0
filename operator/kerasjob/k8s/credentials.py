"""Credentials: the ONE place where the operator, the SDK, the CLI and the dev tools load them.

`load` reads a kubeconfig (an explicit file, else $KUBECONFIG, else ~/.kube/config) with an
optional context, and falls back to the in-cluster ServiceAccount when no kubeconfig is
there. The result is a small `Credentials` (server, CA, client certificate and key, bearer
token) from which each client builds its own transport (aiohttp in the operator, urllib3 in
the SDK).

Our own reader, not the `kubernetes` package's: that package costs the operator 10 MiB of
its resident memory at start (65 -> 55 MiB: its generated models come with it) and 128 MB of
its image, for what is ~150 lines here.
What kubectl supports is supported: certificate/key/CA as files (relative to the kubeconfig)
or inline data, `token`, `tokenFile`, `insecure-skip-tls-verify`, and
exec credential plugins (client.authentication.k8s.io, as GKE, EKS and AKS use). The legacy
`auth-provider` (removed from kubectl in 1.26) is refused with a clear error.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# In a Pod: the ServiceAccount's projected token, CA and namespace (kubelet-mounted).
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class CredentialsError(Exception):
    """No usable kubeconfig or in-cluster credentials; the message says why, in one line."""


@dataclass(frozen=True)
class Credentials:
    server: str  # https://host:port, no trailing slash
    ca_file: str | None = None  # None: the system's trust store
    verify: bool = True  # False: insecure-skip-tls-verify
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None

    @property
    def authorization(self) -> str | None:
        """The Authorization header's value, or None."""
        return f"Bearer {self.token}" if self.token else None


def default_kubeconfig() -> str:
    """The kubeconfig file used when none is named: the first of $KUBECONFIG, ~/.kube/config."""
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return os.path.expanduser(first or "~/.kube/config")


def load(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Credentials from ``kubeconfig`` (default: $KUBECONFIG, ~/.kube/config), else in-cluster.

    An explicit ``kubeconfig`` or ``context`` that cannot be used is an error (no silent
    in-cluster fallback), as is a default kubeconfig that exists but is broken. Raises
    `CredentialsError`.
    """
    path = Path(kubeconfig or default_kubeconfig())
    if not path.exists() and not kubeconfig and not context:
        return in_cluster()
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise CredentialsError(f"cannot read kubeconfig {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise CredentialsError(f"kubeconfig {path} is not valid YAML: {e}") from None
    if not isinstance(doc, dict):
        raise CredentialsError(f"kubeconfig {path} is not a kubeconfig (not a mapping)")
    return _from_kubeconfig(doc, path, context)


def in_cluster() -> Credentials:
    """The Pod's ServiceAccount: $KUBERNETES_SERVICE_HOST/PORT, its token and CA."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    token_file = SERVICE_ACCOUNT_DIR / "token"
    if not host or not port or not token_file.exists():
        raise CredentialsError(
            f"no kubeconfig at {default_kubeconfig()} and not in a Pod "
            "(no $KUBERNETES_SERVICE_HOST/PORT or ServiceAccount token)"
        )
    if ":" in host:  # IPv6
        host = f"[{host}]"
    token = token_file.read_text().strip()
    ca = SERVICE_ACCOUNT_DIR / "ca.crt"
    return Credentials(
        server=f"https://{host}:{port}",
        ca_file=str(ca) if ca.exists() else None,
        token=token or None,
    )


def current_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's (current or named) context, else the ServiceAccount's
    namespace in a Pod, else "default" (kubectl's rule)."""
    try:
        doc = yaml.safe_load(Path(kubeconfig or default_kubeconfig()).read_text())
        name = context or (doc or {}).get("current-context")
        ctx = _named(doc, "contexts", name, "context") if name else {}
        if isinstance(ctx, dict) and ctx.get("namespace"):
            return str(ctx["namespace"])
    except (OSError, yaml.YAMLError, CredentialsError, AttributeError, TypeError):
        pass
    try:
        return (SERVICE_ACCOUNT_DIR / "namespace").read_text().strip() or "default"
    except OSError:
        return "default"


def _named(doc: Any, section: str, name: str | None, key: str) -> dict[str, Any]:
    """The entry ``name`` of a kubeconfig list (clusters, users, contexts): its ``key`` map.
    None (a context naming no cluster) finds no entry, like any unknown name."""
    for entry in (doc or {}).get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            value = entry.get(key) or {}
            if not isinstance(value, dict):
                raise CredentialsError(f"kubeconfig {section[:-1]} {name!r} is not a mapping")
            return value
    raise CredentialsError(f"kubeconfig has no {section[:-1]} named {name!r}")


def _from_kubeconfig(doc: dict[str, Any], path: Path, context: str | None) -> Credentials:
    name = context or doc.get("current-context")
    if not name:
        raise CredentialsError(f"kubeconfig {path} has no current-context (name one: --context)")
    ctx = _named(doc, "contexts", name, "context")
    cluster = _named(doc, "clusters", ctx.get("cluster"), "cluster")
    user = _named(doc, "users", ctx["user"], "user") if ctx.get("user") else {}
    base = path.parent
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise CredentialsError(f"kubeconfig cluster {ctx.get('cluster')!r} has no server")
    if user.get("auth-provider"):
        raise CredentialsError(
            f"kubeconfig user {ctx.get('user')!r} uses auth-provider, which kubectl dropped in "
            "1.26: use an exec credential plugin"
        )
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = _read(base, user["tokenFile"]).strip()
    cert = _file(base, user, "client-certificate")
    key = _file(base, user, "client-key")
    if user.get("exec"):
        got = _exec(user["exec"], cluster)
        token = got.get("token") or token
        if got.get("clientCertificateData"):
            cert = _data_file(got["clientCertificateData"].encode(), "crt")
            key = _data_file(str(got.get("clientKeyData") or "").encode(), "key")
    if user.get("username") and not token and not cert:
        raise CredentialsError("kubeconfig basic auth (username/password) is not supported")
    return Credentials(
        server=server,
        ca_file=_file(base, cluster, "certificate-authority"),
        verify=not cluster.get("insecure-skip-tls-verify", False),
        cert_file=cert,
        key_file=key,
        token=str(token) if token else None,
    )


def _read(base: Path, name: str) -> str:
    try:
        return (base / os.path.expanduser(name)).read_text()
    except OSError as e:
        raise CredentialsError(f"kubeconfig names {name}: {e.strerror or e}") from None


def _file(base: Path, section: dict[str, Any], field: str) -> str | None:
    """A file for ``field`` (e.g. client-key): ``field-data`` (base64) written to a private
    file, else ``field`` as a path relative to the kubeconfig's directory."""
    data = section.get(f"{field}-data")
    if data:
        try:
            raw = base64.b64decode(data)
        except ValueError:
            raise CredentialsError(f"kubeconfig {field}-data is not base64") from None
        return _data_file(raw, field)
    if section.get(field):
        path = base / os.path.expanduser(str(section[field]))
        if not path.exists():
            raise CredentialsError(f"kubeconfig {field} {path} does not exist")
        return str(path)
    return None


def _data_file(raw: bytes, suffix: str) -> str:
    """Inline PEM as a private file (ssl needs paths), named by its content: loading the same
    credentials again (after a 401, in another client) reuses it instead of adding files.
    A file of that name is reused only if it is ours, regular and holds exactly ``raw``
    (the temp directory is shared: anyone could have made the name first)."""
    digest = hashlib.sha256(raw).hexdigest()[:24]
    path = Path(tempfile.gettempdir()) / f"kerasjob-{os.getuid()}-{digest}.{suffix}"
    try:
        st = path.lstat()
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and path.read_bytes() == raw:
            return str(path)
    except OSError:
        pass
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="kerasjob-", suffix=f".{suffix}")
    with os.fdopen(fd, "wb") as f:  # mode 0600
        f.write(raw)
    try:
        os.replace(tmp, path)
    except OSError:  # the name is someone else's: this load keeps its own file
        return tmp
    return str(path)


def _exec(spec: dict[str, Any], cluster: dict[str, Any]) -> dict[str, Any]:
    """Run an exec credential plugin; its ExecCredential's status (token or client cert)."""
    command = spec.get("command")
    if not command:
        raise CredentialsError("kubeconfig exec plugin has no command")
    api_version = spec.get("apiVersion") or "client.authentication.k8s.io/v1"
    env = dict(os.environ)
    for item in spec.get("env") or []:
        env[str(item["name"])] = str(item["value"])
    info: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    if spec.get("provideClusterInfo"):
        info["spec"]["cluster"] = {k: v for k, v in cluster.items() if k != "extensions"}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
    try:
        done = subprocess.run(
            [command, *map(str, spec.get("args") or [])],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        hint = f" ({spec['installHint']})" if spec.get("installHint") else ""
        raise CredentialsError(f"kubeconfig exec plugin {command}: {e}{hint}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise CredentialsError(f"kubeconfig exec plugin {command} exited {done.returncode}: {last}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except (ValueError, AttributeError):
        raise CredentialsError(f"kubeconfig exec plugin {command}: not an ExecCredential") from None
    if not isinstance(status, dict) or not (
        status.get("token") or status.get("clientCertificateData")
    ):
        raise CredentialsError(
            f"kubeconfig exec plugin {command} gave neither a token nor a certificate"
        )
    return status
