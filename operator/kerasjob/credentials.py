"""Credentials: the ONE place where the operator, the SDK, the CLI and the dev tools load them.

`client_configuration` reads a kubeconfig (an explicit file, else $KUBECONFIG, else
~/.kube/config) with an optional context, and falls back to the in-cluster ServiceAccount
when no kubeconfig is there. The result is a `kubernetes.client.Configuration`: host, CA,
client certificate and bearer token, from which each client builds its own transport
(aiohttp in the operator, urllib3 in the SDK).
"""

from __future__ import annotations

import os

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config


def default_kubeconfig() -> str:
    """The kubeconfig file used when none is named: the first of $KUBECONFIG, ~/.kube/config."""
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return os.path.expanduser(first or "~/.kube/config")


def client_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> k8s_client.Configuration:
    """Credentials from ``kubeconfig`` (default: $KUBECONFIG, ~/.kube/config), else in-cluster.

    The path is passed explicitly: the `kubernetes` package fixes its default kubeconfig path
    when it is imported, before the command line could have set $KUBECONFIG. An explicit
    ``kubeconfig`` or ``context`` that cannot be loaded is an error (no silent in-cluster
    fallback); raises `kubernetes.config.ConfigException` or FileNotFoundError.
    """
    cfg = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=kubeconfig or default_kubeconfig(),
            context=context,
            client_configuration=cfg,
        )
    except (k8s_config.ConfigException, FileNotFoundError, TypeError):
        if kubeconfig or context:
            raise
        k8s_config.load_incluster_config(client_configuration=cfg)
    return cfg


def current_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's (current or named) context, else the ServiceAccount's
    namespace in a Pod, else "default" (kubectl's rule)."""
    try:
        contexts, current = k8s_config.list_kube_config_contexts(
            config_file=kubeconfig or default_kubeconfig()
        )
        chosen = next((c for c in contexts if c["name"] == context), None) if context else current
        ns = ((chosen or {}).get("context") or {}).get("namespace")
        if ns:
            return str(ns)
    except (k8s_config.ConfigException, FileNotFoundError, TypeError, OSError):
        pass
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"
