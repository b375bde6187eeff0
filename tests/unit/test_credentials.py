"""kerasjob.k8s.credentials: kubeconfig (files, inline data, tokens, exec plugins), in-cluster."""

from __future__ import annotations

import base64
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kerasjob.k8s import credentials
from kerasjob.k8s.credentials import CredentialsError


def _kubeconfig(
    path: Path,
    users: dict[str, dict[str, Any]],
    current: str = "a",
    cluster: dict[str, Any] | None = None,
) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://10.0.0.1:6443/"}}],
        "users": [{"name": n, "user": u} for n, u in users.items()],
        "contexts": [
            {"name": n, "context": {"cluster": "c", "user": n, "namespace": f"ns-{n}"}}
            for n in users
        ],
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_inline_data_becomes_private_files_reused_on_reload(tmp_path: Path) -> None:
    cfg = _kubeconfig(
        tmp_path / "config",
        {"a": {"client-certificate-data": _b64("CERT a"), "client-key-data": _b64("KEY a")}},
        cluster={"server": "https://10.0.0.1:6443/", "certificate-authority-data": _b64("CA")},
    )
    cred = credentials.load(cfg)
    assert cred.server == "https://10.0.0.1:6443" and cred.verify and cred.token is None
    assert Path(cred.ca_file or "").read_text() == "CA"
    assert Path(cred.cert_file or "").read_text() == "CERT a"
    assert Path(cred.key_file or "").read_text() == "KEY a"
    assert stat.S_IMODE(os.stat(cred.key_file or "").st_mode) == 0o600
    assert credentials.load(cfg) == cred  # the same files, not new ones per load


def test_context_selects_the_user_and_namespace(tmp_path: Path) -> None:
    cfg = _kubeconfig(tmp_path / "config", {"a": {"token": "ta"}, "b": {"token": "tb"}})
    assert credentials.load(cfg).authorization == "Bearer ta"
    assert credentials.load(cfg, "b").authorization == "Bearer tb"
    assert credentials.current_namespace(cfg) == "ns-a"
    assert credentials.current_namespace(cfg, "b") == "ns-b"
    with pytest.raises(CredentialsError, match="no context named 'z'"):
        credentials.load(cfg, "z")


def test_paths_are_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    for name in ("ca.crt", "u.crt", "u.key"):
        (tmp_path / "pki" / name).write_text(name)
    (tmp_path / "tok").write_text("from-file\n")
    cfg = _kubeconfig(
        tmp_path / "config",
        {"a": {"client-certificate": "pki/u.crt", "client-key": "pki/u.key", "tokenFile": "tok"}},
        cluster={"server": "https://h:1", "certificate-authority": "pki/ca.crt"},
    )
    cred = credentials.load(cfg)
    assert cred.ca_file == str(tmp_path / "pki" / "ca.crt")
    assert cred.cert_file == str(tmp_path / "pki" / "u.crt")
    assert cred.authorization == "Bearer from-file"
    (tmp_path / "pki" / "u.key").unlink()
    with pytest.raises(CredentialsError, match=r"client-key .*u\.key does not exist"):
        credentials.load(cfg)


def test_insecure_and_unsupported_auth(tmp_path: Path) -> None:
    cfg = _kubeconfig(
        tmp_path / "config",
        {"a": {"token": "t"}},
        cluster={"server": "https://h:1", "insecure-skip-tls-verify": True},
    )
    assert not credentials.load(cfg).verify
    old = _kubeconfig(tmp_path / "old", {"a": {"auth-provider": {"name": "gcp"}}})
    with pytest.raises(CredentialsError, match="auth-provider"):
        credentials.load(old)


def test_exec_plugin_token_and_certificate(tmp_path: Path) -> None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, os, sys\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "if sys.argv[1] == 'fail':\n"
        "    print('token expired, run login', file=sys.stderr); sys.exit(3)\n"
        "status = {'token': os.environ['TOKEN'] + '-' + info['spec']['cluster']['server']}\n"
        "if sys.argv[1] == 'cert':\n"
        "    status = {'clientCertificateData': 'PEM CERT', 'clientKeyData': 'PEM KEY'}\n"
        "print(json.dumps({'apiVersion': info['apiVersion'], 'kind': 'ExecCredential',\n"
        "                  'status': status}))\n"
    )

    def user(mode: str) -> dict[str, Any]:
        return {
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": sys.executable,
                "args": [str(plugin), mode],
                "env": [{"name": "TOKEN", "value": "tok"}],
                "provideClusterInfo": True,
            }
        }

    cfg = _kubeconfig(
        tmp_path / "config", {"a": user("token"), "b": user("cert"), "c": user("fail")}
    )
    assert credentials.load(cfg).authorization == "Bearer tok-https://10.0.0.1:6443/"
    cert = credentials.load(cfg, "b")
    assert Path(cert.cert_file or "").read_text() == "PEM CERT"
    assert Path(cert.key_file or "").read_text() == "PEM KEY" and cert.token is None
    with pytest.raises(CredentialsError, match="exited 3: token expired, run login"):
        credentials.load(cfg, "c")


