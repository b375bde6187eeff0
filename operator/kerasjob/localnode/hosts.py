"""DNS for Pods on the local node, through /etc/hosts.

There is no cluster DNS server on the local node. Each Pod's network namespace gets its own
hosts file, /etc/netns/<netns>/hosts, which `ip netns exec` bind-mounts over /etc/hosts. It
lists the headless-service names (`<hostname>.<subdomain>.<namespace>.svc.cluster.local` and
the shorter forms a Pod's DNS search path would complete) of every Pod on the node. Because a
bind mount pins the inode, updates are written in place, never by rename.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CLUSTER_DOMAIN = "cluster.local"

_HEADER = """# Written by the kerasjob local node agent; rewritten in place as Pods come and go.
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
"""


@dataclass(frozen=True)
class PodAddress:
    """What the hosts file needs to know about one Pod."""

    namespace: str
    name: str
    ip: str
    hostname: str
    subdomain: str | None = None

    @classmethod
    def from_pod(cls, pod: dict, ip: str) -> PodAddress:
        meta, spec = pod["metadata"], pod.get("spec", {})
        return cls(
            namespace=meta["namespace"],
            name=meta["name"],
            ip=ip,
            hostname=spec.get("hostname") or meta["name"],
            subdomain=spec.get("subdomain") or None,
        )


def dns_names(pod: PodAddress, viewer_namespace: str) -> list[str]:
    """The names under which `pod` resolves from a Pod in `viewer_namespace`.

    Only Pods with a subdomain have DNS records in Kubernetes (through their headless
    Service). The two-label form `<hostname>.<subdomain>` only resolves from the same
    namespace, because it is completed by the `<namespace>.svc.cluster.local` search domain.
    """
    if not pod.subdomain:
        return []
    base = f"{pod.hostname}.{pod.subdomain}.{pod.namespace}"
    names = [f"{base}.svc.{CLUSTER_DOMAIN}", f"{base}.svc", base]
    if pod.namespace == viewer_namespace:
        names.append(f"{pod.hostname}.{pod.subdomain}")
    return names


def render_hosts(viewer: PodAddress, pods: Iterable[PodAddress]) -> str:
    """The hosts file of `viewer`: localhost, its own hostname, then every Pod's DNS names."""
    lines = [_HEADER.rstrip("\n")]
    own = [*dns_names(viewer, viewer.namespace), viewer.hostname]
    lines.append(f"{viewer.ip}\t{' '.join(own)}")
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if (pod.namespace, pod.name) == (viewer.namespace, viewer.name):
            continue
        names = dns_names(pod, viewer.namespace)
        if names:
            lines.append(f"{pod.ip}\t{' '.join(names)}")
    return "\n".join(lines) + "\n"


def write_in_place(path: Path, content: str) -> None:
    """Replace the file's content keeping its inode, so existing bind mounts see the update.

    Written as one write then truncate, so a reader sees either the old or the new lines
    (possibly followed by a stale tail for an instant), never an empty file.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
