"""The local node's network: a Linux bridge and one network namespace + veth pair per Pod.

The bridge carries the agent's private subnet (the host side holds the first address, so
the host, and the operator on it, can reach every Pod IP). A Pod's namespace has only
loopback and its eth0 on that subnet: no default route, no NAT, so nothing a Pod sends can
leave the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

NETNS_PREFIX = "kj-"
VETH_PREFIX = "kjv"
NETNS_ETC = Path("/etc/netns")
_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21


class NetworkError(RuntimeError):
    pass


def netns_name(namespace: str, pod: str) -> str:
    """`kj-<namespace>-<pod>`, made safe for a file name under /run/netns."""
    raw = f"{NETNS_PREFIX}{namespace}-{pod}"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "-", raw)
    if len(safe) > 200:
        digest = hashlib.sha1(raw.encode()).hexdigest()[:10]
        safe = f"{safe[:180]}-{digest}"
    return safe


def veth_names(uid: str) -> tuple[str, str]:
    """Host-side and (temporary) pod-side interface names; interface names are at most 15
    characters, so they are derived from a hash of the Pod uid."""
    digest = hashlib.sha1(uid.encode()).hexdigest()[:10]
    return f"{VETH_PREFIX}{digest}", f"kjp{digest}"


def missing_prerequisites() -> list[str]:
    """What this machine lacks to run Pods in network namespaces (empty when all is there)."""
    problems = []
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("mount", "util-linux")):
        if shutil.which(tool) is None:
            problems.append(f"the `{tool}` command (package {package}) is not installed")
    caps = _effective_caps()
    if os.geteuid() != 0 and not (caps >> _CAP_SYS_ADMIN & 1 and caps >> _CAP_NET_ADMIN & 1):
        problems.append(
            "network and mount namespaces need root (or CAP_SYS_ADMIN and CAP_NET_ADMIN); "
            "run the agent with sudo"
        )
    return problems


def _effective_caps() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def link_exists(name: str) -> bool:
    return ip("link", "show", "dev", name, check=False).returncode == 0


def setup_bridge(bridge: str, gateway: str, prefixlen: int) -> None:
    if not link_exists(bridge):
        ip("link", "add", bridge, "type", "bridge")
    ip("addr", "replace", f"{gateway}/{prefixlen}", "dev", bridge)
    ip("link", "set", bridge, "up")


def delete_link(name: str) -> None:
    if link_exists(name):
        ip("link", "del", name, check=False)


def create_pod_network(netns: str, uid: str, bridge: str, pod_ip: str, prefixlen: int) -> None:
    """Namespace + veth pair: host end on the bridge, pod end as eth0 with `pod_ip`."""
    host_if, peer_if = veth_names(uid)
    delete_pod_network(netns, uid)  # a half-made one from an interrupted attempt
    ip("netns", "add", netns)
    ip("link", "add", host_if, "type", "veth", "peer", "name", peer_if)
    ip("link", "set", peer_if, "netns", netns)
    ip("link", "set", host_if, "master", bridge, "up")
    ip("-n", netns, "link", "set", "lo", "up")
    ip("-n", netns, "link", "set", peer_if, "name", "eth0")
    ip("-n", netns, "addr", "add", f"{pod_ip}/{prefixlen}", "dev", "eth0")
    ip("-n", netns, "link", "set", "eth0", "up")
    # A resolv.conf pointing at the namespace's own loopback: names that are not in the
    # hosts file fail at once instead of waiting for an unreachable DNS server.
    etc = NETNS_ETC / netns
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")


def hosts_path(netns: str) -> Path:
    return NETNS_ETC / netns / "hosts"


def netns_pids(netns: str) -> list[int]:
    proc = ip("netns", "pids", netns, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def kill_netns_processes(netns: str) -> None:
    for pid in netns_pids(netns):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def delete_pod_network(netns: str, uid: str | None = None) -> None:
    """Remove the namespace, its veth and its /etc/netns files; kills leftover processes."""
    if uid is not None:
        delete_link(veth_names(uid)[0])
    if netns in list_netns():
        kill_netns_processes(netns)
        ip("netns", "del", netns, check=False)
    shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)
    with contextlib.suppress(OSError):
        NETNS_ETC.rmdir()  # only when empty: /etc/netns may hold others' files


def list_netns(prefix: str = "") -> list[str]:
    out = ip("netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]


def cleanup_all(bridge: str) -> list[str]:
    """Remove every namespace, veth and /etc/netns dir of ours, and the bridge. Returns what
    was removed (to report leftovers of a crashed agent)."""
    removed = []
    for name in list_netns(NETNS_PREFIX):
        delete_pod_network(name)
        removed.append(f"netns {name}")
    links = ip("-o", "link", "show", check=False).stdout
    for m in re.finditer(rf"^\d+: ({VETH_PREFIX}[0-9a-f]+)[@:]", links, re.M):
        delete_link(m.group(1))
        removed.append(f"link {m.group(1)}")
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.glob(f"{NETNS_PREFIX}*"):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(f"dir {d}")
    if link_exists(bridge):
        delete_link(bridge)
        removed.append(f"bridge {bridge}")
    return removed