def test_in_cluster_when_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", tmp_path / "sa")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(CredentialsError, match="not in a Pod"):
        credentials.load()
    (tmp_path / "sa").mkdir()
    (tmp_path / "sa" / "token").write_text("sa-token")
    (tmp_path / "sa" / "ca.crt").write_text("CA")
    (tmp_path / "sa" / "namespace").write_text("team")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cred = credentials.load()
    assert cred.server == "https://[fd00::1]:443" and cred.authorization == "Bearer sa-token"
    assert cred.ca_file == str(tmp_path / "sa" / "ca.crt")
    assert credentials.current_namespace() == "team"
    # Named explicitly, a missing kubeconfig is an error, never a silent in-cluster login.
    with pytest.raises(CredentialsError, match="cannot read kubeconfig"):
        credentials.load(str(tmp_path / "absent"))


def test_broken_kubeconfig_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "config"
    bad.write_text("clusters: [\n")
    with pytest.raises(CredentialsError, match="not valid YAML"):
        credentials.load(str(bad))
    bad.write_text("- a list\n")
    with pytest.raises(CredentialsError, match="not a mapping"):
        credentials.load(str(bad))
    bad.write_text("clusters: []\n")
    with pytest.raises(CredentialsError, match="no current-context"):
        credentials.load(str(bad))


def test_the_operator_runs_without_the_kubernetes_package() -> None:
    """The operator's image has no `kubernetes` package, and in a venv that has one the
    operator does not import it (kopf would, 10 MiB): everything it runs on imports
    without it."""
    import subprocess

    probe = (
        "import sys; from kerasjob.cli import app as cli; cli._without_kubernetes_package(); "
        "import kopf, kerasjob.control.handlers, kerasjob.sdk, kerasjob.k8s.kube, "
        "kerasjob.k8s.credentials; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'), "
        "sys.modules['kubernetes'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['kubernetes'] None"


def test_an_inline_data_file_is_reused_only_with_the_same_content(tmp_path: Path) -> None:
    """The temp directory is shared: a file already there under the content's name is used
    only if it holds exactly that content."""
    cfg = _kubeconfig(
        tmp_path / "config",
        {"a": {"token": "t"}},
        cluster={"server": "https://h:1", "certificate-authority-data": _b64(f"CA {tmp_path}")},
    )
    ca = Path(credentials.load(cfg).ca_file or "")
    ca.write_text("planted")
    again = Path(credentials.load(cfg).ca_file or "")
    assert again.read_text() == f"CA {tmp_path}"
    ca.unlink(missing_ok=True)


def test_the_controllers_tls_context_follows_verify_and_the_client_certificate(
    tmp_path: Path,
) -> None:
    import ssl
    import subprocess

    from kerasjob.k8s.kube import _load_auth

    key, cert = tmp_path / "tls.key", tmp_path / "tls.crt"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-subj",
            "/CN=kerasjob-test",
            "-days",
            "1",
        ],
        check=True,
        capture_output=True,
    )
    client = {"client-certificate": str(cert), "client-key": str(key)}
    verified = {"server": "https://10.0.0.1:6443", "certificate-authority": str(cert)}
    insecure = {"server": "https://10.0.0.1:6443", "insecure-skip-tls-verify": True}

    ctx = _load_auth(_kubeconfig(tmp_path / "a", {"a": client}, cluster=verified), None).ssl_context
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.get_ca_certs()[0]["subject"] == ((("commonName", "kerasjob-test"),),)

    ctx = _load_auth(_kubeconfig(tmp_path / "b", {"a": client}, cluster=insecure), None).ssl_context
    assert isinstance(ctx, ssl.SSLContext)  # no check of the server, a certificate to show
    assert ctx.verify_mode == ssl.CERT_NONE and not ctx.check_hostname

    auth = _load_auth(_kubeconfig(tmp_path / "c", {"a": {"token": "t"}}, cluster=insecure), None)
    assert auth.ssl_context is False and auth.headers["Authorization"] == "Bearer t"
